"""Samples -> OpenAI response bodies: best-of-N selection, usage counts, streaming chunks."""

from __future__ import annotations

import time
import uuid

from tether.serve.schemas import (
    AssistantMessage,
    Candidate,
    ChatChoice,
    ChatCompletion,
    Completion,
    CompletionChoice,
    Usage,
)
from tether.serve.service import GenJob, Sample


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def pick(samples: list[Sample], n: int) -> list[int]:
    """Indices of the ``n`` samples to return: the best-scored first when there are more candidates."""
    if len(samples) > n:
        # Highest reward first; ties keep the earlier sample (sorted is stable).
        return sorted(range(len(samples)), key=lambda i: -samples[i].score)[:n]
    return list(range(n))


def usage(job: GenJob, result: list[list[Sample]]) -> Usage:
    """Prompt tokens once per prompt; completion tokens of every sampled candidate (EOS included)."""
    prompt = sum(len(p) for p in job.prompts)
    completion = sum(s.completion_tokens for samples in result for s in samples)
    return Usage(prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion)


def candidates(result: list[list[Sample]]) -> list[Candidate]:
    return [
        Candidate(prompt_index=i, text=s.text, finish_reason=s.finish_reason, score=s.score)
        for i, samples in enumerate(result) for s in samples
    ]


def chat_completion(job: GenJob, result: list[list[Sample]], n: int, model: str, return_scores: bool) -> dict:
    samples = result[0]
    choices = [
        ChatChoice(index=j, message=AssistantMessage(content=samples[c].text), finish_reason=samples[c].finish_reason,
                   score=samples[c].score, candidate_index=c if len(samples) > n else None)
        for j, c in enumerate(pick(samples, n))
    ]
    body = ChatCompletion(id=new_id("chatcmpl"), created=int(time.time()), model=model, choices=choices,
                          usage=usage(job, result), candidates=candidates(result) if return_scores else None)
    return body.model_dump(exclude_none=True)


def completion(job: GenJob, result: list[list[Sample]], n: int, model: str, return_scores: bool) -> dict:
    choices = []
    for i, samples in enumerate(result):
        for j, c in enumerate(pick(samples, n)):
            choices.append(CompletionChoice(
                index=i * n + j, text=samples[c].text, finish_reason=samples[c].finish_reason,
                score=samples[c].score, candidate_index=c if len(samples) > n else None))
    body = Completion(id=new_id("cmpl"), created=int(time.time()), model=model, choices=choices,
                      usage=usage(job, result), candidates=candidates(result) if return_scores else None)
    return body.model_dump(exclude_none=True)


class ChunkMaker:
    """Server-sent-event chunks of one streamed choice, in the chat or text-completion shape."""

    def __init__(self, chat: bool, model: str, include_usage: bool):
        self.chat = chat
        self.id = new_id("chatcmpl" if chat else "cmpl")
        self.created = int(time.time())
        self.model = model
        self.include_usage = include_usage

    def _chunk(self, choices: list[dict], **extra) -> dict:
        obj = "chat.completion.chunk" if self.chat else "text_completion"
        out = {"id": self.id, "object": obj, "created": self.created, "model": self.model, "choices": choices}
        if self.include_usage:
            out["usage"] = None
        out.update(extra)
        return out

    def _choice(self, text: str | None, finish_reason: str | None, role: bool = False) -> dict:
        if self.chat:
            delta = {} if text is None else {"content": text}
            if role:
                delta = {"role": "assistant", "content": ""}
            return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        return {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish_reason}

    def start(self) -> dict | None:
        return self._chunk([self._choice(None, None, role=True)]) if self.chat else None

    def text(self, delta: str) -> dict:
        return self._chunk([self._choice(delta, None)])

    def finish(self, finish_reason: str) -> dict:
        return self._chunk([self._choice(None, finish_reason)])

    def usage(self, job: GenJob, result: list[list[Sample]]) -> dict:
        return self._chunk([], usage=usage(job, result).model_dump())
