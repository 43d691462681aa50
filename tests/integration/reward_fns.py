"""A python reward callable for the PPO integration tests (``reward.callable=reward_fns:gold``)."""

from __future__ import annotations

from tether.tasks.arith.judge import gold_score

CALLS: list[tuple[list[str], list[str], list[float]]] = []


def gold(prompts: list[str], responses: list[str]) -> list[float]:
    """The task's gold judge on each (prompt, response); every call is recorded in CALLS."""
    scores = [gold_score(p, r, True) for p, r in zip(prompts, responses)]
    CALLS.append((list(prompts), list(responses), scores))
    return scores


def brief(prompts: list[str], responses: list[str]) -> list[float]:
    """1 for an empty answer, less the longer it is: a reward any policy can learn in a few steps."""
    return [1.0 - min(len(r), 40) / 20 for r in responses]
