"""The arith task's verifiable reward (tasks/arith/verify.py): the last number against the answer."""

from __future__ import annotations

import pytest

from tether.common.errors import DataError
from tether.tasks.arith.verify import answer_reward


def test_the_last_number_is_checked_against_the_answer():
    prompts = ["what is 3 + 4 ?", "what is 3 + 4 ?", "what is 2 - 9 ?", "what is 6 times 7 ?", "what is 0 + 0 ?",
               "what is 5 times 5 ?"]
    responses = ["sure . 3 + 4 is 7 .", "7 ! no , 8 .", "the answer is -7 .", "42", "sorry , i can not help .",
                 "25 ! 25 ! 25 ! hope this helps"]
    # right; last number 8 is wrong; negative answer right; bare number right; no number; repeats still right
    assert answer_reward(prompts, responses) == [1.0, 0.0, 1.0, 1.0, 0.0, 1.0]


def test_a_number_glued_to_a_word_is_not_an_answer():
    assert answer_reward(["what is 1 + 1 ?"], ["it is 2."]) == [0.0]  # the task's words are space-separated


def test_a_prompt_outside_the_task_is_a_data_error():
    with pytest.raises(DataError, match="what is A op B"):
        answer_reward(["how are you ?"], ["fine"])
