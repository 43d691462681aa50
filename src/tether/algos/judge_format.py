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
response, and calls a disagreement a tie (counted as an order disagreement). Over a group of k
responses to one prompt, every pair is judged so, and a response's score is its mean outcome
against the others (:func:`win_rates`). Group judging asks once for a ranking of all k (``Ranking:
2 > 3 > 1``, :func:`parse_ranking`), again with the responses in reverse order, and averages the two
rankings' scores (:func:`rank_scores`); :func:`discordance` measures how far the two orders disagree.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

#: "Score: 7", "score = 7.5", "SCORE: -1" (the number is the group).
SCORE_PATTERN = r"(?i)\bscore\s*[:=]\s*\**\s*(-?\d+(?:\.\d+)?)"
#: "Winner: A", "winner = [[B]]", "Winner: tie".
PREFERENCE_PATTERN = r"(?i)\bwinner\s*[:=]\s*\W{0,4}(A|B|tie)\b"


#: "Ranking: 2 > 3 > 1" (the group: the ranking, best first, of the numbered responses).
RANKING_PATTERN = r"(?i)\branking\s*[:=]\s*((?:\[?\d+\]?\s*(?:>|,)\s*)*\[?\d+\]?)"


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
    """"A", "B" or "tie" from a pairwise judge's answer (the last match; its group may also read
    "1" or "2" for A or B, for a judge whose vocabulary has numbers but no letters), or None."""
    if not text:
        return None
    found = last_match(pattern, text)
    if found is None:
        return None
    found = found.strip().lower()
    return {"a": "A", "1": "A", "b": "B", "2": "B", "tie": "tie"}.get(found)


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


def gold_agreement(outcomes: list[float], margins: list[float]) -> tuple[float | None, int]:
    """(agreement with a gold judge, pairs it decides): ``outcomes[i]``, how much pair i's first
    response wins for a labeller (1, 0, 0.5 for a tie or a position-biased judge); ``margins[i]``,
    the gold score of the first minus the second. Over pairs with a nonzero margin, the mean share
    the labeller gives gold's better response (``outcome`` if the margin is positive, else
    ``1 - outcome``); pairs gold ties are left out, so (None, 0) when it ties them all."""
    if len(outcomes) != len(margins):
        raise ValueError(f"{len(outcomes)} outcomes for {len(margins)} gold margins")
    shares = [o if m > 0 else 1.0 - o for o, m in zip(outcomes, margins) if m != 0]
    return (sum(shares) / len(shares) if shares else None), len(shares)


#: Built-in rubric of the pairwise judge: the answer ends "Winner: A", "Winner: B" or "Winner: tie".
DEFAULT_PAIRWISE_RUBRIC = """You are comparing two assistant answers to the same user request.

Request:
{prompt}

Answer A:
{response_a}

Answer B:
{response_b}

Which answer is more correct, helpful and to the point? Ignore the order they are shown in. Reply \
with one short sentence of reasons, then a last line "Winner: A", "Winner: B" or "Winner: tie"."""

#: Built-in rubric of the group judge: the answer ends "Ranking: 2 > 3 > 1" (every number once).
DEFAULT_GROUP_RUBRIC = """You are ranking several assistant answers to the same user request.

Request:
{prompt}

Answers:
{responses}

Rank the answers from the most correct, helpful and to the point to the least, ignoring the order \
they are shown in. Reply with one short sentence of reasons, then a last line of the form \
"Ranking: 2 > 3 > 1" naming every answer's number once."""


def numbered(responses: list[str]) -> str:
    """The responses of a group as the group rubric shows them: ``[1] ...`` on its own lines."""
    return "\n\n".join(f"[{i + 1}] {r}" for i, r in enumerate(responses))


def win_rates(outcomes: dict[tuple[int, int], float | None], k: int) -> list[float | None]:
    """Each of ``k`` responses' mean outcome against the others: ``outcomes[(i, j)]`` (i < j) is how
    much i beat j (:func:`pairwise_outcome`; j's is 1 minus it), None for a failed comparison, left
    out. A response with no comparison left: None."""
    totals, counts = [0.0] * k, [0] * k
    for (i, j), x in outcomes.items():
        if x is None:
            continue
        totals[i] += x
        totals[j] += 1.0 - x
        counts[i] += 1
        counts[j] += 1
    return [t / c if c else None for t, c in zip(totals, counts)]


def parse_ranking(text: str | None, k: int, pattern: str = RANKING_PATTERN) -> list[int] | None:
    """The ranking in a group judge's answer as 0-based response indices, best first: the last match
    of ``pattern``, which must name each of 1..k exactly once; else None."""
    if not text:
        return None
    found = last_match(pattern, text)
    if found is None:
        return None
    numbers = [int(n) for n in re.findall(r"\d+", found)]
    if sorted(numbers) != list(range(1, k + 1)):
        return None
    return [n - 1 for n in numbers]


def rank_scores(ranking: list[int]) -> list[float]:
    """Each response's score from a ranking (indices, best first): ``(k - 1 - place) / (k - 1)``, 1 for
    the best and 0 for the worst."""
    k = len(ranking)
    if k < 2:
        raise ValueError(f"a ranking needs at least 2 responses, got {k}")
    scores = [0.0] * k
    for place, i in enumerate(ranking):
        scores[i] = (k - 1 - place) / (k - 1)
    return scores


def discordance(a: list[int], b: list[int]) -> float:
    """The fraction of response pairs two rankings order differently (Kendall's distance, normalised):
    0 when they agree, 1 when one is the other reversed."""
    k = len(a)
    if sorted(a) != sorted(b) or k < 2:
        raise ValueError(f"discordance needs two rankings of the same 2 or more responses, got {a} and {b}")
    pa, pb = {i: p for p, i in enumerate(a)}, {i: p for p, i in enumerate(b)}
    pairs = [(i, j) for i in range(k) for j in range(i + 1, k)]
    return sum((pa[i] - pa[j]) * (pb[i] - pb[j]) < 0 for i, j in pairs) / len(pairs)
