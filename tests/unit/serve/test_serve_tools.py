"""Tools in chat completions: the request's tools and tool_choice checked, the history rendered for
the chat template, the answer's `<tool_call>` blocks as OpenAI `tool_calls`, streamed or not.

The app tests answer every row with a scripted text (the tiny model cannot write a tool call) and
record what the chat template was given; tests/integration/test_serve_tool_calls.py runs a real model.
"""

from __future__ import annotations

import copy
import json

import pytest

from tether.environments import parse_tool_calls
from tether.serve import tool_use
from tether.serve.errors import APIError
from tether.serve.service import Sample

MESSAGES = [{"role": "user", "content": "what is 2 + 3 ?"}]
TOOLS = [{"type": "function", "function": {"name": "add", "description": "Add two numbers.", "parameters": {
    "type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"]}}}]
CALL = '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>'
# Renders assistant tool_calls itself (as Qwen2.5's template does).
RENDERS_CALLS = ("{% for m in messages %}{{ m.role }}: {{ m.content }}{% for c in m.tool_calls or [] %}"
                 "[call {{ c.function.name }} {{ c.function.arguments | tojson }}]{% endfor %}\n{% endfor %}")


# -- the request ---------------------------------------------------------------------------------
@pytest.mark.parametrize("tools", [None, []])
def test_no_tools_give_the_template_none(tools):
    assert tool_use.check_tools(tools, None) is None
    assert tool_use.check_tools(tools, "auto") is None


def test_tools_are_checked_and_passed_on():
    assert tool_use.check_tools(TOOLS, "none") is TOOLS


@pytest.mark.parametrize("tools, param", [
    ({"type": "function"}, "tools"),
    ([{"type": "function", "function": {"name": "two words"}}], "tools[0].function.name"),
    ([TOOLS[0], {"type": "retrieval"}], "tools[1]"),
    ([TOOLS[0], TOOLS[0]], "tools[1].function.name"),
    ([{"type": "function", "function": {"name": "f", "parameters": {"type": "array"}}}],
     "tools[0].function.parameters"),
    ([{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": 3}}}],
     "tools[0].function.parameters/properties"),
])
def test_a_malformed_tool_is_a_400_naming_the_entry(tools, param):
    with pytest.raises(APIError) as info:
        tool_use.check_tools(tools, None)
    assert info.value.status == 400 and info.value.param == param
    assert info.value.message.startswith(f"Invalid '{param}': expected")


@pytest.mark.parametrize("choice", ["required", "any", {"type": "function", "function": {"name": "add"}}, 3])
def test_unsupported_tool_choice_is_a_400(choice):
    with pytest.raises(APIError) as info:
        tool_use.check_tools(TOOLS, choice)
    assert (info.value.status, info.value.param, info.value.code) == (400, "tool_choice", "unsupported_value")
    assert '"auto"' in info.value.message and '"none"' in info.value.message


# -- the history ---------------------------------------------------------------------------------
def history(content=""):
    return MESSAGES + [
        {"role": "assistant", "content": content, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": {"a": 2, "b": 3}}},
            {"id": "call_2", "type": "function", "function": {"name": "add", "arguments": {"a": 1, "b": 1}}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "5"}]


def test_calls_are_written_as_the_model_writes_them_for_a_template_that_does_not_render_them():
    rendered = tool_use.template_messages(history("let me add."), renders_calls=False)
    assistant = rendered[1]
    assert "tool_calls" not in assistant
    assert assistant["content"] == ('let me add.\n' + CALL + '\n<tool_call>\n{"name": "add", "arguments": '
                                    '{"a": 1, "b": 1}}\n</tool_call>')
    turn = parse_tool_calls(assistant["content"])  # the environments' parser reads them back
    assert turn.content == "let me add." and [c.arguments for c in turn.calls] == [{"a": 2, "b": 3}, {"a": 1, "b": 1}]
    assert tool_use.template_messages(history(), renders_calls=False)[1]["content"].startswith("<tool_call>")
    assert rendered[2] == history()[2] and rendered[0] == MESSAGES[0]


def test_a_template_that_renders_calls_gets_them_as_they_are():
    assert tool_use.template_messages(history(), renders_calls=True) == history()


def test_the_probe_tells_templates_apart(tiny_models):
    tok = copy.deepcopy(tiny_models[0])
    assert not tool_use.renders_tool_calls(tok)  # the arith template writes role : content only
    tok.chat_template = RENDERS_CALLS
    assert tool_use.renders_tool_calls(tok)
    tok.chat_template = "{{ raise_exception('no') }}"
    assert not tool_use.renders_tool_calls(tok)


# -- the answer ----------------------------------------------------------------------------------
def test_calls_are_split_from_the_content_as_the_environments_parse_them():
    text = f"I will add.\n{CALL}\n<tool_call>{{\"name\": \"add\", \"arguments\": {{\"a\": 1}}}}</tool_call>"
    content, calls = tool_use.split_tool_calls(text, "call_x")
    assert content == "I will add."
    assert calls == parse_tool_calls(text, "call_x").calls and [c.id for c in calls] == ["call_x_0", "call_x_1"]


def test_malformed_blocks_stay_in_the_content():
    bad = "<tool_call>{not json}</tool_call>"
    content, calls = tool_use.split_tool_calls(f"{bad} {CALL} <tool_call>{{\"name\": \"add\"", "c")
    assert content == f'{bad}  <tool_call>{{"name": "add"' and [c.id for c in calls] == ["c_1"]
    assert tool_use.split_tool_calls(f"  {bad} ", "c") == (f"  {bad} ", [])  # no call: the text as it is


@pytest.mark.parametrize("text, finish, expected", [
    (CALL, "stop", (None, "tool_calls")),
    (f"sure. {CALL}", "stop", ("sure.", "tool_calls")),
    (f"{CALL} and more", "length", ("and more", "length")),  # cut at max_tokens: still says so
    ("no call here ", "stop", ("no call here ", "stop")),
])
def test_answer_content_and_finish_reason(text, finish, expected):
    content, calls, finish_reason = tool_use.answer(text, finish)
    assert (content, finish_reason) == expected
    if CALL in text:
        (call,) = calls
        assert call["type"] == "function" and call["id"].startswith("call_") and call["id"].endswith("_0")
        assert call["function"] == {"name": "add", "arguments": json.dumps({"a": 2, "b": 3})}
    else:
        assert calls is None


def test_each_answer_gets_its_own_call_ids():
    assert tool_use.answer(CALL, "stop")[1][0]["id"] != tool_use.answer(CALL, "stop")[1][0]["id"]


# -- through the app -----------------------------------------------------------------------------
class SpyTokenizer:
    """The tiny tokenizer, recording what its chat template is given."""

    def __init__(self, tokenizer):
        self._tokenizer = tokenizer
        self.rendered = []

    def __getattr__(self, name):
        return getattr(self._tokenizer, name)

    def __len__(self):
        return len(self._tokenizer)

    def apply_chat_template(self, messages, **kwargs):
        self.rendered.append((copy.deepcopy(messages), kwargs.get("tools")))
        return self._tokenizer.apply_chat_template(messages, **kwargs)


class Scripted:
    """The tiny service answering every row with ``text`` (streamed in one delta); candidate ``i``
    scores ``i`` when the request ranks them."""

    def __init__(self, service, text, finish_reason="stop"):
        self._service, self.text, self.finish_reason = service, text, finish_reason
        self.tokenizer = SpyTokenizer(service.tokenizer)

    def __getattr__(self, name):
        return getattr(self._service, name)

    def run_batch(self, jobs):
        for job in jobs:
            if job.on_delta is not None:
                job.on_delta(self.text)
        return [[[Sample(self.text, self.finish_reason, 7, float(i) if job.reward_prompts else None)
                  for i in range(job.candidates)] for _ in job.prompts] for job in jobs]


def post(client, **fields):
    body = {"model": "tiny", "messages": MESSAGES, "max_tokens": 8, **fields}
    return client.post("/v1/chat/completions", json=body)


def events(response) -> list[dict]:
    lines = [line for line in response.iter_lines() if line]
    assert lines[-1] == "data: [DONE]"
    return [json.loads(line[6:]) for line in lines[:-1]]


def test_a_generated_call_is_answered_as_tool_calls(policy_only, client_for):
    scripted = Scripted(policy_only, f"adding. {CALL}")
    response = post(client_for(scripted), tools=TOOLS)
    assert response.status_code == 200, response.text
    (choice,) = response.json()["choices"]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] == "adding."
    (call,) = choice["message"]["tool_calls"]
    assert call["function"] == {"name": "add", "arguments": '{"a": 2, "b": 3}'}
    assert scripted.tokenizer.rendered[-1] == (MESSAGES, TOOLS)  # the template was offered the tools


def test_only_calls_give_null_content(policy_only, client_for):
    message = post(client_for(Scripted(policy_only, CALL)), tools=TOOLS).json()["choices"][0]["message"]
    assert message["content"] is None and "content" in message and len(message["tool_calls"]) == 1


@pytest.mark.parametrize("fields", [{}, {"tools": TOOLS, "tool_choice": "none"}, {"tools": []}])
def test_without_tools_to_call_the_text_is_not_parsed(policy_only, client_for, fields):
    choice = post(client_for(Scripted(policy_only, CALL)), **fields).json()["choices"][0]
    assert choice == {"index": 0, "message": {"role": "assistant", "content": CALL}, "finish_reason": "stop"}


def test_tool_choice_none_still_shows_the_tools(policy_only, client_for):
    scripted = Scripted(policy_only, "hi")
    post(client_for(scripted), tools=TOOLS, tool_choice="none")
    assert scripted.tokenizer.rendered[-1][1] == TOOLS


def test_history_with_calls_and_tool_results_reaches_the_template(policy_only, client_for):
    scripted = Scripted(policy_only, "it is 5 .")
    sent = MESSAGES + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_9", "type": "function", "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'}}]},
        {"role": "tool", "tool_call_id": "call_9", "name": "add", "content": "5"}]
    body = post(client_for(scripted), messages=sent, tools=TOOLS).json()
    assert body["choices"][0]["message"] == {"role": "assistant", "content": "it is 5 ."}
    assert body["choices"][0]["finish_reason"] == "stop"
    messages, tools = scripted.tokenizer.rendered[-1]
    assert tools == TOOLS
    assert messages[1] == {"role": "assistant", "content": CALL}  # the arith template does not render tool_calls
    assert messages[2] == {"role": "tool", "content": "5", "tool_call_id": "call_9", "name": "add"}


def test_a_template_that_renders_calls_gets_them(policy_only, client_for):
    scripted = Scripted(policy_only, "ok")
    tok = copy.deepcopy(policy_only.tokenizer)
    tok.chat_template = RENDERS_CALLS + "{% if add_generation_prompt %}assistant :{% endif %}"
    scripted.tokenizer = SpyTokenizer(tok)
    sent = MESSAGES + [{"role": "assistant", "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "add", "arguments": '{"a": 2}'}}]}]
    assert post(client_for(scripted), messages=sent).status_code == 200
    messages, tools = scripted.tokenizer.rendered[-1]
    assert tools is None and messages[1]["tool_calls"][0]["function"] == {"name": "add", "arguments": {"a": 2}}


def test_streaming_with_tools_buffers_the_answer(policy_only, client_for):
    client = client_for(Scripted(policy_only, f"adding. {CALL}"))
    with client.stream("POST", "/v1/chat/completions", json={
            "messages": MESSAGES, "tools": TOOLS, "stream": True, "stream_options": {"include_usage": True}}) as r:
        assert r.status_code == 200
        chunks = events(r)
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert deltas[0] == {"role": "assistant", "content": ""}
    assert deltas[1] == {"content": "adding."}
    (call,) = deltas[2]["tool_calls"]
    assert call["index"] == 0 and call["type"] == "function" and call["id"].startswith("call_")
    assert call["function"] == {"name": "add", "arguments": '{"a": 2, "b": 3}'}
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]] == [None, None, None, "tool_calls"]
    assert chunks[-1]["usage"]["completion_tokens"] == 7


def test_streaming_with_tools_and_no_call_sends_the_text(policy_only, client_for):
    client = client_for(Scripted(policy_only, "just text"))
    with client.stream("POST", "/v1/chat/completions", json={
            "messages": MESSAGES, "tools": TOOLS, "stream": True}) as r:
        chunks = events(r)
    assert [c["choices"][0]["delta"] for c in chunks] == [{"role": "assistant", "content": ""},
                                                          {"content": "just text"}, {}]
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


@pytest.mark.parametrize("fields, param", [
    ({"tools": [{"type": "function", "function": {"name": "a b"}}]}, "tools[0].function.name"),
    ({"tools": "add"}, "tools"),
    ({"tools": TOOLS, "tool_choice": "required"}, "tool_choice"),
    ({"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{oops"}}]}]},
     "messages[0].tool_calls[0].function.arguments"),
    ({"messages": [{"role": "user", "content": "x", "tool_calls": [{"function": {"name": "f"}}]}]}, "messages[0]"),
])
def test_bad_tool_fields_are_400s_naming_the_field(policy_only, client_for, fields, param):
    response = post(client_for(policy_only), **fields)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == param and error["type"] == "invalid_request_error", error


def test_best_of_ranks_and_answers_each_choice_with_tool_calls(service, client_for):
    body = post(client_for(Scripted(service, CALL)), tools=TOOLS, n=2, best_of=3, return_scores=True).json()
    assert len(body["choices"]) == 2 and len(body["candidates"]) == 3
    ids = [c["message"]["tool_calls"][0]["id"] for c in body["choices"]]
    assert len(set(ids)) == 2 and all(c["finish_reason"] == "tool_calls" for c in body["choices"])
    assert all(c["text"] == CALL for c in body["candidates"])  # candidates keep the raw text
