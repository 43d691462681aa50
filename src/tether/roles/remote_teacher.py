"""A frozen teacher behind an OpenAI-compatible completions endpoint (vLLM's server): the reference
role of on-policy distillation (``distill.teacher_url``), answering ``logprobs(rollout)`` as the
in-process :class:`~tether.roles.policy.Reference` does.

Each sequence goes as its token ids (``prompt``: a list of ids, never re-tokenized) with
``echo: true``, ``logprobs: 1`` and ``max_tokens: 1`` — the completions API's prompt log-probs:
``choices[i].logprobs.token_logprobs`` holds log p(token_k | tokens before it) for every id sent
(null for the first) and then the one generated token, which is ignored. The endpoint's log-probs
are the teacher's at temperature 1 (the config refuses another sampling temperature).

Before the run, :meth:`check` asks ``GET /v1/models`` within the services' bound and sends one probe
sequence: the server must echo every id and decode them to the text the student's tokenizer
decodes them to — a teacher on another tokenizer reads the student's ids as other words, and is
refused with the two texts. A request that times out or fails is retried (``retries``); one that
still fails stops the run with the URL and the reason: there is no fallback for a teacher's
log-probs.
"""

from __future__ import annotations

import math
import os
import time

import torch
from torch import Tensor

from tether.common import services
from tether.common.dispatch import rows
from tether.common.errors import ModelError, one_line
from tether.types import Rollout

API_KEY_ENV = "TETHER_API_KEY"
RETRY_STATUS = (429, 502, 503, 504)
PROBE_TOKENS = 48


def sequence_ids(rollout: Rollout) -> list[list[int]]:
    """Each row's real tokens (prompt then response, padding left out), as the teacher reads them."""
    return [seq[mask.bool()].tolist() for seq, mask in zip(rollout.sequences, rollout.attention_mask)]


def response_logprobs(rollout: Rollout, per_sequence: list[list[float | None]]) -> Tensor:
    """(B, A) log-probs of the response positions from each row's log-probs of its real tokens in
    order (``per_sequence[b][k]``: the k-th real token's; the first, and padding, read 0)."""
    P = rollout.num_prompt_tokens
    out = torch.zeros(rollout.sequences.shape[0], rollout.sequences.shape[1] - P, dtype=torch.float32)
    for b, values in enumerate(per_sequence):
        real = rollout.attention_mask[b].bool()
        index = torch.cumsum(real.long(), 0) - 1  # a real position's index among the row's real tokens
        columns = real[P:].nonzero().squeeze(1)  # the row's real response positions
        row = torch.tensor([0.0 if v is None else float(v) for v in values], dtype=torch.float32)
        out[b, columns] = row[index[P:][columns]]
    return out


class RemoteTeacher:
    """``logprobs(rollout) -> ((B, A) log-probs, None)`` from ``{url}/v1/completions``."""

    def __init__(self, url: str, tokenizer, model: str | None = None, api_key: str | None = None,
                 timeout_s: float = 120.0, batch_size: int = 16, retries: int = 2, backoff: float = 0.5,
                 key: str = "distill.teacher_url"):
        import httpx2

        self.base = url.rstrip("/").removesuffix("/v1/completions").removesuffix("/v1")
        self.endpoint = self.base + "/v1/completions"
        self.tokenizer, self.model, self.key = tokenizer, model, key
        self.batch_size, self.retries, self.backoff = batch_size, retries, backoff
        token = api_key or os.environ.get(API_KEY_ENV)
        self._httpx = httpx2
        self.client = httpx2.Client(headers={"Authorization": f"Bearer {token}"} if token else {}, timeout=timeout_s)
        self.requests = self.retried = 0

    def check(self) -> None:
        """The server answers and serves the model (the first it lists when ``model`` is unset), and
        reads the student's token ids as the student's tokenizer does (module docstring)."""
        seconds = services.timeout_s()
        try:
            response = self.client.get(self.base + "/v1/models", timeout=seconds)
            served = [m["id"] for m in response.json()["data"]]
        except self._httpx.TransportError as err:
            raise ModelError(f"The teacher at {self.base} ({self.key}) could not be reached within {seconds:g} s: "
                             f"{type(err).__name__}: {one_line(str(err), 200) or 'no answer'}. "
                             f"{services.bound_text()}") from None
        except (ValueError, KeyError, TypeError):
            raise ModelError(f"The teacher at {self.base} ({self.key}) is not an OpenAI-compatible server: GET "
                             f"/v1/models answered HTTP {response.status_code}: "
                             f"{one_line(response.text, 200)!r}.") from None
        if self.model is None and served:
            self.model = served[0]
        if self.model not in served:
            raise ModelError(f"The teacher at {self.base} ({self.key}) does not serve the model {self.model!r}; it "
                             f"serves {', '.join(map(repr, served)) or 'none'} (distill.teacher_model).")
        special = set(self.tokenizer.all_special_ids)
        probe = [i for i in range(len(self.tokenizer)) if i not in special][:PROBE_TOKENS]
        choice = self._post([probe])[0]
        echoed = choice["logprobs"]["token_logprobs"]
        ours = self.tokenizer.decode(probe, skip_special_tokens=True)
        theirs = choice.get("text") or ""
        if len(echoed) < len(probe) or not theirs.startswith(ours):
            raise ModelError(f"The teacher at {self.base} ({self.key}, model {self.model!r}) does not share the "
                             f"student's tokenizer: token ids {probe[:8]}... decode to {one_line(ours, 80)!r} with "
                             f"the student's and to {one_line(theirs, 80)!r} there ({len(echoed)} log-probs for "
                             f"{len(probe)} ids). On-policy distillation scores the student's token ids with the "
                             "teacher, so both must read them alike.")

    @rows
    def logprobs(self, rollout: Rollout, with_entropy: bool = False, use_captured: bool = False):
        """(B, A) log T(a_t | s_t) of the rollout's response tokens, and None (no entropies)."""
        ids = sequence_ids(rollout)
        per_sequence: list[list[float | None]] = []
        for start in range(0, len(ids), self.batch_size):
            batch = ids[start:start + self.batch_size]
            for sent, choice in zip(batch, self._post(batch)):
                values = choice["logprobs"]["token_logprobs"][:len(sent)]
                if len(values) < len(sent) or any(v is not None and not math.isfinite(v) for v in values[1:]):
                    raise ModelError(f"The teacher at {self.endpoint} ({self.key}) returned {len(values)} finite "
                                     f"prompt log-probs for a sequence of {len(sent)} tokens; expected one per token "
                                     "(the completions API with echo and logprobs).")
                per_sequence.append(values)
        return response_logprobs(rollout, per_sequence), None

    def _post(self, batch: list[list[int]]) -> list[dict]:
        """The ``choices`` for ``batch`` (token-id sequences), in order; retried, then a ModelError."""
        body = {"model": self.model, "prompt": batch, "max_tokens": 1, "echo": True, "logprobs": 1,
                "temperature": 1.0}
        failure = "no answer"
        for attempt in range(self.retries + 1):
            self.requests += 1
            try:
                response = self.client.post(self.endpoint, json=body)
            except self._httpx.TimeoutException:
                failure = f"no answer within {self.client.timeout.read:g} s (distill.teacher_timeout_s)"
            except self._httpx.TransportError as err:
                failure = f"{type(err).__name__}: {one_line(str(err), 200)}"
            else:
                if response.status_code == 200:
                    return self._choices(response, len(batch))
                failure = f"HTTP {response.status_code}: {one_line(response.text, 300)!r}"
                if response.status_code not in RETRY_STATUS:
                    break
            if attempt < self.retries:
                self.retried += 1
                time.sleep(self.backoff * 2**attempt)
        raise ModelError(f"The teacher at {self.endpoint} ({self.key}) failed after {attempt + 1} tries: {failure}. "
                         "On-policy distillation has no fallback for the teacher's log-probs; the run stops.")

    def _choices(self, response, expected: int) -> list[dict]:
        try:
            choices = sorted(response.json()["choices"], key=lambda c: c["index"])
            for choice in choices:
                if not isinstance(choice["logprobs"]["token_logprobs"], list):
                    raise TypeError
        except (ValueError, KeyError, TypeError):
            raise ModelError(f"The teacher at {self.endpoint} ({self.key}) answered without prompt log-probs "
                             f"(choices[i].logprobs.token_logprobs): {one_line(response.text, 200)!r}. It must "
                             "support the completions API's echo with logprobs (vLLM's server does).") from None
        if len(choices) != expected:
            raise ModelError(f"The teacher at {self.endpoint} ({self.key}) returned {len(choices)} choices for "
                             f"{expected} sequences.")
        return choices

    def close(self) -> None:
        self.client.close()
