"""The ``judge`` reward kind: an LLM asked to score each response by a rubric (RLAIF, pointwise).

Every response is one request: the rubric filled with its prompt and response text
(:func:`tether.algos.judge_format.fill`) as the user message; the score is read from the answer by
the term's declared format (:func:`tether.algos.judge_format.parse_score`). A judgement *fails*
when the request got no answer after its retries (timed out, refused, HTTP error, a body without
an answer) or the answer holds no score within the scale (*unparseable*). Both are counted; the
stated rule (``judge.on_failure``) then scores it ``low`` or stops the run naming it, and a batch
where more than ``judge.max_failure_rate`` of the judgements failed stops the run either way (a
judge that is down or answers garbage would otherwise train the policy on a constant).
"""

from __future__ import annotations

import torch
from torch import Tensor

from tether.algos.judge_format import ScoreFormat, fill, parse_score
from tether.common.dispatch import rows
from tether.common.errors import TrainingError, one_line
from tether.distributed.collectives import all_reduce
from tether.roles.judge_client import JudgeClient
from tether.roles.reward import OneTerm
from tether.types import Rollout


class JudgeReward(OneTerm):
    """``score(rollout) -> (B,)``: each response's parsed score (``low`` for a failed judgement
    under ``on_failure=lowest``). ``metrics()``: what the judge did since the last call, under
    ``judge/<name>/``, summed over the ranks that share the scoring."""

    def __init__(self, client: JudgeClient, rubric: str, fmt: ScoreFormat, on_failure: str, max_failure_rate: float,
                 name: str, key: str):
        self.client, self.rubric, self.fmt = client, rubric, fmt
        self.on_failure, self.max_failure_rate = on_failure, max_failure_rate
        self.name, self.key = name, key
        self._judged = self._unparseable = self._failed = 0
        self._score_sum = 0.0
        self._reported = client.stats.metrics("")

    @rows
    def score(self, rollout: Rollout) -> Tensor:
        asks = [[{"role": "user", "content": fill(self.rubric, prompt=p, response=r)}]
                for p, r in zip(rollout.prompts, rollout.responses)]
        answers = self.client.ask(asks)
        scores = [parse_score(a, self.fmt) for a in answers]
        failed = sum(a is None for a in answers)
        unparseable = sum(a is not None and s is None for a, s in zip(answers, scores))
        self._judged += len(answers)
        self._failed += failed
        self._unparseable += unparseable
        self._score_sum += sum(s for s in scores if s is not None)
        self.check_failures(answers, scores, failed, unparseable)
        return torch.tensor([self.fmt.low if s is None else s for s in scores], dtype=torch.float32)

    def check_failures(self, answers: list[str | None], scores: list[float | None], failed: int,
                       unparseable: int) -> None:
        """The stated rule: stop on any failure with ``on_failure=error``, and on a batch where more
        than ``max_failure_rate`` of the judgements failed whatever the rule."""
        bad = failed + unparseable
        if not bad:
            return
        n = len(answers)
        example = next((a for a, s in zip(answers, scores) if a is not None and s is None), None)
        seen = (f"; an unparseable answer: {one_line(example, 160)!r} (expected a match of {self.fmt.pattern!r} "
                f"within [{self.fmt.low:g}, {self.fmt.high:g}])" if example is not None else "")
        stats = self.client.stats
        why = (f"{failed} got no answer (so far {stats.timeouts} timed out, {stats.unreachable} unreachable, "
               f"{stats.http_errors} HTTP errors, {stats.bad_bodies} answers without a message) and "
               f"{unparseable} held no score{seen}")
        where = f"The judge {self.client.model!r} at {self.client.base} ({self.key})"
        if self.on_failure == "error":
            raise TrainingError(f"{where}: {bad} of {n} judgements failed: {why}. {self.key}.on_failure=error stops "
                                "the run; on_failure=lowest scores them low and counts them.")
        if bad / n > self.max_failure_rate:
            raise TrainingError(f"{where}: {bad} of {n} judgements of this batch failed, more than "
                                f"{self.key}.max_failure_rate={self.max_failure_rate:g}: {why}. The policy would "
                                "be trained on the fallback score; check the server, its model and the rubric's "
                                "answer format.")

    def metrics(self) -> dict[str, float]:
        """Since the last call: judgements, failed and unparseable ones (counts and the failure
        rate), the parsed scores' mean (absent when none parsed), and the client's requests, cache hits, failure kinds,
        tokens and mean latency (:class:`tether.roles.judge_client.JudgeStats`)."""
        now = self.client.stats.metrics("")
        delta = {k: now[k] - self._reported.get(k, 0.0) for k in now if k != "/latency_mean_s"}
        self._reported = now
        counts = [float(self._judged), float(self._failed), float(self._unparseable), self._score_sum]
        counts += [delta[k] for k in sorted(delta)]
        total = all_reduce(counts)  # the ranks that split the rows each judged their share
        judged, failed, unparseable, score_sum = total[:4]
        client = dict(zip(sorted(delta), total[4:]))
        self._judged = self._failed = self._unparseable = 0
        self._score_sum = 0.0
        prefix = f"judge/{self.name}"
        out = {f"{prefix}{k}": v for k, v in client.items()}
        out[f"{prefix}/latency_mean_s"] = client["/latency_s"] / client["/requests"] if client["/requests"] else 0.0
        parsed = judged - failed - unparseable
        out.update({f"{prefix}/judged": judged, f"{prefix}/failed": failed, f"{prefix}/unparseable": unparseable,
                    f"{prefix}/failure_rate": (failed + unparseable) / judged if judged else 0.0})
        if parsed:  # the mean of the scores the judge gave (the fallback scores left out)
            out[f"{prefix}/score_mean"] = score_sum / parsed
        return out

    def close(self) -> None:
        self.client.close()
