import math

import pytest
import torch

from tether.algos.kl import kl_estimate, kl_k1, kl_k2, kl_k3

LOGP = torch.tensor([[-1.2]])
REF = torch.tensor([[-1.6]])


def test_hand_worked_values():
    # d = log pi - log pi_ref = -1.2 - (-1.6) = 0.4
    assert kl_k1(LOGP, REF).item() == pytest.approx(0.4)
    # 0.5 * 0.4^2 = 0.08
    assert kl_k2(LOGP, REF).item() == pytest.approx(0.08)
    # exp(-0.4) - 1 + 0.4 = 0.670320 - 0.6 = 0.070320
    assert kl_k3(LOGP, REF).item() == pytest.approx(math.exp(-0.4) - 0.6)
    assert kl_k3(LOGP, REF).item() == pytest.approx(0.070320, abs=1e-6)


def test_shapes_and_dispatch():
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(3, 5, generator=g), torch.randn(3, 5, generator=g)
    for kind, fn in (("k1", kl_k1), ("k2", kl_k2), ("k3", kl_k3)):
        out = kl_estimate(a, b, kind)
        assert out.shape == (3, 5)
        torch.testing.assert_close(out, fn(a, b))


def test_unknown_kind_names_valid_kinds():
    with pytest.raises(ValueError, match="k1, k2, k3"):
        kl_estimate(LOGP, REF, "k4")


def test_k2_k3_nonnegative_and_zero_at_equality():
    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(100, generator=g) * 3, torch.randn(100, generator=g) * 3
    assert (kl_k2(a, b) >= 0).all() and (kl_k3(a, b) >= 0).all()
    assert (kl_k3(a, a) == 0).all() and (kl_k1(a, a) == 0).all()
    tiny = torch.tensor([1e-9, -1e-9], dtype=torch.float64)
    assert (kl_k3(tiny, torch.zeros(2, dtype=torch.float64)) >= 0).all()


def test_k1_k3_unbiased_monte_carlo():
    # tokens sampled from pi: E[k1] = E[k3] = KL(pi || pi_ref) (Schulman 2020)
    g = torch.Generator().manual_seed(2)
    logp_all = torch.log_softmax(torch.randn(6, generator=g), -1)
    ref_all = torch.log_softmax(torch.randn(6, generator=g), -1)
    true_kl = (logp_all.exp() * (logp_all - ref_all)).sum().item()
    idx = torch.multinomial(logp_all.exp(), 200_000, replacement=True, generator=g)
    lp, rp = logp_all[idx], ref_all[idx]
    assert kl_k1(lp, rp).mean().item() == pytest.approx(true_kl, abs=0.02)
    assert kl_k3(lp, rp).mean().item() == pytest.approx(true_kl, abs=0.02)
