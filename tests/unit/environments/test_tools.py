"""Tool schemas (checked, errors naming the row), argument validation, and the bounded runner:
a tool that raises, one that outlives its timeout, an unknown tool, calls side by side."""

from __future__ import annotations

import copy
import json
import time

import pytest

import env_tools
from env_tools import SCHEMAS, TARGETS, schema
from tether.common.errors import ConfigError, DataError
from tether.environments.tool_calls import ToolCall
from tether.environments.tools import ToolRunner, argument_error, check_tools_schema

WHERE = "prompts.jsonl row 7"
PARAMETERS = {name: s["function"]["parameters"] for name, s in SCHEMAS.items()}


@pytest.fixture
def runner():
    with ToolRunner(TARGETS, max_workers=4, timeout_s=0.2) as r:
        yield r
    env_tools.RELEASE.set()  # let a test's hung tool end


def call(name: str, index: int = 0, **arguments) -> ToolCall:
    return ToolCall(index, f"call_{index}", name, arguments)


def test_a_good_schema_list_gives_the_parameters_by_name():
    no_parameters = {"type": "function", "function": {"name": "now"}}
    out = check_tools_schema([SCHEMAS["add"], no_parameters], WHERE)
    assert out == {"add": PARAMETERS["add"], "now": {"type": "object", "properties": {}}}


@pytest.mark.parametrize("tools, key, expected", [
    ({"add": 1}, "tools", "a list of tools"),
    (["add"], "tools[0]", '{"type": "function"'),
    ([{"type": "tool", "function": {"name": "x"}}], "tools[0]", '{"type": "function"'),
    ([{"type": "function", "function": {"name": "two words"}}], "tools[0].function.name", "1 to 64 letters"),
    ([SCHEMAS["add"], SCHEMAS["add"]], "tools[1].function.name", "'add' twice"),
    ([{"type": "function", "function": {"name": "x", "description": 3}}], "tools[0].function.description", "a string"),
    ([{"type": "function", "function": {"name": "x", "parameters": {"type": "array"}}}],
     "tools[0].function.parameters", '"type": "object"'),
    ([{"type": "function", "function": {"name": "x", "parameters": {"type": "object", "required": "a"}}}],
     "tools[0].function.parameters/required", "a valid JSON Schema"),
])
def test_a_malformed_schema_is_a_data_error_naming_the_row_and_the_entry(tools, key, expected):
    with pytest.raises(DataError) as err:
        check_tools_schema(tools, WHERE)
    assert str(err.value).startswith(f"{WHERE}: {key}: expected ") and expected in str(err.value)


def test_argument_validation_names_what_is_wrong():
    assert argument_error({"a": 1, "b": 2.5}, PARAMETERS["add"]) is None
    assert "'b' is a required property" in argument_error({"a": 1}, PARAMETERS["add"])
    assert argument_error({"a": "1", "b": 2}, PARAMETERS["add"]).startswith("a: '1' is not of type 'number'")


def test_a_good_call_answers_with_its_result_as_json(runner):
    messages, counters = runner.run([call("add", a=1, b=2), call("echo", 1, text="hi")], PARAMETERS)
    assert messages == [{"role": "tool", "tool_call_id": "call_0", "content": "3", "name": "add"},
                        {"role": "tool", "tool_call_id": "call_1", "content": "hi", "name": "echo"}]
    assert counters == {"tool_calls": 2}


def test_a_tool_that_raises_is_an_error_message(runner):
    (message,), counters = runner.run([call("boom", reason="disk")], PARAMETERS)
    assert message["content"] == "error: tool 'boom' raised ValueError: it broke: disk"
    assert counters == {"tool_calls": 1, "tool_errors": 1}


def test_a_result_json_cannot_hold_is_an_error_message(runner):
    (message,), counters = runner.run([call("unencodable")], PARAMETERS)
    assert message["content"].startswith("error: tool 'unencodable' returned what JSON cannot hold")
    assert counters["tool_errors"] == 1


def test_wrong_arguments_never_reach_the_tool(runner):
    (message,), counters = runner.run([call("add", a=1)], PARAMETERS)
    assert message["content"] == "error: tool 'add' got wrong arguments: 'b' is a required property"
    assert counters == {"tool_calls": 1, "bad_arguments": 1}


def test_an_unknown_tool_names_the_offered_ones(runner):
    offered = {"add": PARAMETERS["add"], "echo": PARAMETERS["echo"]}
    messages, counters = runner.run([call("search", q="x"), call("boom", 1)], offered)
    assert messages[0]["content"] == "error: unknown tool 'search' (offered: add, echo)"
    assert messages[1]["content"] == "error: unknown tool 'boom' (offered: add, echo)"  # registered, not offered
    assert counters == {"tool_calls": 2, "unknown_tools": 2}


def test_a_tool_past_its_timeout_is_abandoned_and_counted_hung(runner):
    env_tools.RELEASE.clear()
    start = time.monotonic()
    (message,), counters = runner.run([call("hang")], PARAMETERS)
    assert time.monotonic() - start < 1.0
    assert message["content"] == "error: tool 'hang' did not return within 0.2 s"
    assert counters == {"tool_calls": 1, "tool_timeouts": 1} and runner.hung == 1
    env_tools.RELEASE.set()
    deadline = time.monotonic() + 2.0
    while runner.hung and time.monotonic() < deadline:
        time.sleep(0.01)
    assert runner.hung == 0  # it returned, and gave its worker back


def test_when_every_worker_hangs_a_new_call_times_out_unstarted():
    env_tools.RELEASE.clear()
    with ToolRunner(TARGETS, max_workers=1, timeout_s=0.2) as runner:
        runner.run([call("hang")], PARAMETERS)
        (message,), counters = runner.run([call("add", a=1, b=2)], PARAMETERS)
        assert message["content"] == "error: tool 'add' did not start within 0.2 s: all 1 workers were busy (1 hung)"
        assert counters["tool_timeouts"] == 1
        env_tools.RELEASE.set()


def test_calls_run_side_by_side_within_one_timeout(runner):
    calls = [call("stamp", i, seconds=0.1) for i in range(3)]
    messages, counters = runner.run(calls, PARAMETERS)
    spans = [json.loads(m["content"]) for m in messages]
    assert counters == {"tool_calls": 3}
    assert max(s for s, _ in spans) < min(e for _, e in spans)  # all started before any ended


def test_a_slow_tool_beside_fast_ones_only_fails_itself(runner):
    messages, counters = runner.run([call("sleepy", 0, seconds=0.5), call("add", 1, a=2, b=2)], PARAMETERS)
    assert messages[0]["content"].startswith("error: tool 'sleepy' did not return")
    assert messages[1]["content"] == "4"
    assert counters == {"tool_calls": 2, "tool_timeouts": 1}


def test_the_runner_refuses_bad_settings_and_targets():
    with pytest.raises(ConfigError, match="max_workers"):
        ToolRunner(TARGETS, max_workers=0)
    with pytest.raises(ConfigError, match="timeout_s"):
        ToolRunner(TARGETS, timeout_s=0)
    with pytest.raises(ConfigError, match=r"env_tools:nope.*environment\.tools\.x"):
        ToolRunner({"x": "env_tools:nope"})
    with pytest.raises(ConfigError, match="tool name"):
        ToolRunner({"a b": "env_tools:add"})


def test_the_schema_check_leaves_the_row_as_it_was():
    tools = [copy.deepcopy(SCHEMAS["add"]), schema("x")]
    before = copy.deepcopy(tools)
    check_tools_schema(tools, WHERE)
    assert tools == before
