"""Samples -> OpenAI response bodies: best-of-N selection, usage counts, streaming chunks, and
tool calls (:mod:`tether.serve.tool_use`) when the request offers tools."""

from __future__ import annotations

import time
import uuid

from tether.serve import tool_use
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


def assistant_turn(sample: Sample, tools: bool) -> tuple[AssistantMessage, str]:
    """A sample as the choice's message and finish_reason; with ``tools``, its ``<tool_call>``
    blocks as ``tool_calls``."""
    if not tools:
        return AssistantMessage(content=sample.text), sample.finish_reason
    content, calls, finish_reason = tool_use.answer(sample.text, sample.finish_reason)
    return AssistantMessage(content=content, tool_calls=calls), finish_reason


def chat_completion(job: GenJob, result: list[list[Sample]], n: int, model: str, return_scores: bool,
                    tools: bool = False) -> dict:
    samples = result[0]
    choices = []
    for j, c in enumerate(pick(samples, n)):
        message, finish_reason = assistant_turn(samples[c], tools)
        choices.append(ChatChoice(index=j, message=message, finish_reason=finish_reason, score=samples[c].score,
                                  candidate_index=c if len(samples) > n else None))
    body = ChatCompletion(id=new_id("chatcmpl"), created=int(time.time()), model=model, choices=choices,
                          usage=usage(job, result), candidates=candidates(result) if return_scores else None)
    out = body.model_dump(exclude_none=True)
    for choice in out["choices"]:
        choice["message"].setdefault("content", None)  # OpenAI sends "content": null with tool calls
    return out


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

    def turn(self, sample: Sample) -> list[dict]:
        """A buffered chat answer with tools, after the start chunk: its content (if any) in one
        delta, its tool calls (if any) in one delta, then the finish chunk."""
        message, finish_reason = assistant_turn(sample, tools=True)
        out = [self.text(message.content)] if message.content else []
        if message.tool_calls:
            calls = [{"index": k, **call.model_dump()} for k, call in enumerate(message.tool_calls)]
            out.append(self._chunk([{"index": 0, "delta": {"tool_calls": calls}, "logprobs": None,
                                     "finish_reason": None}]))
        return out + [self.finish(finish_reason)]

    def usage(self, job: GenJob, result: list[list[Sample]]) -> dict:
        return self._chunk([], usage=usage(job, result).model_dump())
