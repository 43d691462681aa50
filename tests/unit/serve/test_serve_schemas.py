"""Request schemas: OpenAI shapes, ignored unknown fields, tether's extensions, clear errors."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from tether.serve.schemas import ChatCompletionRequest, CompletionRequest, RewardRequest


def chat(**fields):
    return ChatCompletionRequest.model_validate({"messages": [{"role": "user", "content": "hi"}], **fields})


def test_chat_defaults_and_unknown_fields_ignored():
    req = chat(model="m", frequency_penalty=0.5, logit_bias={"1": 2}, tools=[], user="u")
    assert req.n == 1 and req.temperature is None and req.top_p is None and req.stream is False
    assert req.best_of is None and req.return_scores is False and req.stops == ()
    assert not hasattr(req, "frequency_penalty")


def test_extensions_and_sampling_fields():
    req = chat(best_of=4, n=2, return_scores=True, temperature=0, top_p=0.5, seed=3, max_tokens=7)
    assert (req.best_of, req.n, req.return_scores, req.temperature, req.top_p, req.seed) == (4, 2, True, 0, 0.5, 3)
    assert req.token_limit == 7


def test_max_completion_tokens_wins_over_max_tokens():
    assert chat(max_tokens=5, max_completion_tokens=9).token_limit == 9


def test_stop_normalised_to_tuple_without_empty_strings():
    assert chat(stop="x").stops == ("x",)
    assert chat(stop=["a", "", "b"]).stops == ("a", "b")
    assert chat(stop=None).stops == ()


def test_text_content_parts_are_joined():
    req = ChatCompletionRequest.model_validate(
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "a "}, {"type": "text", "text": "b"}]}]})
    assert req.messages[0].as_dict() == {"role": "user", "content": "a b"}


def test_stream_options_include_usage():
    assert chat(stream=True, stream_options={"include_usage": True}).include_usage
    assert not chat(stream=True).include_usage


@pytest.mark.parametrize("fields, where", [
    ({"n": 0}, "n"),
    ({"temperature": 2.5}, "temperature"),
    ({"top_p": 0}, "top_p"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"best_of": 0}, "best_of"),
    ({"stop": ["a", "b", "c", "d", "e"]}, "stop"),
    ({"seed": 2**64}, "seed"),
    ({"messages": []}, "messages"),
    ({"messages": [{"role": "robot", "content": "x"}]}, "messages"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]}, "messages"),
])
def test_chat_rejects(fields, where):
    body = {"messages": [{"role": "user", "content": "hi"}], **fields}
    with pytest.raises(ValidationError) as info:
        ChatCompletionRequest.model_validate(body)
    assert info.value.errors()[0]["loc"][0] == where


@pytest.mark.parametrize("prompt, expected", [
    ("a b", ["a b"]),
    (["a", "b"], ["a", "b"]),
    ([5, 6, 7], [[5, 6, 7]]),
    ([[5, 6], [7]], [[5, 6], [7]]),
])
def test_completion_prompt_forms(prompt, expected):
    assert CompletionRequest.model_validate({"prompt": prompt}).prompt_list() == expected


@pytest.mark.parametrize("prompt", [[], {"a": 1}, None, [1, "a"], 3])
def test_completion_rejects_bad_prompts(prompt):
    with pytest.raises(ValidationError):
        CompletionRequest.model_validate({"prompt": prompt})


def test_reward_request_accepts_text_and_messages():
    req = RewardRequest.model_validate({"pairs": [
        {"prompt": "p", "response": "r"},
        {"prompt": [{"role": "user", "content": "p"}], "response": "r", "ended": False, "extra": 1},
    ]})
    assert req.pairs[0].prompt_value() == "p" and req.pairs[0].ended
    assert req.pairs[1].prompt_value() == [{"role": "user", "content": "p"}] and not req.pairs[1].ended
    with pytest.raises(ValidationError):
        RewardRequest.model_validate({"pairs": []})
    with pytest.raises(ValidationError):
        RewardRequest.model_validate({"pairs": [{"prompt": "p"}]})


# -- tools ----------------------------------------------------------------------------------------
TOOL = {"type": "function", "function": {"name": "add", "parameters": {"type": "object", "properties": {}}}}


@pytest.mark.parametrize("fields, parses", [
    ({}, False),
    ({"tools": []}, False),
    ({"tools": [TOOL]}, True),
    ({"tools": [TOOL], "tool_choice": "auto"}, True),
    ({"tools": [TOOL], "tool_choice": "none"}, False),
])
def test_answers_are_parsed_for_calls_only_when_tools_may_be_called(fields, parses):
    req = chat(**fields)
    assert req.parses_tool_calls is parses
    assert req.tools == fields.get("tools") and req.tool_choice == fields.get("tool_choice")


def test_history_with_tool_calls_and_tool_results():
    req = ChatCompletionRequest.model_validate({"messages": [
        {"role": "user", "content": "2 + 3 ?", "name": "ann"},
        {"role": "assistant", "content": None, "refusal": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'}},
            {"type": "function", "function": {"name": "now", "arguments": ""}},
            {"id": "call_3", "function": {"name": "add", "arguments": {"a": 1}}}]},
        {"role": "tool", "tool_call_id": "call_1", "name": "add", "content": [{"type": "text", "text": "5"}]},
    ]})
    user, assistant, tool = (m.as_dict() for m in req.messages)
    assert user == {"role": "user", "content": "2 + 3 ?"}  # a participant's name is not the template's business
    assert assistant == {"role": "assistant", "content": "", "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": {"a": 2, "b": 3}}},
        {"type": "function", "function": {"name": "now", "arguments": {}}},
        {"id": "call_3", "type": "function", "function": {"name": "add", "arguments": {"a": 1}}}]}
    assert tool == {"role": "tool", "content": "5", "name": "add", "tool_call_id": "call_1"}


@pytest.mark.parametrize("message, where", [
    ({"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{oops"}}]},
     ("messages", 0, "tool_calls", 0, "function", "arguments")),
    ({"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "[1]"}}]},
     ("messages", 0, "tool_calls", 0, "function", "arguments")),
    ({"role": "assistant", "tool_calls": [{"function": {"name": "", "arguments": "{}"}}]},
     ("messages", 0, "tool_calls", 0, "function", "name")),
    ({"role": "assistant", "tool_calls": [{"type": "retrieval", "function": {"name": "f"}}]},
     ("messages", 0, "tool_calls", 0, "type")),
    ({"role": "user", "content": "x", "tool_calls": [{"function": {"name": "f"}}]}, ("messages", 0)),
])
def test_bad_tool_calls_in_the_history(message, where):
    with pytest.raises(ValidationError) as info:
        ChatCompletionRequest.model_validate({"messages": [message]})
    assert info.value.errors()[0]["loc"] == where
