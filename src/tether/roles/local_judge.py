"""An LLM judge loaded in this process (``judge.path``): a frozen causal LM of its own tokenizer and
chat template, asked greedily (or at ``temperature``) with transformers' ``generate``. It answers as
:class:`tether.roles.judge_client.JudgeClient` does (``ask``, ``stats``, ``check``, ``close``), so
the judge reward is the same over either: the answers cached by content, the conversations not yet
asked generated in batches of ``batch_size`` (left-padded), a conversation whose prompt and
``max_tokens`` do not fit the judge's context answered None and counted (``too_long``)."""

from __future__ import annotations

import threading
import time

import torch

from tether.common.errors import ModelError
from tether.models import load_causal_lm, load_tokenizer
from tether.models.loading import context_length
from tether.roles.judge_client import JudgeStats, content_key


def judge_tokenizer(path: str, key: str):
    """The judge's own tokenizer (left padding), with the chat template it is asked in; a ModelError
    naming ``key`` without one."""
    tok = load_tokenizer(path, padding_side="left", key=key)
    if not getattr(tok, "chat_template", None):
        raise ModelError(f"The judge {path!r} ({key}) has no chat template: a judge is asked in messages, so its "
                         "tokenizer must carry the template it was trained with.")
    return tok


class LocalJudge:
    """The judge checkpoint at ``path`` on ``device`` (``key``: the config key that named it)."""

    def __init__(self, path: str, device: str = "cpu", max_tokens: int = 256, temperature: float = 0.0,
                 batch_size: int = 8, dtype: str = "float32", key: str = "the judge block"):
        self.model, self.base, self.key = path, f"{path} (in process)", key
        self.tokenizer = judge_tokenizer(path, key)
        self.lm = load_causal_lm(path, self.tokenizer, dtype=dtype, key=key).to(device).eval()
        self.device, self.batch_size = device, batch_size
        self.context = context_length(self.lm)
        self.sampling = {"max_tokens": max_tokens, "temperature": temperature}
        self.stats = JudgeStats()
        self._cache: dict[str, str] = {}
        self._lock = threading.Lock()

    def check(self) -> None:
        """Loaded already: nothing to reach."""

    def ask(self, conversations: list[list[dict]]) -> list[str | None]:
        """Each conversation's answer; None where it does not fit the judge's context."""
        keys = [content_key(self.model, c, self.sampling) for c in conversations]
        todo = {}  # key -> conversation, each asked once
        for key, messages in zip(keys, conversations):
            if key in self._cache or key in todo:
                self.stats.cache_hits += 1
            else:
                todo[key] = messages
        items = list(todo.items())
        for start in range(0, len(items), self.batch_size):
            chunk = items[start:start + self.batch_size]
            for (key, _), text in zip(chunk, self._generate([m for _, m in chunk])):
                if text is not None:
                    self._cache[key] = text
        return [self._cache.get(key) for key in keys]

    @torch.no_grad()
    def _generate(self, conversations: list[list[dict]]) -> list[str | None]:
        t0 = time.perf_counter()
        tok, budget = self.tokenizer, self.sampling["max_tokens"]
        prompts = [list(tok.apply_chat_template(m, add_generation_prompt=True, tokenize=True, return_dict=False))
                   for m in conversations]
        fits = [self.context is None or len(p) + budget <= self.context for p in prompts]
        out: list[str | None] = [None] * len(prompts)
        asked = [i for i, ok in enumerate(fits) if ok]
        self.stats.too_long += len(prompts) - len(asked)
        if asked:
            width = max(len(prompts[i]) for i in asked)
            pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
            ids = torch.tensor([[pad] * (width - len(prompts[i])) + prompts[i] for i in asked], device=self.device)
            mask = torch.tensor([[0] * (width - len(prompts[i])) + [1] * len(prompts[i]) for i in asked],
                                device=self.device)
            temperature = self.sampling["temperature"]
            sampled = self.lm.generate(input_ids=ids, attention_mask=mask, max_new_tokens=budget,
                                       do_sample=temperature > 0, temperature=temperature or None, top_k=None,
                                       top_p=None, pad_token_id=pad, eos_token_id=tok.eos_token_id)[:, width:]
            for row, i in enumerate(asked):
                new = sampled[row].tolist()
                ended = tok.eos_token_id in new
                new = new[:new.index(tok.eos_token_id)] if ended else new
                out[i] = tok.decode(new, skip_special_tokens=True)
                self.stats.prompt_tokens += len(prompts[i])
                self.stats.completion_tokens += len(new) + int(ended)
        self.stats.requests += len(asked)
        self.stats.answered += len(asked)
        self.stats.latency_s += time.perf_counter() - t0
        return out

    def close(self) -> None:
        self._cache.clear()
