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


def raises(prompts: list[str], responses: list[str]) -> list[float]:
    """A judge with a bug: every call divides by zero."""
    return [1.0 / 0 for _ in responses]


def one_float(prompts: list[str], responses: list[str]) -> float:
    """A judge that scores the batch, not each response (torch would broadcast it)."""
    return 0.5


def nan_second(prompts: list[str], responses: list[str]) -> list[float]:
    """A judge that cannot score its second response and says NaN."""
    return [float("nan") if i == 1 else 0.0 for i in range(len(responses))]


def constant(prompts: list[str], responses: list[str]) -> list[float]:
    """The same score for every response: nothing to tell apart."""
    return [0.5] * len(responses)
