import math

import pytest
import torch

from tether.algos.stats import RunningMoments, explained_variance, repetition_rate


def test_explained_variance_hand_worked():
    # R = [1,2,3,4]: mean 2.5, unbiased var (2.25+0.25+0.25+2.25)/3 = 5/3
    # V = [1,2,3,3]: R - V = [0,0,0,1], mean 0.25, var (3*0.0625 + 0.5625)/3 = 0.25
    # EV = 1 - 0.25 / (5/3) = 0.85 ; the padded slot (garbage) is ignored
    R = torch.tensor([[1.0, 2.0, 3.0, 4.0, 100.0]])
    V = torch.tensor([[1.0, 2.0, 3.0, 3.0, -100.0]])
    mask = torch.tensor([[1, 1, 1, 1, 0]])
    assert explained_variance(V, R, mask) == pytest.approx(0.85)
    assert explained_variance(R, R, mask) == pytest.approx(1.0)  # perfect critic
    assert explained_variance(torch.zeros_like(R), R, mask) == pytest.approx(0.0, abs=1e-6)  # constant critic
    assert isinstance(explained_variance(V, R, mask), float)


def test_explained_variance_constant_returns_nan():
    assert math.isnan(explained_variance(torch.zeros(1, 3), torch.ones(1, 3), torch.ones(1, 3)))


def test_running_moments_hand_worked():
    rm = RunningMoments()
    assert (rm.mean, rm.std, rm.count) == (0.0, 1.0, 0)
    # batch [1,2,3]: mean 2, unbiased std 1
    assert rm.update(torch.tensor([1.0, 2.0, 3.0])) == pytest.approx((2.0, 1.0))
    # batch [4,5]: mean 4.5, std sqrt(0.5) = 0.707107
    assert rm.update(torch.tensor([4.0, 5.0])) == pytest.approx((4.5, math.sqrt(0.5)))
    # all of 1..5: mean 3, unbiased std sqrt(10/4) = 1.581139
    assert rm.mean == pytest.approx(3.0)
    assert rm.std == pytest.approx(math.sqrt(2.5))
    assert rm.count == 5


def test_running_moments_matches_concatenation_and_roundtrip():
    g = torch.Generator().manual_seed(0)
    batches = [torch.randn(int(n), generator=g) * 3 + 7 for n in (5, 1, 17, 40, 2)]
    rm = RunningMoments()
    for i, b in enumerate(batches):
        rm.update(b.view(-1, 1) if i == 2 else b)  # any shape: all elements count
    allx = torch.cat(batches).double()
    assert rm.mean == pytest.approx(allx.mean().item())
    assert rm.std == pytest.approx(allx.std().item())
    assert rm.count == allx.numel()
    assert rm.update(torch.tensor([])) == (0.0, 0.0) and rm.count == allx.numel()
    rm2 = RunningMoments()
    rm2.load_state_dict(rm.state_dict())
    assert (rm2.mean, rm2.std, rm2.count) == (rm.mean, rm.std, rm.count)


def test_repetition_rate():
    # bigrams (the,cat) (cat,the) (the,cat): 1 of 3 seen before
    assert repetition_rate("the cat the cat".split()) == pytest.approx(1 / 3)
    # unigrams a a a b: 2 of 4 repeat
    assert repetition_rate(["a", "a", "a", "b"], n=1) == pytest.approx(0.5)
    # ids 7 7 7 7 7: 4 bigrams, 3 repeats
    assert repetition_rate([7] * 5) == pytest.approx(0.75)
    assert repetition_rate([1, 2, 3, 4]) == 0.0
    assert repetition_rate([1, 2]) == 0.0  # a single bigram
    assert repetition_rate([]) == 0.0
    with pytest.raises(ValueError):
        repetition_rate([1, 2, 3], n=0)
