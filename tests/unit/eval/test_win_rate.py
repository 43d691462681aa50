"""Win rates by hand."""

from __future__ import annotations

import pytest

from tether.eval.win_rate import policy_vs_sft, win_rate


def test_win_rate_by_hand() -> None:
    assert win_rate([1.0], [0.0]) == 1.0
    assert win_rate([0.0], [1.0]) == 0.0
    assert win_rate([0.5], [0.5]) == 0.5
    assert win_rate([3, 1, 2, 2], [1, 2, 2, 0]) == pytest.approx((1 + 0 + 0.5 + 1) / 4)
    a, b = [0.3, -1.0, 1.15, 1.0, 0.2], [0.1, -1.0, 1.0, 1.15, 0.9]
    assert win_rate(a, b) + win_rate(b, a) == pytest.approx(1.0)  # symmetric with ties halved


def test_win_rate_errors() -> None:
    with pytest.raises(ValueError, match="paired"):
        win_rate([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="at least one"):
        win_rate([], [])


def _samples(prompts, proxy, gold):
    from tether.eval.sampling import EvalSamples

    n = len(prompts)
    return EvalSamples(prompts=prompts, responses=["x"] * n, ended=[True] * n, lengths=[1] * n,
                       proxy=proxy, gold=gold, kl=None, entropy=[0.5] * n)


def test_policy_vs_sft() -> None:
    prompts = ["p1", "p2", "p3", "p4"]
    ppo = _samples(prompts, [2.0, 1.0, 0.0, 3.0], [1.0, 1.0, -1.0, -1.0])
    sft = _samples(prompts, [1.0, 1.0, 1.0, 1.0], [1.0, -1.0, 1.0, 1.0])
    out = policy_vs_sft(ppo, sft)
    assert out == {"n": 4, "win_rate_proxy": pytest.approx(2.5 / 4), "win_rate_gold": pytest.approx(1.5 / 4)}
    no_gold = policy_vs_sft(_samples(prompts, [1.0] * 4, None), sft)
    assert no_gold["win_rate_gold"] is None and no_gold["win_rate_proxy"] == 0.5
    with pytest.raises(ValueError, match="same prompts"):
        policy_vs_sft(ppo, _samples(list(reversed(prompts)), [1.0] * 4, None))

