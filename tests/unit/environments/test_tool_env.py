"""The ``tools`` environment: an episode of two calls then a final answer, truncation at
max_turns, malformed blocks answered in order, and rows checked (naming the row)."""

from __future__ import annotations

import json

import pytest

from env_tools import SCHEMAS, TARGETS
from tether.common.errors import ConfigError, DataError
from tether.environments.base import Environment, EpisodeStats, Step
from tether.environments.tool_env import ToolEnvironment
from tether.environments.tools import ToolRunner

WHERE = "prompts.jsonl row 3"
ROW = {"messages": [{"role": "user", "content": "What is (1+2) and (3+4)?"}],
       "tools": [SCHEMAS["add"], SCHEMAS["echo"], {"type": "function", "function": {"name": "web_search"}}]}


def calls(*pairs) -> str:
    return "".join(f"<tool_call>{json.dumps({'name': n, 'arguments': a})}</tool_call>" for n, a in pairs)


@pytest.fixture(scope="module")
def runner():
    with ToolRunner(TARGETS, max_workers=4, timeout_s=0.5) as r:
        yield r


def test_it_answers_the_protocol(runner):
    assert isinstance(ToolEnvironment(runner), Environment)


def test_reset_offers_the_row_tools_that_are_registered(runner):
    env = ToolEnvironment(runner)
    assert env.reset(ROW, WHERE) == ROW["messages"]
    assert [t["function"]["name"] for t in env.tools] == ["add", "echo"]
    assert env.dropped_tools == ("web_search",)


def test_a_prompt_string_is_one_user_message(runner):
    env = ToolEnvironment(runner)
    opening = env.reset({"prompt": "Add 1 and 2.", "tools": [SCHEMAS["add"]]})
    assert opening == [{"role": "user", "content": "Add 1 and 2."}]


def test_two_calls_then_a_final_answer(runner):
    env, stats = ToolEnvironment(runner, max_turns=4), EpisodeStats()
    env.reset(ROW, WHERE)
    first = env.step("Adding both. " + calls(("add", {"a": 1, "b": 2}), ("add", {"a": 3, "b": 4})))
    assert first == Step([{"role": "tool", "tool_call_id": "call_1_0", "content": "3", "name": "add"},
                          {"role": "tool", "tool_call_id": "call_1_1", "content": "7", "name": "add"}],
                         None, done=False, counters={"tool_calls": 2})
    final = env.step("They are 3 and 7.")
    assert final == Step([], None, done=True)
    for step in (first, final):
        stats = stats.plus(step)
    assert (stats.turns, stats.truncated, stats.counters) == (2, False, {"tool_calls": 2})
    with pytest.raises(RuntimeError, match="reset"):
        env.step("more?")


def test_max_turns_truncates_without_running_the_last_calls(runner):
    env = ToolEnvironment(runner, max_turns=2)
    env.reset(ROW, WHERE)
    assert not env.step(calls(("echo", {"text": "a"}))).done
    last = env.step(calls(("echo", {"text": "b"}), ("add", {"a": 1, "b": 1})))
    assert last == Step([], None, done=True, truncated=True, counters={"tool_calls": 2})


def test_malformed_blocks_and_failures_are_answered_in_order(runner):
    env = ToolEnvironment(runner)
    env.reset(ROW, WHERE)
    step = env.step("<tool_call>{not json}</tool_call>" + calls(("web_search", {"q": "x"}), ("add", {"a": 1})))
    contents = [m["content"] for m in step.observation]
    assert contents[0].startswith("error: malformed tool call 1: invalid JSON")
    assert contents[1] == "error: unknown tool 'web_search' (offered: add, echo)"
    assert contents[2] == "error: tool 'add' got wrong arguments: 'b' is a required property"
    assert [m["tool_call_id"] for m in step.observation] == ["call_1_0", "call_1_1", "call_1_2"]
    assert not step.done
    assert step.counters == {"tool_calls": 2, "malformed_calls": 1, "unknown_tools": 1, "bad_arguments": 1}


@pytest.mark.parametrize("row, expected", [
    ({"messages": [], "tools": []}, "field 'messages': expected a non-empty list"),
    ({"messages": [{"role": "user"}], "tools": []}, "field 'messages[0].content': expected a string, got null"),
    ({"text": "hi", "tools": []}, "no field 'messages' or 'prompt'"),
    ({"prompt": "hi"}, "tools: expected a list of tools"),
    ({"prompt": "hi", "tools": [{"type": "function", "function": {}}]}, "tools[0].function.name"),
])
def test_a_bad_row_is_a_data_error_naming_it(runner, row, expected):
    with pytest.raises(DataError) as err:
        ToolEnvironment.check_row(row, WHERE)
    assert str(err.value).startswith(WHERE) and expected in str(err.value)
    with pytest.raises(DataError):
        ToolEnvironment(runner).reset(row, WHERE)


def test_max_turns_must_be_positive(runner):
    with pytest.raises(ConfigError, match="max_turns"):
        ToolEnvironment(runner, max_turns=0)
