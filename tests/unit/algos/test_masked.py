import math

import pytest
import torch

from tether.algos.masked import masked_mean, masked_sum, masked_var, masked_whiten

X = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
M = torch.tensor([[1, 1, 0], [1, 0, 0]], dtype=torch.bool)


def test_sum_and_mean_all():
    # kept: 1 + 2 + 4 = 7 over 3 positions
    assert masked_sum(X, M).item() == pytest.approx(7.0)
    assert masked_mean(X, M).item() == pytest.approx(7 / 3)


def test_sum_and_mean_along_dim():
    # row 0: (1 + 2) / 2 = 1.5 ; row 1: 4 / 1 = 4
    torch.testing.assert_close(masked_sum(X, M, dim=1), torch.tensor([3.0, 4.0]))
    torch.testing.assert_close(masked_mean(X, M, dim=1), torch.tensor([1.5, 4.0]))
    # column 0: (1 + 4) / 2 ; column 1: 2 / 1 ; column 2: empty -> 0
    torch.testing.assert_close(masked_mean(X, M, dim=0), torch.tensor([2.5, 2.0, 0.0]))


def test_float_mask_equals_bool_mask():
    torch.testing.assert_close(masked_mean(X, M.float(), dim=1), masked_mean(X, M, dim=1))
    torch.testing.assert_close(masked_var(X, M.float()), masked_var(X, M))


def test_empty_mask_gives_zero_not_nan():
    empty = torch.zeros_like(M)
    assert masked_mean(X, empty).item() == 0.0
    assert masked_var(X, empty).item() == 0.0
    torch.testing.assert_close(masked_mean(X, empty, dim=1), torch.zeros(2))


def test_garbage_in_padding_is_ignored_including_grad():
    x = X.clone()
    x[0, 2], x[1, 2] = float("inf"), float("nan")
    x.requires_grad_(True)
    out = masked_mean(x, M)
    out.backward()
    assert out.item() == pytest.approx(7 / 3)
    # d mean / d x = 1/3 on the 3 kept positions, exactly 0 (not NaN) elsewhere
    torch.testing.assert_close(x.grad, M.float() / 3)


def test_var_hand_worked():
    # kept values 1, 2, 4: mean 7/3, squared deviations 16/9 + 1/9 + 25/9 = 42/9 = 14/3
    assert masked_var(X, M).item() == pytest.approx(14 / 3 / 2)  # unbiased: /(n-1) = 7/3
    assert masked_var(X, M, unbiased=False).item() == pytest.approx(14 / 3 / 3)  # 14/9
    torch.testing.assert_close(masked_var(X, M), X[M].var())


def test_var_single_element_has_no_bessel():
    one = torch.zeros_like(M)
    one[1, 1] = True
    assert masked_var(X, one).item() == 0.0


def test_whiten_hand_worked():
    # mean 7/3, unbiased var 7/3 -> (x - 7/3) / sqrt(7/3 + eps)
    w = masked_whiten(X, M)
    s = math.sqrt(7 / 3)
    expected = torch.tensor([[(1 - 7 / 3) / s, (2 - 7 / 3) / s, 0.0], [(4 - 7 / 3) / s, 0.0, 0.0]])
    torch.testing.assert_close(w, expected)


def test_whiten_properties_random():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 10, generator=g) * 3 + 5
    mask = torch.rand(4, 10, generator=g) > 0.3
    w = masked_whiten(x, mask)
    assert masked_mean(w, mask).item() == pytest.approx(0.0, abs=1e-5)
    assert masked_var(w, mask).item() == pytest.approx(1.0, abs=1e-4)
    assert (w[~mask] == 0).all()


def test_whiten_keep_mean():
    # shift_mean=False: scaled deviations plus the original mean 7/3
    w = masked_whiten(X, M, shift_mean=False)
    assert masked_mean(w, M).item() == pytest.approx(7 / 3, abs=1e-5)
    assert masked_var(w, M).item() == pytest.approx(1.0, abs=1e-5)
    assert (w[~M] == 0).all()
