"""`tether serve` with tools, live on 127.0.0.1 through the official openai client: a request that
offers a tool gets `tool_calls`, the tool's result sent back gets the final answer, streaming sends
the same call, and unsupported `tool_choice` values and malformed tools are 400s naming the field.

The policy is a tiny Qwen2 that learned this exchange by heart (tests/tool_model.py):
the server, the lean engine and greedy decoding are the real ones; its answers are the model's.
"""

from __future__ import annotations

import json

import openai
import pytest

from tether.serve import ModelService, ServerThread, ServeSettings, create_app
from tool_model import ARGUMENTS, FINAL, QUESTION, TOOLS, build

ASK = [{"role": "user", "content": QUESTION}]


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    path = build(tmp_path_factory.mktemp("serve-tools") / "policy")
    service = ModelService.load(str(path), max_batch_size=4)
    settings = ServeSettings(model_name="tiny-tools", default_max_tokens=40)
    with ServerThread(create_app(service, settings)) as running:
        yield openai.OpenAI(base_url=running.url + "/v1", api_key="none", max_retries=0, timeout=60)


def ask(client, messages, **kwargs):
    return client.chat.completions.create(model="tiny-tools", messages=messages, tools=TOOLS, temperature=0,
                                          **kwargs)


def test_a_tool_call_round_trip_with_the_openai_client(client):
    first = ask(client, ASK)
    (choice,) = first.choices
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.id.startswith("call_")
    assert call.function.name == "add" and json.loads(call.function.arguments) == ARGUMENTS
    # Run the tool and send its result back, with the assistant message as the client got it.
    result = sum(json.loads(call.function.arguments).values())
    history = ASK + [choice.message, {"role": "tool", "tool_call_id": call.id, "content": str(result)}]
    second = ask(client, history)
    assert second.choices[0].finish_reason == "stop"
    assert second.choices[0].message.content == FINAL and not second.choices[0].message.tool_calls


def test_without_tools_the_answer_is_plain_text(client):
    offered = ask(client, ASK, tool_choice="none")
    assert offered.choices[0].finish_reason == "stop" and not offered.choices[0].message.tool_calls
    assert '"name": "add"' in offered.choices[0].message.content  # the same text, left unparsed


def test_streaming_with_tools_sends_the_call_in_one_delta(client):
    whole = ask(client, ASK).choices[0].message.tool_calls[0]
    chunks = list(ask(client, ASK, stream=True))
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    assert deltas[0].role == "assistant"
    (with_calls,) = [d for d in deltas if d.tool_calls]
    (call,) = with_calls.tool_calls
    assert call.index == 0 and call.function.name == "add" and call.function.arguments == whole.function.arguments
    assert not "".join(d.content or "" for d in deltas)
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


@pytest.mark.parametrize("tool_choice", ["required", {"type": "function", "function": {"name": "add"}}])
def test_unsupported_tool_choice_is_a_400(client, tool_choice):
    with pytest.raises(openai.BadRequestError) as info:
        ask(client, ASK, tool_choice=tool_choice)
    assert info.value.body["param"] == "tool_choice" and info.value.body["code"] == "unsupported_value"


def test_a_malformed_tool_schema_is_a_400_naming_the_entry(client):
    bad = [TOOLS[0], {"type": "function", "function": {"name": "two words"}}]
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="tiny-tools", messages=ASK, tools=bad)
    assert info.value.body["param"] == "tools[1].function.name"
    assert "tools[1].function.name" in info.value.body["message"]
