"""Step-labelled solutions for a process reward model: validated rows and their tokens.

A row is a prompt and a solution split into steps, one label per step (correct or not), the
shape of PRM800K and Math-Shepherd as the hub carries them (TRL's "stepwise supervision"):
``{"prompt", "completions": [step, ...], "labels": [bool, ...]}``; ``steps`` is read as
``completions``. Labels are booleans or 0/1. A step may not contain the step separator.

Tokenized, a solution is its steps joined by the separator token, then EOS: the same tokens a
policy writes when it separates steps with that token. A step *ends* at its separator, the last
step at EOS; the PRM is trained and read at those positions (:func:`tether.algos.process.step_ends`
finds them in sampled responses).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from tether.common.errors import ConfigError, DataError, TetherError
from tether.data.records import Record
from tether.data.schemas import Prompt, _data, _err, _prompt, _require, _unknown_schema
from tether.data.templates import encode_prompt

_SCHEMA = "{prompt, completions, labels} (a solution's steps and one label per step; 'steps' for 'completions')"


@dataclass(frozen=True)
class StepExample:
    prompt: Prompt
    steps: list[str]
    labels: list[bool]
    source: str
    row: int


@dataclass
class TokenizedSteps:
    """``response_ids``: the steps joined by the separator token, then EOS; ``ends``: each kept
    step's last position in ``response_ids`` (its separator, the last step's EOS); ``labels``: theirs."""

    prompt_ids: list[int]
    response_ids: list[int]
    ends: list[int]
    labels: list[bool]
    truncated: bool = False  # steps past max_length were left out (on_long='truncate')


def step_examples(records: Iterable[Record], separator: str) -> list[StepExample]:
    """Validate rows into :class:`StepExample`; every error names the file, the row and the field."""
    out = []
    for rec in records:
        data = _data(rec)
        if "completions" not in data and "steps" not in data:
            raise _unknown_schema(rec, data, _SCHEMA, ("prompt", "completions", "steps", "labels"))
        field = "completions" if "completions" in data else "steps"
        _require(rec, data, ("prompt", field, "labels"))
        prompt = _prompt(rec, "prompt", data["prompt"])
        steps, labels = data[field], data["labels"]
        if not isinstance(steps, list) or not steps or not all(isinstance(s, str) and s.strip() for s in steps):
            raise _err(rec, field, "a non-empty list of non-empty strings (the solution's steps)", steps)
        if not isinstance(labels, list) or len(labels) != len(steps) or not all(
                isinstance(v, bool) or v in (0, 1) for v in labels):
            raise _err(rec, "labels", f"a list of {len(steps)} booleans (or 0/1), one per step", labels)
        bad = next((i for i, s in enumerate(steps) if separator in s), None)
        if bad is not None:
            raise DataError(f"{rec.source}, row {rec.row}: field '{field}': step {bad + 1} contains the step "
                            f"separator {separator!r} (step_separator); a step must not, since the separator "
                            "marks where each step ends.")
        out.append(StepExample(prompt, list(steps), [bool(v) for v in labels], rec.source, rec.row))
    return out


def separator_id(tokenizer, separator: str) -> int:
    """The one token ``separator`` encodes to; a ConfigError when it is not exactly one."""
    ids = list(tokenizer(separator, add_special_tokens=False).input_ids)
    if len(ids) != 1:
        raise ConfigError(f"Config key 'step_separator' = {separator!r} encodes to {len(ids)} tokens {ids}; a "
                          "process reward model reads each step's end at one token: choose a separator the "
                          "tokenizer keeps whole (a newline, a punctuation mark, a word of its vocabulary).")
    return ids[0]


def tokenize_steps(ex: StepExample, tokenizer, sep_id: int, max_length: int, mode: str = "auto",
                   on_long: str = "truncate", capped_by: str | None = None) -> TokenizedSteps | None:
    """Prompt ids, the solution's ids and its step ends; None if the row is dropped.

    Too long: ``truncate`` keeps the steps whose end fits (None if not even the first does),
    ``drop`` returns None, ``error`` raises naming the row."""
    try:
        prompt = encode_prompt(ex.prompt, tokenizer, mode)
    except TetherError as e:
        raise type(e)(f"{ex.source}, row {ex.row}: {e}") from None
    eos = tokenizer.eos_token_id
    response, ends = [], []
    for i, step in enumerate(ex.steps):
        response += list(tokenizer(step, add_special_tokens=False).input_ids)
        response.append(sep_id if i < len(ex.steps) - 1 else int(eos))
        ends.append(len(response) - 1)
    if len(prompt) + len(response) <= max_length:
        return TokenizedSteps(prompt, response, ends, list(ex.labels))
    if on_long == "error":
        raise DataError(f"{ex.source}, row {ex.row}: prompt + solution is {len(prompt) + len(response)} tokens "
                        f"({len(prompt)} + {len(response)}), longer than max_length {max_length}"
                        + (f" ({capped_by})" if capped_by else "") + "; expected it to fit (shorten the row, or "
                        "set data.on_long to 'truncate' or 'drop')")
    room = max_length - len(prompt)
    kept = [i for i, end in enumerate(ends) if end < room]
    if on_long == "drop" or not kept:
        return None
    last = ends[kept[-1]]
    return TokenizedSteps(prompt, response[:last + 1], ends[:len(kept)], list(ex.labels[:len(kept)]), truncated=True)
