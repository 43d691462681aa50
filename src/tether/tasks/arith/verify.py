"""A verifiable reward for the arith task: is the answer right? No reward model, no judge's taste.

``reward.terms: [{name: answer, callable: tether.tasks.arith.verify:answer_reward}]``
(configs/demo/grpo_verifiable.yaml). Unlike the gold judge it scores correctness only: length,
repetition and politeness are left to other terms (or to nothing).
"""

from __future__ import annotations

from tether.common.errors import DataError
from tether.tasks.arith.world import correct_answer, last_number, parse_prompt


def answer_reward(prompts: list[str], responses: list[str]) -> list[float]:
    """1.0 where the last number of the response is the answer to ``what is A op B ?``, else 0.0
    (a wrong number or none). A prompt that is not of the task's form is a :class:`DataError`."""
    scores = []
    for prompt, response in zip(prompts, responses, strict=True):
        if parse_prompt(prompt) is None:
            raise DataError(f"answer_reward scores the arith task's prompts ('what is A op B ?' with single digits "
                            f"A, B and op one of +, -, times); got {prompt!r}.")
        scores.append(float(last_number(response) == correct_answer(prompt)))
    return scores
