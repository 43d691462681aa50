"""The ``scripted`` environment: the row's follow-ups, one per assistant turn, then the end."""

from __future__ import annotations

import pytest

from tether.common.errors import DataError
from tether.environments.base import Environment, Step
from tether.environments.scripted import ScriptedEnvironment

WHERE = "chats.jsonl row 2"
OPENING = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a prime."}]


def test_follow_ups_come_one_per_turn_then_the_episode_ends():
    env = ScriptedEnvironment()
    assert isinstance(env, Environment) and env.tools == []
    row = {"messages": OPENING, "follow_ups": ["Another?", {"role": "user", "content": "Their sum?"}]}
    assert env.reset(row, WHERE) == OPENING
    assert env.step("2") == Step([{"role": "user", "content": "Another?"}], None, done=False)
    assert env.step("3") == Step([{"role": "user", "content": "Their sum?"}], None, done=False)
    assert env.step("5") == Step([], None, done=True)
    with pytest.raises(RuntimeError, match="reset"):
        env.step("7")


def test_no_follow_ups_is_one_turn():
    env = ScriptedEnvironment()
    env.reset({"prompt": "Hi", "follow_ups": []})
    assert env.step("Hello").done


def test_reset_starts_over():
    env = ScriptedEnvironment()
    row = {"messages": OPENING, "follow_ups": ["Again?"]}
    env.reset(row)
    env.step("2")
    env.reset(row)
    assert env.step("2").observation == [{"role": "user", "content": "Again?"}]


@pytest.mark.parametrize("row, expected", [
    ({"messages": OPENING}, "field 'follow_ups': expected a list of user messages"),
    ({"messages": OPENING, "follow_ups": "Another?"}, "field 'follow_ups': expected a list"),
    ({"messages": OPENING, "follow_ups": ["ok", ""]}, "field 'follow_ups[1]': expected a non-empty string"),
    ({"messages": OPENING, "follow_ups": [{"role": "assistant", "content": "x"}]}, "field 'follow_ups[0]'"),
    ({"messages": "hi", "follow_ups": []}, "field 'messages': expected a non-empty list"),
    ([1, 2], "expected a JSON object per row"),
])
def test_a_bad_row_is_a_data_error_naming_it(row, expected):
    with pytest.raises(DataError) as err:
        ScriptedEnvironment.check_row(row, WHERE)
    assert str(err.value).startswith(WHERE) and expected in str(err.value)
    with pytest.raises(DataError):
        ScriptedEnvironment().reset(row, WHERE)
