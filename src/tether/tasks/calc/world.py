"""The multiplication world of the tool-use demo: ``what is A times B ?`` with A two-digit.

Prompts are ``what is A times B ?`` with ``A`` in ``10..99`` and ``B`` in ``2..9``: 720 facts,
answers up to 891. A product of a two-digit and a one-digit number is one step of long
multiplication with a carry: a 0.5M-parameter model can memorise the facts it saw but is not
expected to compute ones it did not, while copying the two numbers into a ``calculator`` call and
its result into the answer is a skill that carries over to any fact. The evaluation facts are held
out of the SFT and RL data, so only a policy that computes (or calls the tool) answers them.

Every text is whitespace-separated words, as in :mod:`tether.tasks.arith.world`: numbers ``0..999``
are single words, punctuation is a word of its own, and a tool call is its JSON written with a space
between every token::

    <tool_call> { "name" : "calculator" , "arguments" : { "a" : 37 , "b" : 4 } } </tool_call>

which ``json.loads`` reads as it is (whitespace between JSON tokens is allowed), so the word-level
tokenizer's ``decode(encode(text)) == text`` holds for calls too. A demonstration is the user's
question, the assistant's call, the ``tool`` message with the result and the final answer
``A times B is C .``. Two demonstrators write the SFT data, both right
:data:`~tether.tasks.arith.world.DEMO_P_CORRECT` of the time (the arith demonstrator's rate), so the
two SFT sets are equally good and differ only in using the tool:

* :func:`sample_tool_demonstration`: a wrong call has one realistic slip (an argument off by one,
  or the digits of ``A`` transposed), and the answer faithfully copies the wrong result;
* :func:`sample_direct_answer`: the answer without a tool, wrong by a plausible slip (off by 1, 2
  or 10, or a neighbouring fact's product).
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from functools import lru_cache

from tether.tasks.arith.world import CHAT_WORDS, DEMO_P_CORRECT, last_number
from tether.tasks.calc.tools import calculator

A_VALUES: tuple[int, ...] = tuple(range(10, 100))
B_VALUES: tuple[int, ...] = tuple(range(2, 10))
NUMBERS: tuple[int, ...] = tuple(range(0, 1000))  # every product, argument and slip of the world
TOOL_NAME = "calculator"
CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"

#: The OpenAI-format schema of the tool, as the prompt rows carry it under ``tools``.
TOOL_SCHEMA: dict = {
    "type": "function",
    "function": {
        "name": TOOL_NAME,
        "description": "Multiply two integers: returns a times b.",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
            "additionalProperties": False,
        },
    },
}


def make_prompt(a: int, b: int) -> str:
    """The prompt text for the fact ``a times b``."""
    return f"what is {a} times {b} ?"


#: Every prompt of the world (720), in a fixed order.
PROMPTS: tuple[str, ...] = tuple(make_prompt(a, b) for a in A_VALUES for b in B_VALUES)

_PROMPT_RE = re.compile(r"^what is (\d\d) times (\d) \?$")


@lru_cache(maxsize=4096)
def parse_prompt(prompt: str) -> tuple[int, int] | None:
    """``(a, b)`` for a world prompt (whitespace is normalised), else ``None``."""
    m = _PROMPT_RE.match(" ".join(prompt.split()))
    if m is None:
        return None
    a, b = int(m.group(1)), int(m.group(2))
    return (a, b) if a in A_VALUES and b in B_VALUES else None


def correct_answer(prompt: str) -> int:
    """``A * B`` for a world prompt; ``ValueError`` for anything else."""
    fact = parse_prompt(prompt)
    if fact is None:
        raise ValueError(f"not a prompt of the calc world (what is A times B ? with A in 10..99, B in 2..9): "
                         f"{prompt!r}")
    return fact[0] * fact[1]


def call_text(a: int, b: int) -> str:
    """The assistant turn that calls ``calculator(a, b)``: the Hermes block, one word per JSON token."""
    return (f'{CALL_OPEN} {{ "name" : "{TOOL_NAME}" , "arguments" : {{ "a" : {a} , "b" : {b} }} }} '
            f"{CALL_CLOSE}")


def answer_text(a: int, b: int, c: int) -> str:
    """The final answer ``A times B is C .``."""
    return f"{a} times {b} is {c} ."


def strip_calls(text: str) -> str:
    """``text`` without its tool-call blocks (an unclosed one runs to the end): what the user reads."""
    out = re.sub(re.escape(CALL_OPEN) + r".*?" + re.escape(CALL_CLOSE), " ", text, flags=re.S)
    return " ".join(out.split(CALL_OPEN)[0].split())


def _words_of(texts: Sequence[str]) -> set[str]:
    return {w for t in texts for w in t.split()}


def _vocab_words() -> tuple[str, ...]:
    words = _words_of(PROMPTS) | _words_of([call_text(10, 2), answer_text(10, 2, 20)])
    words |= set(CHAT_WORDS) | {"tool"}
    words -= {str(n) for n in NUMBERS}
    return tuple(sorted(words)) + tuple(str(n) for n in NUMBERS)


#: Every word the world can produce (non-number words sorted, then 0..999).
VOCAB_WORDS: tuple[str, ...] = _vocab_words()


# ------------------------------------------------------------------ slips --


def slipped_arguments(rng: random.Random, a: int, b: int) -> tuple[int, int]:
    """A realistic wrong call for ``a times b``: one argument off by one, or the digits of ``a``
    transposed (37 -> 73; not when that is ``a`` itself or has a leading zero). Never the right
    product (swapping ``a`` and ``b`` would be: multiplication commutes, so it is no slip here)."""
    options = [(a - 1, b), (a + 1, b), (a, b - 1), (a, b + 1)]
    transposed = int(str(a)[::-1])
    if a % 10 and transposed != a:
        options.append((transposed, b))
    return rng.choice([o for o in options if o[0] * o[1] != a * b])


def wrong_product(rng: random.Random, a: int, b: int) -> int:
    """A plausible wrong answer to ``a times b`` without a tool: off by 1, 2 or 10, or the product of
    a neighbouring fact (``a`` times ``b`` plus or minus one); within 0..999."""
    c = a * b
    kinds = [[c - 1, c + 1], [c - 2, c + 2], [c - 10, c + 10], [a * (b - 1), a * (b + 1)]]
    kinds = [[x for x in k if x != c and 0 <= x <= NUMBERS[-1]] for k in kinds]
    return rng.choice(rng.choice([k for k in kinds if k]))


# --------------------------------------------------------------- samplers --


def tool_conversation(prompt: str, call_a: int, call_b: int) -> list[dict]:
    """The four messages of a tool demonstration: the question, the call ``calculator(call_a,
    call_b)``, the tool's result and the answer that copies it (wrong when the call was)."""
    a, b = parse_prompt(prompt) or (None, None)
    if a is None:
        raise ValueError(f"not a prompt of the calc world: {prompt!r}")
    result = calculator(call_a, call_b)
    return [{"role": "user", "content": prompt},
            {"role": "assistant", "content": call_text(call_a, call_b)},
            {"role": "tool", "content": str(result)},
            {"role": "assistant", "content": answer_text(a, b, result)}]


def sample_tool_demonstration(rng: random.Random, prompt: str) -> list[dict]:
    """One demonstration with the tool: a right call with probability ``DEMO_P_CORRECT``, else a
    slip (:func:`slipped_arguments`); the answer copies the tool's result."""
    a, b = parse_prompt(prompt) or (None, None)
    if a is None:
        raise ValueError(f"not a prompt of the calc world: {prompt!r}")
    call = (a, b) if rng.random() < DEMO_P_CORRECT else slipped_arguments(rng, a, b)
    return tool_conversation(prompt, *call)


def sample_direct_answer(rng: random.Random, prompt: str) -> str:
    """One answer without the tool: right with probability ``DEMO_P_CORRECT``, else
    :func:`wrong_product`."""
    a, b = parse_prompt(prompt) or (None, None)
    if a is None:
        raise ValueError(f"not a prompt of the calc world: {prompt!r}")
    c = a * b if rng.random() < DEMO_P_CORRECT else wrong_product(rng, a, b)
    return answer_text(a, b, c)


__all__ = ["A_VALUES", "B_VALUES", "CALL_CLOSE", "CALL_OPEN", "NUMBERS", "PROMPTS", "TOOL_NAME", "TOOL_SCHEMA",
           "VOCAB_WORDS", "answer_text", "call_text", "correct_answer", "last_number", "make_prompt",
           "parse_prompt", "sample_direct_answer", "sample_tool_demonstration", "slipped_arguments",
           "strip_calls", "tool_conversation", "wrong_product"]
