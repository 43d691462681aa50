"""Win rates: how often one policy's response beats another's on the same prompt.

Reference text 004 lists a judge win rate against SFT among the curves to watch ("small-sample
win rate gradually improves"; danger: "diverging from RM reward"). Computing it both by the
proxy (the RM) and by the gold judge shows exactly that divergence.

    rates = policy_vs_sft(ppo_samples, sft_samples)   # two EvalSamples, same prompts, same order
    # {"n": 512, "win_rate_proxy": 0.71, "win_rate_gold": 0.58}
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover - typing only; keeps this module free of torch
    from tether.eval.sampling import EvalSamples


def win_rate(scores_a: Sequence[float], scores_b: Sequence[float]) -> float:
    """Share of paired items where a beats b; a tie counts half. Both lists pair item by item."""
    if len(scores_a) != len(scores_b):
        raise ValueError(f"win_rate needs paired scores: got {len(scores_a)} and {len(scores_b)}")
    if not scores_a:
        raise ValueError("win_rate needs at least one pair of scores")
    total = 0.0
    for a, b in zip(scores_a, scores_b):
        total += 1.0 if a > b else 0.5 if a == b else 0.0
    return total / len(scores_a)


def policy_vs_sft(policy: "EvalSamples", sft: "EvalSamples") -> dict:
    """Win rates of ``policy`` over ``sft`` from two evaluations on the same prompts.

    Both must come from ``evaluate_policy`` on the same prompt list (same order). Returns
    ``{"n", "win_rate_proxy", "win_rate_gold"}``; a rate is None when that score was not measured
    for both.
    """
    if list(policy.prompts) != list(sft.prompts):
        raise ValueError("policy_vs_sft needs both evaluations on the same prompts in the same order")
    out = {"n": len(policy.prompts), "win_rate_proxy": None, "win_rate_gold": None}
    if policy.proxy is not None and sft.proxy is not None:
        out["win_rate_proxy"] = win_rate(policy.proxy, sft.proxy)
    if policy.gold is not None and sft.gold is not None:
        out["win_rate_gold"] = win_rate(policy.gold, sft.gold)
    return out


__all__ = ["policy_vs_sft", "win_rate"]
