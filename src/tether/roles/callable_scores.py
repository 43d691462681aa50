"""A reward callable's call and answer, checked where it is called (:class:`~tether.roles.reward.CallableReward`).

User code fails in its own ways: it raises, returns None, a string, one float for the whole batch
(which torch would broadcast), a list of the wrong length, or NaN. Each becomes one paragraph that
names the callable (``module:function``, as ``reward.callable`` gives it), what came back and what
was expected, a list of B floats, one per response. A NaN or infinite score is refused, naming the
row: normalised, it would turn every advantage of the batch into NaN.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable

import torch
from torch import Tensor

from tether.common.errors import ModelError, TrainingError, one_line

#: How many bad rows an error lists.
SHOWN = 3


def call_reward(fn: Callable, name: str, prompts: list[str], responses: list[str]):
    """``fn(prompts, responses)``; an exception it raises is a TrainingError naming ``name``, the
    exception's type and message (the traceback is the callable's own bug, not the run's)."""
    try:
        return fn(prompts, responses)
    except Exception as err:  # noqa: BLE001 - user code: any exception is reported the same way
        said = one_line(err, 300).rstrip(".") or "(no message)"
        raise TrainingError(
            f"Reward callable '{name}' raised {type(err).__name__}: {said}, scoring {len(responses)} responses. "
            "Fix the callable (call it on a few prompts and responses to see the traceback); it must return a "
            "list of one float per response."
        ) from None


def reward_scores(values, name: str, responses: list[str]) -> Tensor:
    """(B,) float32 scores from what the callable ``name`` returned for ``responses`` (B of them):
    a sequence of B real numbers (a list, tuple, 1-D tensor or array). Anything else, and a
    non-finite score, is a ModelError: the callable is unfit for the role."""
    n = len(responses)
    rows = _as_rows(values, name, n)
    bad = [(i, v) for i, v in enumerate(rows) if not _real(v)]
    if bad:
        shown = ", ".join(f"row {i}: {_show(v)}" for i, v in bad[:SHOWN])
        raise ModelError(_expected(name, n, f"{len(bad)} value(s) that are not numbers ({shown})"))
    scores = torch.tensor([float(v) for v in rows], dtype=torch.float32)
    nonfinite = [i for i in range(n) if not math.isfinite(float(scores[i]))]
    if nonfinite:
        shown = ", ".join(f"row {i} ({float(scores[i])}, response {_show(responses[i])})" for i in nonfinite[:SHOWN])
        raise ModelError(
            f"Reward callable '{name}' returned a non-finite score for {len(nonfinite)} of {n} responses ({shown}): "
            "normalised with the others it would make every advantage of the batch NaN. Expected a finite float per "
            "response; return a low score (not NaN) for a response it cannot judge."
        )
    return scores


def _as_rows(values, name: str, n: int) -> list:
    """``values`` as a list of B row values, or the error of what it is instead."""
    if values is None:
        raise ModelError(_expected(name, n, "None (does the function end without a return?)"))
    if isinstance(values, (str, bytes)):
        raise ModelError(_expected(name, n, f"a {type(values).__name__}, {_show(values)}"))
    single = isinstance(values, numbers.Number) or getattr(values, "ndim", None) == 0  # 0-d tensors too
    if single or not (hasattr(values, "__len__") and hasattr(values, "__iter__")):
        raise ModelError(_expected(name, n, f"a single {type(values).__name__}, {_show(values)}, not one per "
                                            "response (tether does not broadcast it)"))
    if isinstance(values, Tensor) or hasattr(values, "ndim"):  # a tensor or an array: one dimension of B
        if values.ndim != 1:
            raise ModelError(_expected(name, n, f"a {type(values).__name__} of shape {tuple(values.shape)}"))
        values = values.tolist()
    rows = list(values)
    if len(rows) != n:
        raise ModelError(_expected(name, n, f"{len(rows)} scores"))
    return rows


def _real(value) -> bool:
    """A real number a score can be: int, float, bool, a numpy scalar, a one-element tensor."""
    if isinstance(value, Tensor):
        return value.numel() == 1 and not value.is_complex()
    return isinstance(value, numbers.Real)


def _expected(name: str, n: int, got: str) -> str:
    return (f"Reward callable '{name}' returned {got} for {n} responses; expected a list of {n} floats, one per "
            "response, in the order of the responses it was given.")


def _show(value) -> str:
    """A value as the error quotes it: its repr, cut to 60 characters."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
