"""The arithmetic chat world of the embedded demo task.

Prompts are ``what is A op B ?`` with ``A, B`` in ``0..9`` and ``op`` in
``{+, -, times}``: 300 facts.  Every piece of text in this world is a sequence
of whitespace-separated words: numbers (including negatives such as ``-3``) are
single words and punctuation (``.``, ``!``, ``?``, ``,``, ``:``) is a word of
its own, so a word-level tokenizer covers the world exactly (see
:data:`VOCAB_WORDS`).

Responses are assembled from templates::

    [opener]  body  [closer ...]          e.g.  "sure ! 3 + 4 is 7 . hope this helps ."

or are a refusal / non-answer (``sorry , i can not help .``).  Two samplers
exist, both driven by an explicitly passed ``random.Random`` so that every
artefact is a deterministic function of the seed:

* :func:`sample_demonstration` -- the SFT demonstrator: correct 70% of the
  time, wrong answers off by 1, 2, 10 or computed with another operator,
  occasional refusals, modest use of ``!``.
* :func:`sample_weak_response` -- a weaker, more varied sampler used to build
  preference pairs: more wrong answers, more ``!``, more repeats and long
  closers, and sometimes no number at all.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from functools import lru_cache

OPS: tuple[str, ...] = ("+", "-", "times")
DIGITS: tuple[int, ...] = tuple(range(10))
MIN_NUMBER = -9  # 0 - 9
MAX_NUMBER = 81  # 9 times 9
NUMBERS: tuple[int, ...] = tuple(range(MIN_NUMBER, MAX_NUMBER + 1))


def make_prompt(a: int, op: str, b: int) -> str:
    """The prompt text for the fact ``a op b``."""
    return f"what is {a} {op} {b} ?"


#: Every prompt of the world (300), in a fixed order.
PROMPTS: tuple[str, ...] = tuple(make_prompt(a, op, b) for op in OPS for a in DIGITS for b in DIGITS)

_PROMPT_RE = re.compile(r"^what is (\d) (\+|-|times) (\d) \?$")
_NUMBER_RE = re.compile(r"^-?\d+$")


@lru_cache(maxsize=4096)
def parse_prompt(prompt: str) -> tuple[int, str, int] | None:
    """``(a, op, b)`` for a world prompt (whitespace is normalised), else ``None``."""
    m = _PROMPT_RE.match(" ".join(prompt.split()))
    if m is None:
        return None
    return int(m.group(1)), m.group(2), int(m.group(3))


def apply_op(a: int, op: str, b: int) -> int:
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "times":
        return a * b
    raise ValueError(f"unknown operator {op!r}")


def correct_answer(prompt: str) -> int:
    """The correct answer to a world prompt; ``ValueError`` for anything else."""
    fact = parse_prompt(prompt)
    if fact is None:
        raise ValueError(f"not a prompt of the arith world: {prompt!r}")
    return apply_op(*fact)


def last_number(response: str) -> int | None:
    """The last whole-word integer in ``response`` (``None`` when there is none)."""
    for word in reversed(response.split()):
        if _NUMBER_RE.match(word):
            return int(word)
    return None


# ---------------------------------------------------------------- templates --

#: Openers the gold judge counts as polite (first word(s) of the response).
POLITE_OPENERS: tuple[str, ...] = ("sure", "ok", "great question")

DEMO_OPENERS: tuple[str, ...] = ("sure .", "sure !", "ok .", "ok !", "great question .", "great question !")
WEAK_OPENERS: tuple[str, ...] = DEMO_OPENERS + ("sure ! sure !", "great question ! !", "hmm .", "well ,")

#: Body templates; ``{end}`` is the final punctuation (``.`` or ``!``).
BODIES: tuple[str, ...] = ("the answer is {c} {end}", "{a} {op} {b} is {c} {end}", "{c} {end}")

REPEAT = "<repeat>"  # closer placeholder: a verbatim repeat of the body
DEMO_CLOSERS: tuple[str, ...] = ("hope this helps .", "anything else ?", REPEAT)
WEAK_CLOSERS: tuple[str, ...] = (
    "hope this helps .",
    "hope this helps !",
    "anything else ?",
    "anything else !",
    "that is easy !",
    "! !",
    REPEAT,
)

REFUSAL = "sorry , i can not help ."
NON_ANSWERS: tuple[str, ...] = (REFUSAL, "let me think .", "i do not know .", "i do not know !", "hmm , let me think !")

CHAT_WORDS: tuple[str, ...] = ("user", "assistant", "system", ":")


def _words_of(texts: Sequence[str]) -> set[str]:
    out: set[str] = set()
    for t in texts:
        out.update(w for w in t.split() if w != REPEAT and "{" not in w)
    return out


def _vocab_words() -> tuple[str, ...]:
    words = _words_of(PROMPTS) | _words_of(WEAK_OPENERS) | _words_of(BODIES) | _words_of(WEAK_CLOSERS)
    words |= _words_of(NON_ANSWERS) | set(CHAT_WORDS) | set(OPS) | {".", "!", "?", ","}
    words -= {str(n) for n in NUMBERS}
    return tuple(sorted(words)) + tuple(str(n) for n in NUMBERS)


#: Every word the world can produce (non-number words sorted, then -9..81).
VOCAB_WORDS: tuple[str, ...] = _vocab_words()


def render_response(
    prompt: str,
    answer: int | None,
    *,
    opener: str | None = None,
    body: int = 0,
    end: str = ".",
    closers: Sequence[str] = (),
) -> str:
    """Assemble a response from template parts.

    ``answer=None`` gives a refusal (:data:`REFUSAL`) in place of the body;
    ``body`` indexes :data:`BODIES`; ``closers`` are appended in order, with
    :data:`REPEAT` standing for a verbatim repeat of the body.
    """
    fact = parse_prompt(prompt)
    if fact is None:
        raise ValueError(f"not a prompt of the arith world: {prompt!r}")
    a, op, b = fact
    if answer is None:
        body_text = REFUSAL
    else:
        body_text = BODIES[body].format(a=a, op=op, b=b, c=answer, end=end)
    parts = [opener] if opener else []
    parts.append(body_text)
    parts.extend(body_text if c == REPEAT else c for c in closers)
    return " ".join(parts)


def wrong_answer(rng: random.Random, prompt: str) -> int:
    """A plausible wrong answer: off by 1, 2 or 10, or the result of another operator.

    Always within the world's number range and different from the correct answer.
    """
    a, op, b = parse_prompt(prompt) or (None, None, None)
    if a is None:
        raise ValueError(f"not a prompt of the arith world: {prompt!r}")
    c = apply_op(a, op, b)
    kinds = [
        [c - 1, c + 1],
        [c - 2, c + 2],
        [c - 10, c + 10],
        [apply_op(a, o, b) for o in OPS if o != op],
    ]
    kinds = [[x for x in k if x != c and MIN_NUMBER <= x <= MAX_NUMBER] for k in kinds]
    kinds = [k for k in kinds if k]
    return rng.choice(rng.choice(kinds))


# ----------------------------------------------------------------- samplers --

DEMO_P_CORRECT = 0.70
DEMO_P_REFUSE = 0.04


def sample_demonstration(rng: random.Random, prompt: str) -> str:
    """One response of the SFT demonstrator (correct with probability 0.70)."""
    u = rng.random()
    if u < DEMO_P_CORRECT:
        answer: int | None = correct_answer(prompt)
    elif u < 1.0 - DEMO_P_REFUSE:
        answer = wrong_answer(rng, prompt)
    else:
        answer = None
    opener = rng.choice(DEMO_OPENERS) if rng.random() < 0.5 else None
    body = rng.randrange(len(BODIES))
    closers = [rng.choice(DEMO_CLOSERS)] if rng.random() < 0.4 else []
    if answer is None:
        closers = [c for c in closers if c != REPEAT]
    return render_response(prompt, answer, opener=opener, body=body, end=".", closers=closers)


WEAK_P_CORRECT = 0.45
WEAK_P_NO_NUMBER = 0.12


def _weak_style(rng: random.Random) -> dict:
    opener = rng.choice(WEAK_OPENERS) if rng.random() < 0.6 else None
    n_closers = rng.choices((0, 1, 2, 3), weights=(4, 3, 2, 1))[0]
    closers = [rng.choice(WEAK_CLOSERS) for _ in range(n_closers)]
    return {"opener": opener, "closers": closers, "body": rng.randrange(len(BODIES)),
            "end": "!" if rng.random() < 0.35 else "."}


def _weak_answer(rng: random.Random, prompt: str, u: float) -> int:
    return correct_answer(prompt) if u < WEAK_P_NO_NUMBER + WEAK_P_CORRECT else wrong_answer(rng, prompt)


WEAK_P_SAME_STYLE = 0.5


def sample_weak_pair(rng: random.Random, prompt: str) -> tuple[str, str]:
    """Two different responses of the weak sampler to one prompt.

    Half of the pairs share their style (opener, body, end, closers) and differ only in the
    number, like two samples of a policy that has settled on a style: these are what teach a
    small reward model arithmetic. The other half are independent draws.
    """
    if rng.random() >= WEAK_P_SAME_STYLE:
        a = sample_weak_response(rng, prompt)
        b = sample_weak_response(rng, prompt)
        while b == a:
            b = sample_weak_response(rng, prompt)
        return a, b
    style = _weak_style(rng)
    answers = [_weak_answer(rng, prompt, rng.uniform(WEAK_P_NO_NUMBER, 1.0)) for _ in range(2)]
    while answers[1] == answers[0]:
        answers[1] = _weak_answer(rng, prompt, rng.uniform(WEAK_P_NO_NUMBER, 1.0))
    return tuple(render_response(prompt, ans, **style) for ans in answers)  # type: ignore[return-value]


def sample_weak_response(rng: random.Random, prompt: str) -> str:
    """One response of the weaker, more varied sampler used for preference pairs.

    Compared with the demonstrator it answers correctly less often (45%), has
    no number at all 12% of the time, uses ``!`` much more, and appends more
    (and longer) closers, including verbatim repeats of the body.
    """
    u = rng.random()
    style = _weak_style(rng)
    if u < WEAK_P_NO_NUMBER:
        parts = [style["opener"]] if style["opener"] else []
        parts.append(rng.choice(NON_ANSWERS))
        parts.extend(c for c in style["closers"] if c != REPEAT)
        return " ".join(parts)
    return render_response(prompt, _weak_answer(rng, prompt, u), **style)
