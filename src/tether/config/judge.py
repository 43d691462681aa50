"""The ``judge`` block of a reward term (``reward.terms[i].judge``): an LLM asked to score each
response (RLAIF), reached over any OpenAI-compatible chat endpoint or loaded in process. The block
is set when ``url`` or ``path`` is; the kind is :mod:`tether.registry.rewards`'s ``judge`` (docs/judges.md)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Literal

from tether.common.errors import ConfigError
from tether.config.base import option


def mode_pattern(mode: str) -> str:
    """Each mode's answer format when ``pattern`` is not given (:mod:`tether.algos.judge_format`'s;
    imported here, not at the top: reading a config loads no torch)."""
    from tether.algos.judge_format import PREFERENCE_PATTERN, RANKING_PATTERN, SCORE_PATTERN

    return {"pointwise": SCORE_PATTERN, "pairwise": PREFERENCE_PATTERN, "group": RANKING_PATTERN}[mode]


@dataclass(frozen=True)
class JudgeConfig:
    """A pointwise LLM judge: a rubric filled with each prompt and response, the score read from its answer."""

    url: str = option("", "The judge's OpenAI-compatible server (`tether serve`, vLLM's OpenAI server, a hosted "
                          "provider): POST {url}/v1/chat/completions. Setting it (or path) selects the judge kind.")
    path: str | None = option(None, "Instead of url: a judge checkpoint (a causal LM with its tokenizer and chat "
                                    "template) loaded in this process, frozen, asked with transformers' generate on "
                                    "the run's device.", path=True)
    batch_size: int = option(8, "With path: conversations generated at once.", ge=1)
    model: str = option("", "With url: the model name the server serves the judge under (GET {url}/v1/models "
                            "lists it).")
    mode: Literal["pointwise", "pairwise", "group"] = option(
        "pointwise", "pointwise: each response scored alone on [low, high]. pairwise: every two responses to one "
                     "prompt compared, both orders asked; a response's score is its mean outcome against its group "
                     "(0-1). group: all of a prompt's responses ranked at once, asked again in reverse order; a "
                     "response's score is its place, 1 best to 0 worst, averaged over the two. pairwise and group "
                     "need several responses per prompt (group.size >= 2).")
    rubric: str | None = option(None, "A text file (a scoring guide, a constitution's principles) sent as the user "
                                      "message, with the placeholders {prompt} and {response} (pairwise: "
                                      "{response_a}, {response_b}; group: {responses}, numbered [1], [2], ...); "
                                      "null = the mode's built-in rubric.", path=True)
    pattern: str | None = option(None, "A regular expression whose first group is the verdict (the answer's last "
                                       "match counts): a score, A/B/tie, or a ranking like 2 > 3 > 1; null = the "
                                       "mode's (Score: N, Winner: A, Ranking: 2 > 1).")
    low: float = option(1.0, "pointwise: the lowest score of the rubric's scale; a score outside [low, high] is "
                             "unparseable.")
    high: float = option(10.0, "pointwise: the highest score of the rubric's scale.")
    on_failure: Literal["fallback", "error"] = option(
        "fallback", "A judgement that failed (no answer after the retries, or no verdict in it): fallback = counted "
                    "(judge/<name>/failed, /unparseable) and scored as no information: pointwise `low`; pairwise and "
                    "group a tie, 0.5 (a pairwise comparison that failed is left out of the win rates); error = the "
                    "run stops naming it.")
    max_failure_rate: float = option(0.5, "The run stops when more than this fraction of one batch's judgements "
                                          "failed (a judge that is down or answers garbage), whatever on_failure "
                                          "says; 1 = never.", ge=0, le=1)
    timeout_s: float = option(60.0, "Seconds one request may take before it is retried.", gt=0)
    retries: int = option(2, "Further tries of a request that timed out, was refused or answered HTTP 429/5xx.", ge=0)
    concurrency: int = option(4, "Requests in flight at once.", ge=1)
    max_tokens: int = option(256, "The most tokens the judge may write per answer.", ge=1)
    temperature: float = option(0.0, "The judge's sampling temperature (0 = greedy; its answers are cached by "
                                     "content either way).", ge=0)
    api_key: str | None = option(None, "The judge server's key; saved in config.yaml, so prefer null and the "
                                       "TETHER_JUDGE_API_KEY variable.")

    @property
    def verdict_pattern(self) -> str:
        """``pattern``, or the mode's own."""
        return self.pattern if self.pattern is not None else mode_pattern(self.mode)

    @property
    def enabled(self) -> bool:
        return bool(self.url or self.path)

    def check(self, key: str) -> None:
        """Errors name ``key`` (``reward.terms[i].judge``): one of url and path, each with its own
        settings only, a pattern with a group, a scale."""
        if self.url and self.path:
            raise ConfigError(f"Config keys '{key}.url' and '{key}.path' are both set: a judge is reached over a "
                              "server (url) or loaded in process (path), not both.")
        default = JudgeConfig()
        inert = (("model", "timeout_s", "retries", "concurrency", "api_key") if self.path else ("batch_size",))
        for leaf in inert:
            if getattr(self, leaf) != getattr(default, leaf):
                where = "with path (an in-process judge)" if self.path else "with url (it is an in-process judge's)"
                raise ConfigError(f"Config key '{key}.{leaf}' = {getattr(self, leaf)!r} is set {where}, so it would "
                                  f"have no effect; drop it.")
        if self.mode != "pointwise":
            for leaf in ("low", "high"):
                if getattr(self, leaf) != getattr(default, leaf):
                    raise ConfigError(f"Config key '{key}.{leaf}' = {getattr(self, leaf)!r} is set with mode="
                                      f"{self.mode}, whose scores are win rates and places in [0, 1]; drop it.")
        if self.url and not self.model:
            raise ConfigError(f"Config key '{key}.model' is empty: name the model the judge server serves "
                              f"(GET {self.url.rstrip('/')}/v1/models lists them).")
        try:
            groups = re.compile(self.verdict_pattern).groups
        except re.error as err:
            raise ConfigError(f"Config key '{key}.pattern' = {self.pattern!r}: not a valid Python regular expression "
                              f"({err}).") from None
        if groups < 1:
            raise ConfigError(f"Config key '{key}.pattern' = {self.pattern!r} has no group: its first group is the "
                              "score.")
        if not (math.isfinite(self.low) and math.isfinite(self.high) and self.low < self.high):
            raise ConfigError(f"Config keys '{key}.low' = {self.low!r} and '{key}.high' = {self.high!r}: expected "
                              "finite numbers with low < high.")
