"""A reward source on another machine: a tether server's ``POST /v1/rewards``.

PPO calls ``score(rollout)`` exactly as it calls a local :class:`~tether.roles.reward.ModelReward`;
this class sends the rollout's prompt and response text (and whether each response ended with
EOS) and returns the server's scores. The server re-tokenizes the text with the reward model's
own tokenizer, so it need not share the policy's. Scores equal a local reward model's up to
that text round trip; the prompt sent is the rollout's prompt text (for chat prompts, the last
user message).
"""

from __future__ import annotations

import logging
import math
import os
import time

import torch
from torch import Tensor

from tether.common import services
from tether.common.dispatch import rows
from tether.common.errors import ModelError, one_line
from tether.roles.reward import OneTerm
from tether.types import Rollout

log = logging.getLogger(__name__)

API_KEY_ENV = "TETHER_API_KEY"
RETRY_STATUS = (429, 502, 503, 504)  # a busy or restarting server: worth another try


class RemoteReward(OneTerm):
    """``score(rollout) -> (B,)`` from ``{url}/v1/rewards``, with a few retries on connection errors."""

    def __init__(self, url: str, api_key: str | None = None, timeout: float = 120.0, retries: int = 2,
                 backoff: float = 0.5, batch_size: int = 256, name: str | None = None, key: str = "reward.url"):
        import httpx2

        base = url.rstrip("/")
        base = base.removesuffix("/v1/rewards").removesuffix("/v1")
        self.endpoint = base + "/v1/rewards"
        self.name = name or self.endpoint
        self.key = key  # the config key that gave the URL, for errors
        self.retries = retries
        self.backoff = backoff
        self.batch_size = batch_size
        key = api_key or os.environ.get(API_KEY_ENV)
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._httpx = httpx2
        self.client = httpx2.Client(headers=headers, timeout=timeout)

    def check(self) -> None:
        """Before a run starts: the server answers ``GET /health`` and serves a reward model.

        A typo in ``reward.url`` or a server that is down is then a clean error before the run
        directory exists, not a failure at the first rollout.
        """
        health = self.endpoint.removesuffix("/v1/rewards") + "/health"
        seconds = services.timeout_s()
        try:
            response = self._get_within(health, seconds)
        except self._httpx.TransportError as err:
            raise ModelError(
                f"The reward server {self.endpoint} ({self.key}) could not be reached within {seconds:g} s: "
                f"{type(err).__name__}: {' '.join(str(err).split()) or 'no answer'}. Is `tether serve --reward-model ...` "
                f"running there? {services.bound_text()}"
            ) from None
        try:
            body = response.json()
        except ValueError:
            body = None
        if response.status_code != 200 or not isinstance(body, dict):
            raise ModelError(f"The reward server {self.endpoint} ({self.key}) is not healthy: GET /health answered "
                             f"HTTP {response.status_code}: {one_line(response.text, 200)!r}.")
        if not body.get("reward_model"):
            raise ModelError(f"The server at {self.endpoint} ({self.key}) serves no reward model; start it with "
                             "`tether serve --reward-model DIR`.")

    def _get_within(self, url: str, seconds: float):
        """``GET url``, retried on connection errors (a server restarting), all within ``seconds``:
        the services' bound (:mod:`tether.common.services`), not the scoring requests' 120 s per try."""
        deadline = time.monotonic() + seconds
        for attempt in range(self.retries + 1):
            try:
                return self.client.get(url, timeout=max(deadline - time.monotonic(), 0.001))
            except self._httpx.TransportError:
                pause = self.backoff * 2**attempt
                if attempt == self.retries or time.monotonic() + pause >= deadline:
                    raise
                time.sleep(pause)

    @rows
    def score(self, rollout: Rollout) -> Tensor:
        pairs = [
            {"prompt": p, "response": r, "ended": bool(e)}
            for p, r, e in zip(rollout.prompts, rollout.responses, rollout.ended.tolist())
        ]
        scores: list[float] = []
        for start in range(0, len(pairs), self.batch_size):
            scores.extend(self._post(pairs[start : start + self.batch_size]))
        return torch.tensor(scores, dtype=torch.float32)

    def _post(self, pairs: list[dict]) -> list[float]:
        response = None
        for attempt in range(self.retries + 1):
            try:
                response = self.client.post(self.endpoint, json={"pairs": pairs})
            except self._httpx.TransportError as err:  # refused, reset, timed out
                if attempt == self.retries:
                    raise ModelError(
                        f"The reward server {self.endpoint} could not be reached after {attempt + 1} tries: "
                        f"{type(err).__name__}: {err}. Is `tether serve --reward-model ...` running there?"
                    ) from None
            else:
                if response.status_code not in RETRY_STATUS or attempt == self.retries:
                    break
            log.warning("reward server %s: attempt %d failed, retrying", self.endpoint, attempt + 1)
            time.sleep(self.backoff * 2**attempt)
        return self._parse(response, len(pairs))

    def _parse(self, response, expected: int) -> list[float]:
        if response.status_code != 200:
            raise ModelError(
                f"The reward server {self.endpoint} answered HTTP {response.status_code}: {_error_text(response)}"
            )
        try:
            scores = response.json()["scores"]
            values = [float(s) for s in scores]
        except (ValueError, KeyError, TypeError):
            raise ModelError(
                f"The reward server {self.endpoint} answered 200 without a 'scores' list of numbers: "
                f"{one_line(response.text, 200)!r}"
            ) from None
        if len(values) != expected or not all(math.isfinite(v) for v in values):
            raise ModelError(
                f"The reward server {self.endpoint} returned {len(values)} scores for {expected} pairs "
                "(expected one finite score per pair)."
            )
        return values

    def close(self) -> None:
        self.client.close()


def _error_text(response) -> str:
    try:
        return str(response.json()["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return one_line(response.text, 200) or "(empty body)"
