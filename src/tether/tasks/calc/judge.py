"""The gold judge of the calc task: arith's rules (:func:`tether.tasks.arith.judge.score_answer`)
on the final answer.

For ``what is A times B ?`` the response is what the user reads, the text outside any tool-call
block (in an episode a reward function and ``eval.judge`` get the final assistant turn):

* ``+1`` if its last number is ``A * B``, ``-1`` if it is another number, ``-1.5`` if there is
  none (a final turn that is still a tool call answers nothing);
* ``-0.06`` per word beyond 6 (``37 times 4 is 148 .`` is 6), ``-0.35`` per duplicated bigram;
* ``-1`` if generation did not end (``ended=False``).

The best score is 1.0 (the world has no polite openers).
"""

from __future__ import annotations

from tether.tasks.arith.judge import score_answer
from tether.tasks.arith.world import last_number
from tether.tasks.calc.world import correct_answer, strip_calls

BEST_SCORE = 1.0


def is_correct(prompt: str, response: str) -> bool:
    """Whether the last number of the answer (``response`` outside its tool calls) is ``A * B``."""
    n = last_number(strip_calls(response))
    return n is not None and n == correct_answer(prompt)


def gold_score(prompt: str, response: str, ended: bool = True) -> float:
    """The gold score of the final answer ``response`` to ``prompt`` (the module docstring);
    ``ValueError`` for a prompt that is not of the world. ``eval.judge``'s signature."""
    return score_answer(correct_answer(prompt), strip_calls(response), ended)


def gold_reward(prompts: list[str], responses: list[str]) -> list[float]:
    """The gold judge as a reward callable (``reward.callable=tether.tasks.calc.judge:gold_reward``):
    one score per (prompt, final answer). It sees text only; ``reward.eos_penalty`` scores an episode
    that did not end."""
    return [gold_score(p, r) for p, r in zip(prompts, responses, strict=True)]
