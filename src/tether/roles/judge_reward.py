"""The ``judge`` reward kind: an LLM asked to judge the responses by a rubric (RLAIF), in one of three
modes (:mod:`tether.algos.judge_format` reads the answers):

- **pointwise**: one request per response, the rubric filled with its prompt and response; the
  score is the number the declared format finds, within ``[low, high]``;
- **pairwise**: within each group of a prompt's k responses (consecutive rows), every pair asked
  in both orders; a response's score is its mean outcome against the others (0-1, ties 0.5);
- **group**: one request per group ranking its k numbered responses, and one with them in reverse
  order; a response's score is its place (1 best, 0 worst) averaged over the two rankings.

A judgement (a pointwise response, a pairwise comparison, a group ranking) *fails* when a request
got no answer after its retries (timed out, refused, HTTP error, a body without an answer) or the
answer holds no verdict (*unparseable*; a group ranking readable in one order only is scored by that
one, and counted). Both are counted; the stated rule (``judge.on_failure``)
then scores it as no information (pointwise ``low``; pairwise and group 0.5, a failed comparison
left out of the win rates) or stops the run naming it, and a batch where more than
``judge.max_failure_rate`` of the judgements failed stops the run either way (a judge that is down
or answers garbage would otherwise train the policy on a constant).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from tether.algos.judge_format import (ScoreFormat, discordance, fill, numbered, pairwise_outcome,
                                       parse_preference, parse_ranking, parse_score, rank_scores, win_rates)
from tether.common.dispatch import rows
from tether.common.errors import TrainingError, one_line
from tether.distributed.collectives import all_reduce
from tether.roles.reward import OneTerm
from tether.types import Rollout

TIE = 0.5  # pairwise and group: the score of a response the judge told nothing about


@dataclass
class Verdicts:
    """One batch's scores and what its judgements did."""

    scores: list[float]
    judged: int = 0  # judgements: responses (pointwise), comparisons (pairwise), rankings (group)
    failed: int = 0  # a request got no answer
    unparseable: int = 0  # answered without a verdict
    disagreement: float = 0.0  # summed over the judgements asked in both orders
    both_orders: int = 0  # judgements with a verdict in both orders
    unparsed: list[str] = field(default_factory=list)  # answers without a verdict, for the error message


class JudgeReward(OneTerm):
    """``score(rollout) -> (B,)`` by the judge (see the module). ``client`` asks (an endpoint's
    :class:`~tether.roles.judge_client.JudgeClient` or an in-process
    :class:`~tether.roles.local_judge.LocalJudge`); ``group_size``: the consecutive rows that share a
    prompt (pairwise and group modes). ``metrics()``: what the judge did since the last call, under
    ``judge/<name>/``, summed over the ranks that share the scoring."""

    def __init__(self, client, rubric: str, mode: str, pattern: str, scale: ScoreFormat, on_failure: str,
                 max_failure_rate: float, name: str, key: str, group_size: int = 1):
        self.client, self.rubric, self.mode, self.pattern, self.scale = client, rubric, mode, pattern, scale
        self.on_failure, self.max_failure_rate = on_failure, max_failure_rate
        self.name, self.key, self.group_size = name, key, group_size
        self._totals = [0.0] * 6  # judged, failed, unparseable, parsed score sum, disagreement, both orders
        self._reported = client.stats.metrics("")

    @rows
    def score(self, rollout: Rollout) -> Tensor:
        prompts, responses = list(rollout.prompts), list(rollout.responses)
        if self.mode == "pointwise":
            verdicts = self.pointwise(prompts, responses)
        else:
            groups = self.groups(prompts)
            verdicts = self.pairwise(prompts, responses, groups) if self.mode == "pairwise" else \
                self.ranked(prompts, responses, groups)
        parsed = [s for s in verdicts.scores if s is not None]
        for i, value in enumerate((verdicts.judged, verdicts.failed, verdicts.unparseable,
                                   sum(parsed) if self.mode == "pointwise" else 0.0, verdicts.disagreement,
                                   verdicts.both_orders)):
            self._totals[i] += value
        self.check_failures(verdicts)
        fallback = self.scale.low if self.mode == "pointwise" else TIE
        return torch.tensor([fallback if s is None else s for s in verdicts.scores], dtype=torch.float32)

    # -- the three modes ------------------------------------------------------------------
    def pointwise(self, prompts: list[str], responses: list[str]) -> Verdicts:
        answers = self.client.ask([self.user(prompt=p, response=r) for p, r in zip(prompts, responses)])
        fmt = ScoreFormat(self.pattern, self.scale.low, self.scale.high)
        scores = [parse_score(a, fmt) for a in answers]
        return self.counted(Verdicts(scores), answers, [s is not None for s in scores])

    def pairwise(self, prompts: list[str], responses: list[str], groups: list[range]) -> Verdicts:
        pairs = [(g.start + i, g.start + j) for g in groups for i in range(len(g)) for j in range(i + 1, len(g))]
        asks = []
        for x, y in pairs:  # x as A, then y as A
            asks += [self.user(prompt=prompts[x], response_a=responses[x], response_b=responses[y]),
                     self.user(prompt=prompts[x], response_a=responses[y], response_b=responses[x])]
        answers = self.client.ask(asks)
        outcomes, ok, disagreed = {}, [], 0
        for n, pair in enumerate(pairs):
            first, swapped = (parse_preference(a, self.pattern) for a in answers[2 * n:2 * n + 2])
            outcome, flipped = pairwise_outcome(first, swapped)
            outcomes[pair] = outcome
            ok.append(outcome is not None)
            disagreed += flipped
        scores: list[float | None] = [None] * len(prompts)
        for g in groups:
            local = {(x - g.start, y - g.start): v for (x, y), v in outcomes.items() if g.start <= x < g.stop}
            scores[g.start:g.stop] = win_rates(local, len(g))
        verdicts = Verdicts(scores, disagreement=float(disagreed), both_orders=sum(ok))
        return self.counted(verdicts, [_both(answers[2 * n:2 * n + 2]) for n in range(len(pairs))], ok)

    def ranked(self, prompts: list[str], responses: list[str], groups: list[range]) -> Verdicts:
        asks = []
        for g in groups:
            shown = responses[g.start:g.stop]
            asks += [self.user(prompt=prompts[g.start], responses=numbered(shown)),
                     self.user(prompt=prompts[g.start], responses=numbered(shown[::-1]))]
        answers = self.client.ask(asks)
        scores: list[float | None] = [None] * len(prompts)
        ok, verdicts = [], Verdicts(scores)
        for n, g in enumerate(groups):
            k = len(g)
            first = parse_ranking(answers[2 * n], k, self.pattern)
            reverse = parse_ranking(answers[2 * n + 1], k, self.pattern)
            reverse = None if reverse is None else [k - 1 - i for i in reverse]  # back to the rows' order
            found = [r for r in (first, reverse) if r is not None]
            ok.append(len(found) == 2)
            if found:
                per = [rank_scores(r) for r in found]
                scores[g.start:g.stop] = [sum(col) / len(per) for col in zip(*per)]
            if len(found) == 2:
                verdicts.disagreement += discordance(first, reverse)
                verdicts.both_orders += 1
        return self.counted(verdicts, [_both(answers[2 * n:2 * n + 2]) for n in range(len(groups))], ok)

    # -- shared -----------------------------------------------------------------------------
    def user(self, **fields: str) -> list[dict]:
        return [{"role": "user", "content": fill(self.rubric, **fields)}]

    def groups(self, prompts: list[str]) -> list[range]:
        """The consecutive blocks of ``group_size`` rows, each one prompt's responses; a TrainingError
        when the rows are not whole groups (a data-parallel share that splits a group)."""
        k, n = self.group_size, len(prompts)
        blocks = [range(i, min(i + k, n)) for i in range(0, n, k)]
        if k < 2 or n % k or any(len({prompts[i] for i in b}) != 1 for b in blocks):
            raise TrainingError(f"The {self.mode} judge ({self.key}) compares each prompt's {k} responses, but it was "
                                f"given {n} rows that are not whole groups of {k} consecutive responses to one prompt: "
                                "with data parallelism, make rollout.batch_size a multiple of the number of ranks.")
        return blocks

    def counted(self, verdicts: Verdicts, answers: list[str | None], ok: list[bool]) -> Verdicts:
        """``verdicts`` with its judgements counted: ``answers`` (one per judgement: None when a
        request got no answer) and ``ok`` (whether it gave a verdict)."""
        verdicts.judged = len(answers)
        verdicts.failed = sum(a is None for a in answers)
        verdicts.unparseable = sum(a is not None and not good for a, good in zip(answers, ok))
        verdicts.unparsed = [a for a, good in zip(answers, ok) if a is not None and not good]
        return verdicts

    def check_failures(self, v: Verdicts) -> None:
        """The stated rule: stop on any failure with ``on_failure=error``, and on a batch where more
        than ``max_failure_rate`` of the judgements failed whatever the rule."""
        bad = v.failed + v.unparseable
        if not bad:
            return
        seen = (f"; an answer without a verdict: {one_line(v.unparsed[0], 160)!r} (expected a match of "
                f"{self.pattern!r}" + (f" within [{self.scale.low:g}, {self.scale.high:g}])" if self.mode ==
                                       "pointwise" else ")") if v.unparsed else "")
        stats = self.client.stats
        why = (f"{v.failed} got no answer (so far {stats.timeouts} timed out, {stats.unreachable} unreachable, "
               f"{stats.http_errors} HTTP errors, {stats.bad_bodies} answers without a message, {stats.too_long} "
               f"too long for the judge's context) and {v.unparseable} held no verdict{seen}")
        where = f"The judge {self.client.model!r} at {self.client.base} ({self.key})"
        if self.on_failure == "error":
            raise TrainingError(f"{where}: {bad} of {v.judged} judgements failed: {why}. {self.key}.on_failure=error "
                                "stops the run; on_failure=fallback counts them and scores them as no information.")
        if bad / v.judged > self.max_failure_rate:
            raise TrainingError(f"{where}: {bad} of {v.judged} judgements of this batch failed, more than "
                                f"{self.key}.max_failure_rate={self.max_failure_rate:g}: {why}. The policy would "
                                "be trained on the fallback score; check the server, its model and the rubric's "
                                "answer format.")

    def metrics(self) -> dict[str, float]:
        """Since the last call: judgements, failed and unparseable ones (counts and the failure rate),
        the parsed scores' mean (pointwise; absent when none parsed), the order disagreement (pairwise:
        the share of comparisons whose two orders picked the same position; group: the mean fraction of
        pairs the two rankings order differently), and the client's requests, cache hits, failure
        kinds, tokens and mean latency (:class:`tether.roles.judge_client.JudgeStats`)."""
        now = self.client.stats.metrics("")
        delta = {k: now[k] - self._reported.get(k, 0.0) for k in now if k != "/latency_mean_s"}
        self._reported = now
        total = all_reduce([*self._totals, *(delta[k] for k in sorted(delta))])  # each rank judged its share
        judged, failed, unparseable, score_sum, disagreement, both = total[:6]
        client = dict(zip(sorted(delta), total[6:]))
        self._totals = [0.0] * 6
        prefix = f"judge/{self.name}"
        out = {f"{prefix}{k}": v for k, v in client.items()}
        out[f"{prefix}/latency_mean_s"] = client["/latency_s"] / client["/requests"] if client["/requests"] else 0.0
        out.update({f"{prefix}/judged": judged, f"{prefix}/failed": failed, f"{prefix}/unparseable": unparseable,
                    f"{prefix}/failure_rate": (failed + unparseable) / judged if judged else 0.0})
        parsed = judged - failed - unparseable
        if self.mode == "pointwise" and parsed:  # the mean of the scores the judge gave (fallbacks left out)
            out[f"{prefix}/score_mean"] = score_sum / parsed
        if self.mode != "pointwise" and both:
            out[f"{prefix}/order_disagreement"] = disagreement / both
        return out

    def close(self) -> None:
        self.client.close()


def _both(answers: list[str | None]) -> str | None:
    """A judgement asked in two orders as one answer for the counts: None when either request got no
    answer, else the first order's (the one an error message quotes)."""
    return None if any(a is None for a in answers) else answers[0]
