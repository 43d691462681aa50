"""The calc world: prompts and parsing, calls and answers as words, the slips and the demonstrators."""

from __future__ import annotations

import json
import random

import pytest

from tether.tasks.arith.world import DEMO_P_CORRECT
from tether.tasks.calc import world


def test_the_world_is_720_facts_of_two_digits_times_one():
    assert len(world.PROMPTS) == len(set(world.PROMPTS)) == 90 * 8
    for prompt in world.PROMPTS:
        a, b = world.parse_prompt(prompt)
        assert 10 <= a <= 99 and 2 <= b <= 9
        assert world.correct_answer(prompt) == a * b <= 891
    assert world.parse_prompt("  what is 37  times 4 ?") == (37, 4)


@pytest.mark.parametrize("prompt", ["what is 7 times 4 ?", "what is 37 times 1 ?", "what is 37 times 10 ?",
                                    "what is 37 + 4 ?", "what is 137 times 4 ?", "37 times 4"])
def test_other_text_is_no_prompt_of_the_world(prompt):
    assert world.parse_prompt(prompt) is None
    with pytest.raises(ValueError, match="calc world"):
        world.correct_answer(prompt)


def test_a_call_is_json_written_one_token_per_word():
    text = world.call_text(37, 4)
    assert text == ('<tool_call> { "name" : "calculator" , "arguments" : { "a" : 37 , "b" : 4 } } '
                    "</tool_call>")
    body = text.removeprefix(world.CALL_OPEN).removesuffix(world.CALL_CLOSE)
    assert json.loads(body) == {"name": "calculator", "arguments": {"a": 37, "b": 4}}
    assert world.answer_text(37, 4, 148) == "37 times 4 is 148 ."


def test_strip_calls_keeps_what_the_user_reads():
    call = world.call_text(37, 4)
    assert world.strip_calls(call) == ""
    assert world.strip_calls(f"so {call} 148 .") == "so 148 ."
    assert world.strip_calls("148 . <tool_call> { 3") == "148 ."  # an unclosed call runs to the end
    assert world.strip_calls("37 times 4 is 148 .") == "37 times 4 is 148 ."


def test_slips_are_realistic_and_always_wrong():
    rng = random.Random(0)
    kinds = set()
    for prompt in world.PROMPTS:
        a, b = world.parse_prompt(prompt)
        for _ in range(3):
            x, y = world.slipped_arguments(rng, a, b)
            assert x * y != a * b and 0 <= x * y <= 999
            kinds.add("transposed" if (x, y) == (int(str(a)[::-1]), b) else "a" if y == b else "b")
            assert abs(x - a) == 1 or abs(y - b) == 1 or x == int(str(a)[::-1])
            c = world.wrong_product(rng, a, b)
            assert c != a * b and 0 <= c <= 999
    assert kinds == {"a", "b", "transposed"}


def test_the_demonstrators_are_right_at_the_arith_rate():
    rng, n = random.Random(1), 3000
    tool_right = direct_right = 0
    for _ in range(n):
        prompt = rng.choice(world.PROMPTS)
        a, b = world.parse_prompt(prompt)
        user, call, result, answer = world.sample_tool_demonstration(rng, prompt)
        assert (user["role"], call["role"], result["role"], answer["role"]) == ("user", "assistant", "tool", "assistant")
        arguments = json.loads(call["content"][len(world.CALL_OPEN):-len(world.CALL_CLOSE)])["arguments"]
        assert result["content"] == str(arguments["a"] * arguments["b"])
        assert answer["content"] == world.answer_text(a, b, int(result["content"]))  # copies the result
        tool_right += int(result["content"]) == a * b
        direct_right += world.last_number(world.sample_direct_answer(rng, prompt)) == a * b
    assert abs(tool_right / n - DEMO_P_CORRECT) < 0.03 and abs(direct_right / n - DEMO_P_CORRECT) < 0.03


def test_the_vocabulary_covers_every_text_of_the_world():
    words = set(world.VOCAB_WORDS)
    assert len(words) == len(world.VOCAB_WORDS)
    assert {str(n) for n in range(1000)} <= words and {"tool", "user", "assistant", ":"} <= words
    rng = random.Random(2)
    for prompt in world.PROMPTS:
        texts = [m["content"] for m in world.sample_tool_demonstration(rng, prompt)]
        texts.append(world.sample_direct_answer(rng, prompt))
        assert all(set(t.split()) <= words for t in texts)
