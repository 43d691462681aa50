"""How an LLM judge is asked, and how its answer is read (RLAIF): pure functions on text.

A **rubric** is a text (a file: a constitution's principles, a scoring guide) with the placeholders
``{prompt}`` and ``{response}`` (pairwise: ``{response_a}`` and ``{response_b}``), filled by plain
replacement, so braces in a response are never read as a format. The judge's answer is read by a
declared **format**: a regular expression whose first group is the verdict. The *last* match counts
(a judge that reasons first ends with its verdict); a pointwise score must be a finite number within
the scale ``[low, high]``. An answer without one is *unparseable*: ``None`` here, counted and handled
by the caller's stated rule, never a silent number.

Pairwise judging asks both orders to cancel position bias (Zheng et al. 2023, "Judging LLM-as-a-
Judge"): :func:`pairwise_outcome` keeps a verdict only when the two orders agree on the same
response, and calls a disagreement a tie (counted as an order disagreement).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

#: "Score: 7", "score = 7.5", "SCORE: -1" (the number is the group).
SCORE_PATTERN = r"(?i)\bscore\s*[:=]\s*\**\s*(-?\d+(?:\.\d+)?)"
#: "Winner: A", "winner = [[B]]", "Winner: tie".
PREFERENCE_PATTERN = r"(?i)\bwinner\s*[:=]\s*\W{0,4}(A|B|tie)\b"


#: The rubric a judge term uses when it names none: a 1-10 score, the answer ending "Score: N".
DEFAULT_RUBRIC = """You are grading an assistant's answer to a user's request.

Request:
{prompt}

Answer:
{response}

Judge whether the answer is correct, helpful and to the point. Reply with one short sentence of \
reasons, then a last line of the form "Score: N", where N is an integer from 1 (useless or wrong) \
to 10 (correct and ideal)."""


@dataclass(frozen=True)
class ScoreFormat:
    """A pointwise judge's declared answer: ``pattern`` (its first group: the score) and the scale."""

    pattern: str = SCORE_PATTERN
    low: float = 1.0
    high: float = 10.0

    def __post_init__(self):
        compiled = re.compile(self.pattern)
        if compiled.groups < 1:
            raise ValueError(f"the score pattern {self.pattern!r} has no group: its first group is the score")
        if not (math.isfinite(self.low) and math.isfinite(self.high) and self.low < self.high):
            raise ValueError(f"the score scale [{self.low}, {self.high}] is not a finite range with low < high")


def fill(template: str, **fields: str) -> str:
    """``template`` with each ``{name}`` replaced by ``fields[name]``, by plain replacement (a
    response's own braces stay as written). Every field must have its placeholder."""
    missing = [name for name in fields if "{" + name + "}" not in template]
    if missing:
        raise ValueError(f"the rubric has no placeholder {', '.join('{' + m + '}' for m in missing)}")
    out = template
    for name, value in fields.items():
        out = out.replace("{" + name + "}", value)
    return out


def last_match(pattern: str, text: str) -> str | None:
    """The first group of the last match of ``pattern`` in ``text``, or None."""
    found = None
    for found in re.finditer(pattern, text):
        pass
    return None if found is None else found.group(1)


def parse_score(text: str | None, fmt: ScoreFormat = ScoreFormat()) -> float | None:
    """The score in a judge's answer: the last match of the format, a finite number within
    [low, high]; None when there is none (no match, out of the scale, no answer)."""
    if not text:
        return None
    found = last_match(fmt.pattern, text)
    if found is None:
        return None
    try:
        value = float(found)
    except ValueError:
        return None
    return value if math.isfinite(value) and fmt.low <= value <= fmt.high else None


def to_unit(score: float, fmt: ScoreFormat) -> float:
    """A score on the format's scale mapped linearly onto [0, 1] (low -> 0, high -> 1)."""
    return (score - fmt.low) / (fmt.high - fmt.low)


def parse_preference(text: str | None, pattern: str = PREFERENCE_PATTERN) -> str | None:
    """"A", "B" or "tie" from a pairwise judge's answer (the last match), or None."""
    if not text:
        return None
    found = last_match(pattern, text)
    if found is None:
        return None
    found = found.strip()
    return "tie" if found.lower() == "tie" else found.upper() if found.upper() in ("A", "B") else None


def pairwise_outcome(first: str | None, swapped: str | None) -> tuple[float | None, bool]:
    """(how much the first response wins, whether the orders disagreed) from the verdicts of both
    orders: ``first`` asked with (x as A, y as B), ``swapped`` with (y as A, x as B).

    Each order votes for x (1), for y (0) or half (a tie, 0.5); the outcome is the mean of the two
    votes: both pick x (A, then B): 1.0; both pick y: 0.0; both tie: 0.5; one ties and the other
    picks x: 0.75 (y: 0.25). Picking the same *position* both times (A and A, B and B) votes for x
    once and for y once: position bias, 0.5 with ``disagreed`` True. An unparseable verdict in
    either order: (None, False)."""
    if first is None or swapped is None:
        return None, False
    x_first = {"A": 1.0, "B": 0.0, "tie": 0.5}[first]
    x_swapped = {"A": 0.0, "B": 1.0, "tie": 0.5}[swapped]
    if x_first == 0.5 or x_swapped == 0.5:
        return (x_first + x_swapped) / 2, False
    if x_first != x_swapped:  # the same position both times
        return 0.5, True
    return x_first, False
