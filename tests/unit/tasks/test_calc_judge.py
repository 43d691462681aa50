"""The calc task's tool and gold judge: the calculator through the tools environment, and the judge
on final answers (arith's rules), calls included."""

from __future__ import annotations

import pytest

from tether.environments.tool_env import ToolEnvironment
from tether.environments.tools import ToolRunner
from tether.tasks import get_task, load_judge
from tether.tasks.calc import JUDGE, REWARD, TOOL, world
from tether.tasks.calc.judge import gold_reward, gold_score, is_correct
from tether.tasks.calc.tools import calculator

P = "what is 37 times 4 ?"  # 148
ROW = {"prompt": P, "tools": [world.TOOL_SCHEMA]}


def test_the_calculator_multiplies():
    assert calculator(37, 4) == 148 and calculator(a=99, b=9) == 891


@pytest.fixture(scope="module")
def runner():
    with ToolRunner({"calculator": TOOL}, max_workers=1, timeout_s=5.0) as r:
        yield r


def test_an_episode_calls_the_calculator_then_answers(runner):
    env = ToolEnvironment(runner, max_turns=3)
    assert env.reset(ROW) == [{"role": "user", "content": P}]
    assert [t["function"]["name"] for t in env.tools] == ["calculator"]
    step = env.step(world.call_text(37, 4))
    assert [m["content"] for m in step.observation] == ["148"] and step.counters == {"tool_calls": 1}
    assert env.step("37 times 4 is 148 .").done


def test_arguments_outside_the_schema_are_an_error_the_model_reads(runner):
    env = ToolEnvironment(runner, max_turns=3)
    env.reset(ROW)
    step = env.step('<tool_call> { "name" : "calculator" , "arguments" : { "a" : 37 } } </tool_call>')
    assert step.observation[0]["content"].startswith("error:") and step.counters["bad_arguments"] == 1


@pytest.mark.parametrize(("response", "expected"), [
    ("37 times 4 is 148 .", 1.0),                   # the demonstrations' answer: 6 words, free
    ("148 .", 1.0),
    ("37 times 4 is 149 .", -1.0),                  # the last number counts
    ("148 . 37 times 4 is 149 .", -1.0 - 2 * 0.06),
    ("is .", -1.5),                                 # no number
    (world.call_text(37, 4), -1.5),                 # a last turn still calling answers nothing
    (world.call_text(37, 4) + " 148 .", 1.0),       # the text outside the call is the answer
    ("37 times 4 is 148 . 148 .", 1.0 - 2 * 0.06 - 0.35),  # 8 words, (148 .) twice
])
def test_gold_score_hand_worked(response, expected):
    assert gold_score(P, response) == pytest.approx(expected)
    assert is_correct(P, response) == (expected > 0)


def test_not_ended_costs_one_and_the_reward_is_the_judge():
    assert gold_score(P, "148 .", ended=False) == pytest.approx(0.0)
    assert gold_reward([P, P], ["148 .", "149 ."]) == [1.0, -1.0]
    with pytest.raises(ValueError, match="calc world"):
        gold_score("what is 3 + 4 ?", "7 .")


def test_the_specs_load():
    assert load_judge(JUDGE) is gold_score and load_judge(REWARD) is gold_reward
    assert get_task("calc").build_task.__module__ == "tether.tasks.calc.build"
