"""Request and response bodies in the OpenAI shapes, plus tether's reward endpoint.

Unknown request fields are ignored (clients send many optional ones). tether's own extensions
are ``best_of`` (also in OpenAI's legacy completions API: sample that many candidates per
prompt and return the ``n`` best, ranked here by the reward model) and ``return_scores``
(attach every candidate's reward score to the response).

Tools (:mod:`tether.serve.tool_use`): a chat request may offer ``tools`` (checked there, with the
environments' schema check) and a ``tool_choice``; its history may hold assistant messages with
``tool_calls`` (arguments as a JSON object string, as OpenAI writes them, or an object) and
``tool`` messages answering them.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

MAX_STOP = 4  # OpenAI accepts up to 4 stop sequences
SEED_RANGE = (-(2**63), 2**64 - 1)  # what torch.manual_seed accepts


class _Request(BaseModel):
    model_config = ConfigDict(extra="ignore")


class StreamOptions(_Request):
    include_usage: bool = False


class ContentPart(_Request):
    type: str
    text: str | None = None


class FunctionCall(_Request):
    name: str = Field(min_length=1)
    arguments: str | dict = "{}"

    @field_validator("arguments")
    @classmethod
    def _json_object(cls, value):
        """The arguments as an object: OpenAI sends a JSON string of one."""
        if isinstance(value, str):
            try:
                value = json.loads(value) if value.strip() else {}
            except json.JSONDecodeError as err:
                raise ValueError(f"expected a JSON object string ({err.msg} at character {err.pos})") from None
        if not isinstance(value, dict):
            raise ValueError(f"expected a JSON object string, got a JSON {type(value).__name__}")
        return value


class ToolCallIn(_Request):
    """One call of an assistant message in the history."""

    id: str | None = None
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(_Request):
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_call_id: str | None = None  # a ``tool`` message: the call it answers
    tool_calls: list[ToolCallIn] | None = None  # an ``assistant`` message: the calls it made

    @field_validator("content")
    @classmethod
    def _text_only(cls, value):
        if isinstance(value, list):
            if any(part.type != "text" or part.text is None for part in value):
                raise ValueError("only text content parts ({'type': 'text', 'text': ...}) are supported")
            return "".join(part.text for part in value)
        return value

    @model_validator(mode="after")
    def _calls_are_the_assistants(self):
        if self.tool_calls and self.role != "assistant":
            raise ValueError(f"only assistant messages carry tool_calls (this one's role is {self.role!r})")
        return self

    def as_dict(self) -> dict:
        """The message as a chat template reads it: content a string; a tool message's ``name``
        and ``tool_call_id``, an assistant's ``tool_calls`` (arguments as an object, as Hugging Face
        templates expect) when given."""
        out = {"role": self.role, "content": self.content or ""}
        if self.name is not None and self.role in ("tool", "function"):  # the tool's name
            out["name"] = self.name
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        if self.tool_calls:
            out["tool_calls"] = [
                {**({"id": c.id} if c.id is not None else {}), "type": "function",
                 "function": {"name": c.function.name, "arguments": c.function.arguments}}
                for c in self.tool_calls]
        return out


class SamplingRequest(_Request):
    """The fields shared by chat and text completions."""

    model: str | None = None
    n: int = Field(1, ge=1)
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    max_tokens: int | None = Field(None, ge=1)
    stop: str | list[str] | None = None
    seed: int | None = Field(None, ge=SEED_RANGE[0], le=SEED_RANGE[1])
    stream: bool = False
    stream_options: StreamOptions | None = None
    best_of: int | None = Field(None, ge=1, description="tether extension: candidates per prompt, best n returned")
    return_scores: bool = Field(False, description="tether extension: include every candidate's reward score")

    @field_validator("stop")
    @classmethod
    def _stop_list(cls, value):
        if value is None:
            return []
        stops = [value] if isinstance(value, str) else list(value)
        stops = [s for s in stops if s]
        if len(stops) > MAX_STOP:
            raise ValueError(f"at most {MAX_STOP} stop sequences are allowed, got {len(stops)}")
        return stops

    @property
    def stops(self) -> tuple[str, ...]:
        return tuple(self.stop or ())

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)


class ChatCompletionRequest(SamplingRequest):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    # Checked by the planner (tool_use.check_tools), so a bad one is a 400 naming the exact entry.
    tools: Any = None
    tool_choice: Any = None

    @property
    def parses_tool_calls(self) -> bool:
        """Answers are parsed for ``<tool_call>`` blocks: tools are offered and may be called."""
        return bool(self.tools) and self.tool_choice in (None, "auto")

    @property
    def token_limit(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens


class CompletionRequest(SamplingRequest):
    # A string, a list of strings, a list of token ids, or a list of token-id lists.
    prompt: str | list[str] | list[int] | list[list[int]]

    @field_validator("prompt")
    @classmethod
    def _non_empty(cls, value):
        if isinstance(value, list) and not value:
            raise ValueError("must not be an empty list")
        return value

    @property
    def token_limit(self) -> int | None:
        return self.max_tokens

    def prompt_list(self) -> list[str | list[int]]:
        """Each prompt as a string or a list of token ids."""
        p = self.prompt
        if isinstance(p, str):
            return [p]
        if all(isinstance(x, int) for x in p):
            return [list(p)]
        return list(p)


class RewardPair(_Request):
    prompt: str | list[ChatMessage]
    response: str
    ended: bool = Field(True, description="the response ended with EOS; false scores it without one")

    def prompt_value(self) -> str | list[dict]:
        return self.prompt if isinstance(self.prompt, str) else [m.as_dict() for m in self.prompt]


class RewardRequest(_Request):
    model: str | None = None
    pairs: list[RewardPair] = Field(min_length=1)


# -- responses --------------------------------------------------------------------------------
class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class FunctionCallOut(BaseModel):
    name: str
    arguments: str  # a JSON object, as a string (OpenAI's format)


class ToolCallOut(BaseModel):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCallOut


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str | None  # None (null) when the answer is tool calls only; always sent
    tool_calls: list[ToolCallOut] | None = None


class ChatChoice(BaseModel):
    index: int
    message: AssistantMessage
    finish_reason: Literal["stop", "length", "tool_calls"]
    logprobs: None = None
    score: float | None = None  # reward score, when ranked or asked for
    candidate_index: int | None = None


class Candidate(BaseModel):
    """One sampled candidate, listed when ``return_scores`` is set."""

    prompt_index: int
    text: str
    finish_reason: Literal["stop", "length"]
    score: float


class ChatCompletion(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage
    candidates: list[Candidate] | None = None


class CompletionChoice(BaseModel):
    index: int
    text: str
    finish_reason: Literal["stop", "length"]
    logprobs: None = None
    score: float | None = None
    candidate_index: int | None = None


class Completion(BaseModel):
    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage
    candidates: list[Candidate] | None = None


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "tether"


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class RewardResponse(BaseModel):
    object: Literal["list"] = "list"
    model: str
    scores: list[float]
