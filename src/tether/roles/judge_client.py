"""An LLM judge over any OpenAI-compatible chat endpoint (``POST {url}/v1/chat/completions``:
`tether serve`, vLLM's OpenAI server, a hosted provider), bounded: each request has a timeout and a
few retries (connection errors, timeouts, HTTP 429/5xx), at most ``concurrency`` requests are in
flight, and answers are cached by content (the same model, messages and sampling settings are asked
once). A request that still fails is answered ``None`` and counted by why (:class:`JudgeStats`):
the caller applies its stated rule; nothing here turns a failure into a number.

Why by hand rather than the ``openai`` client: the judge needs the failure *kinds* counted per
request and a content cache shared by concurrent requests; the wire format is one POST.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, fields

from tether.common import services
from tether.common.errors import ModelError, one_line

API_KEY_ENV = "TETHER_JUDGE_API_KEY"
RETRY_STATUS = (429, 500, 502, 503, 504)


@dataclass
class JudgeStats:
    """What the judge's requests did, summed: each failure kind counted, tokens and seconds."""

    requests: int = 0  # asked of the server (cache hits excluded), retries not counted
    cache_hits: int = 0
    answered: int = 0
    timeouts: int = 0  # no answer within the timeout after every retry
    unreachable: int = 0  # connection refused or reset after every retry
    http_errors: int = 0  # a non-200 status after every retry
    bad_bodies: int = 0  # a 200 without choices[0].message.content
    too_long: int = 0  # an in-process judge: the prompt and max_tokens exceed its context (not asked)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0  # summed over the requests asked

    def failures(self) -> int:
        return self.timeouts + self.unreachable + self.http_errors + self.bad_bodies + self.too_long

    def metrics(self, prefix: str) -> dict[str, float]:
        """Every field as ``{prefix}/{field}``, and the mean latency of the requests asked."""
        out = {f"{prefix}/{f.name}": float(getattr(self, f.name)) for f in fields(self)}
        out[f"{prefix}/latency_mean_s"] = self.latency_s / self.requests if self.requests else 0.0
        return out


def content_key(model: str, messages: list[dict], sampling: dict) -> str:
    """The content a cached answer stands for: the model, the messages and the sampling settings."""
    body = json.dumps([model, messages, sampling], sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(body.encode()).hexdigest()


class JudgeClient:
    """Asks ``model`` at ``url`` (see the module). ``key``: the config key that named the judge, for
    errors. ``ask(conversations)`` -> each one's answer text, or None where the request failed."""

    def __init__(self, url: str, model: str, api_key: str | None = None, timeout_s: float = 60.0, retries: int = 2,
                 backoff: float = 0.25, concurrency: int = 4, max_tokens: int = 256, temperature: float = 0.0,
                 key: str = "the judge block"):
        import httpx2

        base = url.rstrip("/").removesuffix("/v1/chat/completions").removesuffix("/v1")
        self.base, self.endpoint = base, base + "/v1/chat/completions"
        self.model, self.key = model, key
        self.retries, self.backoff, self.concurrency = retries, backoff, concurrency
        self.sampling = {"max_tokens": max_tokens, "temperature": temperature}
        token = api_key or os.environ.get(API_KEY_ENV)
        self._httpx = httpx2
        self.client = httpx2.Client(headers={"Authorization": f"Bearer {token}"} if token else {}, timeout=timeout_s)
        self.stats = JudgeStats()
        self._cache: dict[str, str] = {}
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(concurrency, thread_name_prefix="tether-judge")

    def check(self) -> None:
        """Before a run starts: the server answers ``GET /v1/models`` within the services' bound and
        serves ``model``; a ModelError naming the key otherwise."""
        seconds = services.timeout_s()
        try:
            response = self.client.get(self.base + "/v1/models", timeout=seconds)
        except self._httpx.TransportError as err:
            raise ModelError(f"The judge at {self.base} ({self.key}) could not be reached within {seconds:g} s: "
                             f"{type(err).__name__}: {one_line(str(err), 200) or 'no answer'}. "
                             f"{services.bound_text()}") from None
        try:
            served = [m["id"] for m in response.json()["data"]]
        except (ValueError, KeyError, TypeError):
            raise ModelError(f"The judge at {self.base} ({self.key}) is not an OpenAI-compatible server: GET /v1/models "
                             f"answered HTTP {response.status_code}: {one_line(response.text, 200)!r}.") from None
        if self.model not in served:
            raise ModelError(f"The judge at {self.base} ({self.key}) does not serve the model {self.model!r}; it serves "
                             f"{', '.join(map(repr, served)) or 'none'}.")

    def ask(self, conversations: list[list[dict]]) -> list[str | None]:
        """Each conversation's answer (the judge's text), at most ``concurrency`` in flight; None
        where the request failed (counted in :attr:`stats`)."""
        return list(self._pool.map(self._answer, conversations))

    def _answer(self, messages: list[dict]) -> str | None:
        key = self.cache_key(messages)
        with self._lock:
            if key in self._cache:
                self.stats.cache_hits += 1
                return self._cache[key]
        text = self._request(messages)
        if text is not None:
            with self._lock:
                self._cache[key] = text
        return text

    def cache_key(self, messages: list[dict]) -> str:
        return content_key(self.model, messages, self.sampling)

    def _request(self, messages: list[dict]) -> str | None:
        body = {"model": self.model, "messages": messages, **self.sampling}
        start, failure, response = time.perf_counter(), None, None
        for attempt in range(self.retries + 1):
            try:
                response = self.client.post(self.endpoint, json=body)
            except self._httpx.TimeoutException:
                failure = "timeouts"
            except self._httpx.TransportError:
                failure = "unreachable"
            else:
                failure = None if response.status_code == 200 else "http_errors"
                if response.status_code not in RETRY_STATUS:
                    break
            if attempt < self.retries:
                time.sleep(self.backoff * 2**attempt)
        text, usage = None, {}
        if failure is None:
            try:
                data = response.json()
                text, usage = data["choices"][0]["message"]["content"], data.get("usage") or {}
                if not isinstance(text, str):
                    raise TypeError
            except (ValueError, KeyError, IndexError, TypeError):
                text, failure = None, "bad_bodies"
        with self._lock:
            s = self.stats
            s.requests += 1
            s.latency_s += time.perf_counter() - start
            if failure is None:
                s.answered += 1
                s.prompt_tokens += int(usage.get("prompt_tokens") or 0)
                s.completion_tokens += int(usage.get("completion_tokens") or 0)
            else:
                setattr(s, failure, getattr(s, failure) + 1)
        return text

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.client.close()
