"""The RL update's statistics: each role's per-minibatch stats merged into one dict per step,
and the steps averaged into the iteration's (timings summed, diagnostics dropped)."""

from __future__ import annotations

CHECK = "check/"  # stats the roles report for the loop's invariant checks, not logged

SUMMED = ("timing/", "optim/skipped_steps")  # added up over the roles (and, for timing, minibatches)
ACTOR_OFF = {"ppo/policy/loss": 0.0, "ppo/policy/clipfrac": 0.0, "ppo/policy/approxkl": 0.0, "ppo/policy/ratio_mean": 1.0}


def merge_role_steps(per_role: list[list[dict]], n: int, actor_on: bool) -> list[dict]:
    """One stats dict per minibatch from each role's list of per-step stats."""
    merged = []
    for i in range(n):
        step: dict[str, float] = {} if actor_on else dict(ACTOR_OFF)
        for steps in per_role:
            for key, value in (steps[i].items() if i < len(steps) else ()):
                step[key] = step.get(key, 0.0) + value if key.startswith(SUMMED) else value
        merged.append(step)
    return merged


def mean_of(steps: list[dict], key: str) -> float:
    return sum(s.get(key, 0.0) for s in steps) / max(len(steps), 1)


def average_steps(steps: list[dict]) -> dict:
    """Minibatch stats averaged over the steps (timing summed); ``check/`` diagnostics dropped."""
    sums: dict[str, float] = {}
    for step in steps:
        for key, value in step.items():
            sums[key] = sums.get(key, 0.0) + value
    n = max(len(steps), 1)
    return {k: v if k.startswith("timing/") else v / n for k, v in sums.items() if not k.startswith(CHECK)}
