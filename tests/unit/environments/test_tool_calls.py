"""Parsing <tool_call> blocks: well-formed calls, the text around them, and every malformed case
as an error (never an exception)."""

from __future__ import annotations

import json

from tether.environments.tool_calls import MalformedCall, ToolCall, assistant_message, parse_tool_calls


def block(body) -> str:
    return f"<tool_call>{body if isinstance(body, str) else json.dumps(body)}</tool_call>"


def test_no_block_is_all_content():
    turn = parse_tool_calls("  The answer is 4.  ")
    assert (turn.content, turn.calls, turn.malformed, turn.blocks) == ("The answer is 4.", [], [], 0)


def test_one_call_and_the_text_around_it():
    text = "Let me add.\n<tool_call>\n" + json.dumps({"name": "add", "arguments": {"a": 1, "b": 2}}) + "\n</tool_call>"
    turn = parse_tool_calls(text, id_prefix="call_1")
    assert turn.content == "Let me add."
    assert turn.calls == [ToolCall(0, "call_1_0", "add", {"a": 1, "b": 2})]
    assert turn.malformed == []


def test_several_calls_keep_their_order_and_the_text_between_them():
    text = ("a " + block({"name": "add", "arguments": {"a": 1, "b": 2}}) + " b "
            + block({"name": "echo", "arguments": {"text": "hi"}}) + " c")
    turn = parse_tool_calls(text)
    assert [c.name for c in turn.calls] == ["add", "echo"]
    assert [c.id for c in turn.calls] == ["call_0", "call_1"]
    assert turn.content == "a  b  c"


def test_missing_arguments_is_a_call_without_arguments():
    assert parse_tool_calls(block({"name": "hang"})).calls == [ToolCall(0, "call_0", "hang", {})]


def test_invalid_json_is_malformed_and_the_good_call_beside_it_stands():
    turn = parse_tool_calls(block('{"name": "add", "arguments": {a: 1}}') + block({"name": "echo", "arguments": {}}))
    assert [c.name for c in turn.calls] == ["echo"] and turn.calls[0].index == 1
    (bad,) = turn.malformed
    assert bad.index == 0 and bad.reason.startswith("invalid JSON") and "{a: 1}" in bad.text


def test_missing_or_empty_name_is_malformed():
    for body in ({"arguments": {"a": 1}}, {"name": "", "arguments": {}}, {"name": 3, "arguments": {}}):
        (bad,) = parse_tool_calls(block(body)).malformed
        assert "name" in bad.reason


def test_arguments_that_are_not_an_object_are_malformed():
    for arguments, kind in (('{"a": 1}', "string"), ([1, 2], "list"), (3, "int")):
        (bad,) = parse_tool_calls(block({"name": "add", "arguments": arguments})).malformed
        assert f"JSON {kind}, not an object" in bad.reason and "'add'" in bad.reason


def test_a_body_that_is_not_an_object_is_malformed():
    (bad,) = parse_tool_calls(block("[1, 2]")).malformed
    assert bad.reason == "expected a JSON object, got a JSON list"


def test_an_unclosed_block_is_malformed_and_no_content():
    turn = parse_tool_calls("Sure. " + block({"name": "echo", "arguments": {"text": "x"}}) + ' <tool_call>{"name": "ad')
    assert turn.content == "Sure." and len(turn.calls) == 1
    assert turn.malformed == [MalformedCall(1, "call_1", "no closing </tool_call>", '{"name": "ad')]


def test_the_assistant_message_in_the_openai_format():
    turn = parse_tool_calls("hi " + block({"name": "add", "arguments": {"a": 1, "b": 2}}) + block("nope"))
    message = assistant_message(turn)
    assert message == {"role": "assistant", "content": "hi", "tool_calls": [
        {"id": "call_0", "type": "function", "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'}}]}
    assert assistant_message(parse_tool_calls("done")) == {"role": "assistant", "content": "done"}
