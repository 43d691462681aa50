"""The multi-step arithmetic world: two operations, answered in two steps.

A problem is ``what is ( a OP b ) OP c ?`` with a, b, c in 1..9 and OP one of plus, minus, times.
A solution writes one step per operation, the steps separated by the word ``;`` (the step
separator a process reward model reads)::

    3 plus 4 is 7 ; 7 times 5 is 35

Every word is a token of the world's word-level tokenizer (:data:`VOCAB_WORDS`: the numbers
-100..800, which hold every value a problem or a slip can produce, the operations, the chat words).

**Gold.** A step is *correct* when the number it states is the true value of its sub-expression
(the first step: a OP b; the second: (a OP b) OP c). A step that computes right from a wrong first
result is not correct: the label says whether the solution is still on the way to the right answer,
as Math-Shepherd's labels do. The final answer is the solution's last number.

**Demonstrators.** A solver gets each step right with probability ``p_step``; a wrong step states a
near miss (±1..3), and a second step then computes from what the first stated, right or wrong,
with its own chance of a slip. The SFT demonstrator is right per step with ``DEMO_P_STEP``; the
sampler of the PRM's and the outcome reward model's data with ``NOISY_P_STEP``, so both kinds of
label occur.
"""

from __future__ import annotations

import random
from itertools import product

OPS = ("plus", "minus", "times")
DIGITS = tuple(range(1, 10))
SEPARATOR = ";"
DEMO_P_STEP = 0.85
NOISY_P_STEP = 0.6
NUMBER_RANGE = (-100, 800)  # the problems give -72..729, a slip 3 more either way


def apply_op(a: int, op: str, b: int) -> int:
    if op == "plus":
        return a + b
    if op == "minus":
        return a - b
    if op == "times":
        return a * b
    raise ValueError(f"unknown op {op!r}")


def make_prompt(a: int, op1: str, b: int, op2: str, c: int) -> str:
    return f"what is ( {a} {op1} {b} ) {op2} {c} ?"


#: Every problem of the world, in a fixed order.
PROBLEMS: tuple[tuple[int, str, int, str, int], ...] = tuple(
    (a, op1, b, op2, c) for op1, op2 in product(OPS, OPS) for a in DIGITS for b in DIGITS for c in DIGITS)
PROMPTS: tuple[str, ...] = tuple(make_prompt(*p) for p in PROBLEMS)
_BY_PROMPT = dict(zip(PROMPTS, PROBLEMS))


def parse_prompt(prompt: str) -> tuple[int, str, int, str, int] | None:
    """The problem of a prompt of the world (a chat prompt's last user message), None otherwise."""
    return _BY_PROMPT.get(" ".join(prompt.split()))


def step_values(prompt: str) -> tuple[int, int]:
    """The true values of the two steps: a OP b, then (a OP b) OP c."""
    a, op1, b, op2, c = _BY_PROMPT[" ".join(prompt.split())]
    first = apply_op(a, op1, b)
    return first, apply_op(first, op2, c)


def correct_answer(prompt: str) -> int:
    return step_values(prompt)[1]


def _number(word: str) -> int | None:
    try:
        return int(word)
    except ValueError:
        return None


def split_steps(response: str) -> list[str]:
    """A response's steps: its text split at the separator word, empty pieces left out."""
    steps, current = [], []
    for word in response.split():
        if word == SEPARATOR:
            if current:
                steps.append(" ".join(current))
            current = []
        else:
            current.append(word)
    if current:
        steps.append(" ".join(current))
    return steps


def stated(step: str) -> int | None:
    """The number a step states: its last word, when it is a number."""
    words = step.split()
    return _number(words[-1]) if words else None


def last_number(response: str) -> int | None:
    for word in reversed(response.split()):
        if (n := _number(word)) is not None:
            return n
    return None


def step_labels(prompt: str, response: str) -> list[bool]:
    """Gold label of each of the response's steps (see the module docstring); a step beyond the
    second is never correct (there are two operations)."""
    truth = step_values(prompt)
    return [i < len(truth) and stated(step) == truth[i] for i, step in enumerate(split_steps(response))]


def _slip(rng: random.Random, value: int) -> int:
    wrong = value + rng.choice((-3, -2, -1, 1, 2, 3))
    return min(max(wrong, NUMBER_RANGE[0]), NUMBER_RANGE[1])


def sample_steps(rng: random.Random, prompt: str, p_step: float) -> list[str]:
    """A solution's two steps by a solver right per step with probability ``p_step``."""
    a, op1, b, op2, c = _BY_PROMPT[" ".join(prompt.split())]
    first = apply_op(a, op1, b)
    first = first if rng.random() < p_step else _slip(rng, first)
    second = apply_op(first, op2, c)
    second = second if rng.random() < p_step else _slip(rng, second)
    return [f"{a} {op1} {b} is {first}", f"{first} {op2} {c} is {second}"]


def join_steps(steps: list[str]) -> str:
    return f" {SEPARATOR} ".join(steps)


CHAT_WORDS = ("user", "assistant", ":", "what", "is", "(", ")", "?", SEPARATOR)
VOCAB_WORDS: tuple[str, ...] = (*CHAT_WORDS, *OPS, *(str(n) for n in range(NUMBER_RANGE[0], NUMBER_RANGE[1] + 1)))
