"""What an algorithm's ``experience`` returns, checked once where the RL loop calls it
(:func:`experience_of`), for built-in and plugin algorithms alike.

A plugin's advantages of shape (B,) instead of (B, A) broadcast silently against the (B, A) log-probs
(a (B, B) loss of nonsense) or fail deep inside the update with torch's message; a lone Experience
without the stats dict fails at the loop's unpacking. Each is one paragraph naming the algorithm,
its class, the field, what came and what was expected.
"""

from __future__ import annotations

import torch

from tether.common.errors import TrainingError
from tether.types import Experience

#: The per-token fields of an Experience: each (B, A), as the rollout's response mask; the ones an
#: algorithm computes first (the passed-through log-probs and values are rarely the culprit).
PER_TOKEN = ("advantages", "returns", "rewards", "logprobs", "ref_logprobs", "values")


def experience_of(algo, name: str, rollout, *args) -> tuple[Experience, dict]:
    """``algo.experience(rollout, *args)``, its answer checked (:func:`check_experience`);
    ``name``: the algorithm's registered name, for errors."""
    return check_experience(algo.experience(rollout, *args), rollout, name, algo)


def check_experience(answer, rollout, name: str, algo=None) -> tuple[Experience, dict]:
    """``answer`` is ``(Experience, dict)`` with every per-token field a floating (B, A) tensor
    matching ``rollout``'s response mask and ``scores`` (B,); returned as it came."""
    who = _who(name, algo)
    if not (isinstance(answer, tuple) and len(answer) == 2):
        raise TrainingError(f"{who}.experience returned {_what(answer)}; expected a tuple (Experience, dict of "
                            "stats) (an empty dict when it has no stats).")
    exp, stats = answer
    if not isinstance(exp, Experience) or not isinstance(stats, dict):
        raise TrainingError(f"{who}.experience returned ({_what(exp)}, {_what(stats)}); expected (Experience, dict "
                            "of stats).")
    shape = tuple(rollout.response_mask.shape)
    for field in PER_TOKEN:
        value = getattr(exp, field)
        if value is None and field == "values":  # algorithms without a critic
            continue
        _check_tensor(who, field, value, shape, "one per response token")
    _check_tensor(who, "scores", exp.scores, shape[:1], "one per response")
    return exp, stats


def _check_tensor(who: str, field: str, value, shape: tuple, meaning: str) -> None:
    if isinstance(value, torch.Tensor) and tuple(value.shape) == shape and value.is_floating_point():
        return
    got = (f"a {value.dtype} tensor of shape {tuple(value.shape)}" if isinstance(value, torch.Tensor)
           else _what(value))
    raise TrainingError(
        f"{who}.experience returned {field} as {got} for a rollout of {shape[0]} responses"
        + (f" x {shape[1]} response tokens (its response mask)" if len(shape) == 2 else "")
        + f"; expected a floating tensor of shape {shape}, {meaning} (tether.algorithms.base.Algorithm). Nothing "
        "is broadcast.")


def _who(name: str, algo) -> str:
    """``Algorithm 'name' (module:Class)``."""
    if algo is None:
        return f"Algorithm '{name}'"
    cls = type(algo)
    return f"Algorithm '{name}' ({cls.__module__}:{cls.__qualname__})"


def _what(value) -> str:
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)}"
    if isinstance(value, tuple):
        return f"a tuple of {len(value)}"
    if value is None:
        return "None"
    kind = type(value).__name__
    return f"{'an' if kind[0].lower() in 'aeiou' else 'a'} {kind}"
