"""Validate raw records into typed examples for SFT, reward modelling and PPO.

A *prompt* is either a plain string or a list of chat messages
``[{"role": str, "content": str}, ...]``. Every error is one paragraph naming the source,
the row, the field and what was expected. Extra columns are ignored.
"""

from __future__ import annotations

import difflib
import reprlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from tether.data.records import Record
from tether.common.errors import DataError

__all__ = [
    "Prompt",
    "SFTExample",
    "PreferenceExample",
    "PromptExample",
    "UnpairedExample",
    "sft_examples",
    "preference_examples",
    "prompt_examples",
    "unpaired_examples",
]

Prompt = str | list[dict]

HH_HUMAN = "\n\nHuman:"
HH_ASSISTANT = "\n\nAssistant:"

_SFT_SCHEMAS = "{messages} (chat ending in an assistant message) or {prompt, completion}"
_PREF_SCHEMAS = (
    "{prompt, chosen, rejected} or {chosen, rejected} (HH-RLHF style: whole conversations sharing a prefix)"
)
_PROMPT_SCHEMAS = "{prompt} or {messages}"
_UNPAIRED_SCHEMAS = (
    "{prompt, completion, label} (label true: a desirable response, false: an undesirable one), or preference "
    f"pairs {_PREF_SCHEMAS}, each split into a desirable and an undesirable row"
)

_repr = reprlib.Repr()
_repr.maxstring = 40
_repr.maxother = 40
_repr.maxlevel = 2
_repr.maxlist = 3
_repr.maxdict = 3


@dataclass(frozen=True)
class SFTExample:
    prompt: Prompt
    completion: str
    source: str
    row: int


@dataclass(frozen=True)
class PreferenceExample:
    prompt: Prompt
    chosen: str
    rejected: str
    source: str
    row: int


@dataclass(frozen=True)
class UnpairedExample:
    """One response with a thumbs up (``desirable``) or down. ``pair``: the row of the preference
    pair it was split from (its partner has the same), None for an unpaired row."""

    prompt: Prompt
    completion: str
    desirable: bool
    source: str
    row: int
    pair: int | None = None


@dataclass(frozen=True)
class PromptExample:
    prompt: Prompt
    source: str
    row: int


# --------------------------------------------------------------------------- public validators


def sft_examples(records: Iterable[Record]) -> list[SFTExample]:
    """Schemas: ``messages`` (last message is the assistant response) or ``prompt``/``completion``."""
    out = []
    for rec in records:
        data = _data(rec)
        if "messages" in data:
            msgs = _messages(rec, "messages", data["messages"])
            last = msgs[-1]
            if last["role"] != "assistant":
                raise _err(rec, f"messages[{len(msgs) - 1}].role",
                           f"the last message to be the assistant response (role 'assistant'), got role {last['role']!r}")
            _response_text(rec, f"messages[{len(msgs) - 1}].content", last["content"])
            if len(msgs) < 2:
                raise _err(rec, "messages", "at least one message (the prompt) before the final assistant message, "
                                            "got only the assistant message")
            prompt = msgs[:-1]
            _check_prompt_content(rec, "messages", prompt)
            out.append(SFTExample(prompt, last["content"], rec.source, rec.row))
        elif "prompt" in data or "completion" in data:
            _require(rec, data, ("prompt", "completion"))
            prompt = _prompt(rec, "prompt", data["prompt"])
            completion = _completion(rec, data["completion"])
            out.append(SFTExample(prompt, completion, rec.source, rec.row))
        else:
            raise _unknown_schema(rec, data, _SFT_SCHEMAS, ("messages", "prompt", "completion"))
    return out


def preference_examples(
    records: Iterable[Record], on_identical: str = "error", unlabeled: bool = False
) -> tuple[list[PreferenceExample], dict]:
    """Schemas: ``prompt``/``chosen``/``rejected`` or HH-RLHF ``chosen``/``rejected`` conversations;
    with ``unlabeled`` (a teacher labels them: reward-model distillation) also ``tether pairs``'
    unlabeled ``prompt``/``response_a``/``response_b``, read as chosen = a, rejected = b (an order
    that carries no preference).

    ``on_identical`` is ``"error"`` or ``"skip"`` for pairs whose two responses are equal.
    Returns the examples and counts ``{"identical_skipped": n}``.
    """
    if on_identical not in ("error", "skip"):
        raise ValueError(f"on_identical must be 'error' or 'skip', got {on_identical!r}")
    out: list[PreferenceExample] = []
    counts = {"identical_skipped": 0}
    seen = 0
    last_source = None
    for rec in records:
        seen += 1
        last_source = rec.source
        data = _data(rec)
        if unlabeled and ("response_a" in data or "response_b" in data):
            _require(rec, data, ("prompt", "response_a", "response_b"))
            data = {"prompt": data["prompt"], "chosen": data["response_a"], "rejected": data["response_b"]}
        if not any(k in data for k in ("prompt", "chosen", "rejected")):
            raise _unknown_schema(rec, data, _PREF_SCHEMAS, ("prompt", "chosen", "rejected"))
        if "prompt" in data:
            _require(rec, data, ("prompt", "chosen", "rejected"))
            prompt = _prompt(rec, "prompt", data["prompt"])
            chosen = _pref_response(rec, "chosen", data["chosen"])
            rejected = _pref_response(rec, "rejected", data["rejected"])
        else:
            _require(rec, data, ("prompt", "chosen", "rejected"), needed=("chosen", "rejected"))
            prompt, chosen, rejected = _split_conversations(rec, data["chosen"], data["rejected"])
        if chosen == rejected:
            if on_identical == "skip":
                counts["identical_skipped"] += 1
                continue
            raise DataError(
                f"{rec.source}, row {rec.row}: fields 'chosen' and 'rejected' hold the same response "
                f"({_repr.repr(chosen)}); expected two different responses (set on_identical='skip' to drop such rows)"
            )
        out.append(PreferenceExample(prompt, chosen, rejected, rec.source, rec.row))
    if seen and not out:
        raise DataError(
            f"{last_source}: all {seen} rows were skipped because 'chosen' and 'rejected' were identical; "
            "expected at least one pair of different responses"
        )
    return out, counts


def unpaired_examples(
    records: Iterable[Record], on_identical: str = "error"
) -> tuple[list[UnpairedExample], dict]:
    """KTO's rows, from one file. Its format is read from the first row's keys: ``prompt``/
    ``completion``/``label`` rows (``label`` a JSON boolean), or preference pairs (the schemas of
    :func:`preference_examples`), each split into its chosen response (desirable) and its rejected
    one (undesirable), in that order. Returns the examples and counts ``{"identical_skipped": n}``.
    """
    records = list(records)
    if not records:
        return [], {"identical_skipped": 0}
    first = _data(records[0])
    if "chosen" in first or "rejected" in first:
        pairs, counts = preference_examples(records, on_identical)
        out = []
        for p in pairs:
            out += [UnpairedExample(p.prompt, p.chosen, True, p.source, p.row, pair=p.row),
                    UnpairedExample(p.prompt, p.rejected, False, p.source, p.row, pair=p.row)]
        return out, counts
    if not any(k in first for k in ("prompt", "completion", "label")):
        raise _unknown_schema(records[0], first, _UNPAIRED_SCHEMAS,
                              ("prompt", "completion", "label", "chosen", "rejected"))
    out = []
    for rec in records:
        data = _data(rec)
        _require(rec, data, ("prompt", "completion", "label"))
        prompt = _prompt(rec, "prompt", data["prompt"])
        completion = _completion(rec, data["completion"])
        label = data["label"]
        if not isinstance(label, bool):
            raise _err(rec, "label", "a JSON boolean: true (a desirable response) or false (an undesirable one)",
                       label)
        out.append(UnpairedExample(prompt, completion, label, rec.source, rec.row))
    return out, {"identical_skipped": 0}


def prompt_examples(records: Iterable[Record]) -> list[PromptExample]:
    """Schemas: ``prompt`` (string or messages) or ``messages`` (a trailing assistant message is dropped)."""
    out = []
    for rec in records:
        data = _data(rec)
        if "prompt" in data:
            prompt = _prompt(rec, "prompt", data["prompt"])
        elif "messages" in data:
            msgs = _messages(rec, "messages", data["messages"])
            if msgs[-1]["role"] == "assistant":
                msgs = msgs[:-1]
            if not msgs:
                raise _err(rec, "messages", "at least one message besides a trailing assistant message, "
                                            "got only an assistant message")
            _check_prompt_content(rec, "messages", msgs)
            prompt = msgs
        else:
            raise _unknown_schema(rec, data, _PROMPT_SCHEMAS, ("prompt", "messages"))
        out.append(PromptExample(prompt, rec.source, rec.row))
    return out


# --------------------------------------------------------------------------- errors


def _describe(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, str):
        if not value:
            return "an empty string"
        if not value.strip():
            return "a whitespace-only string"
        return f"the string {_repr.repr(value)}"
    if isinstance(value, bool):
        return f"the boolean {value}"
    if isinstance(value, (int, float)):
        return f"the number {value!r}"
    if isinstance(value, list):
        return "an empty list" if not value else f"a list ({_repr.repr(value)})"
    if isinstance(value, dict):
        return "an empty object" if not value else f"an object ({_repr.repr(value)})"
    return f"a {type(value).__name__} ({_repr.repr(value)})"


def _key(k: object) -> str:
    """A field name as it can be printed on one line (odd names are shown quoted, shortened)."""
    k = str(k)
    return k if k.isprintable() and len(k) <= 40 else _repr.repr(k)


def _err(rec: Record, field: str, expected: str, got: object = ...) -> DataError:
    msg = f"{rec.source}, row {rec.row}: field '{field}': expected {expected}"
    if got is not ...:
        msg += f", got {_describe(got)}"
    return DataError(msg)


def _require(rec: Record, data: dict, fields: Sequence[str], needed: Sequence[str] | None = None) -> None:
    for field in needed or fields:
        if field not in data:
            present = [_key(k) for k in data]
            candidates = [k for k in present if k not in fields]
            close = difflib.get_close_matches(field, candidates, n=1, cutoff=0.6)
            hint = f"; did you mean '{close[0]}'?" if close else ";"
            raise DataError(
                f"{rec.source}: row {rec.row} has no field '{field}'{hint} expected fields: {', '.join(fields)} "
                f"(present: {', '.join(present) or 'none'})"
            )


def _unknown_schema(rec: Record, data: dict, schemas: str, known: Sequence[str]) -> DataError:
    present = [_key(k) for k in data]
    hints = []
    for k in present:
        close = difflib.get_close_matches(k, known, n=1, cutoff=0.6)
        if close:
            hints.append(f"'{k}' -> '{close[0]}'")
    hint = f" Did you mean {', '.join(hints)}?" if hints else ""
    return DataError(
        f"{rec.source}, row {rec.row}: no known schema; fields present: {', '.join(present) or 'none'}; "
        f"expected fields {schemas}.{hint}"
    )


# --------------------------------------------------------------------------- field checks


def _data(rec: Record) -> dict:
    if not isinstance(rec.data, dict):
        raise DataError(f"{rec.source}, row {rec.row}: expected a JSON object per row, got {_describe(rec.data)}")
    return rec.data


def _messages(rec: Record, field: str, value: object) -> list[dict]:
    """A non-empty list of {role: non-empty str, content: str}; returns copies with only role/content."""
    if not isinstance(value, list) or not value:
        raise _err(rec, field, 'a non-empty list of chat messages [{"role": ..., "content": ...}, ...]', value)
    out = []
    for i, m in enumerate(value):
        where = f"{field}[{i}]"
        if not isinstance(m, dict):
            raise _err(rec, where, 'a chat message object {"role": ..., "content": ...}', m)
        for key in ("role", "content"):
            if key not in m:
                raise _err(rec, where, f'a chat message object with keys "role" and "content", but it has no "{key}" '
                                       f"(keys: {', '.join(map(_key, m)) or 'none'})")
        role, content = m["role"], m["content"]
        if not isinstance(role, str) or not role.strip():
            raise _err(rec, f"{where}.role", "a non-empty string such as 'system', 'user' or 'assistant'", role)
        if not isinstance(content, str):
            raise _err(rec, f"{where}.content", "a string", content)
        out.append({"role": role, "content": content})
    return out


def _check_prompt_content(rec: Record, field: str, msgs: list[dict]) -> None:
    if not any(m["content"].strip() for m in msgs):
        raise _err(rec, field, "a prompt with at least one message with non-empty content, got only empty messages")


def _prompt(rec: Record, field: str, value: object) -> Prompt:
    if isinstance(value, str):
        if not value.strip():
            raise _err(rec, field, "a non-empty string or a list of chat messages", value)
        return value
    if isinstance(value, list):
        msgs = _messages(rec, field, value)
        _check_prompt_content(rec, field, msgs)
        return msgs
    raise _err(rec, field, "a non-empty string or a list of chat messages", value)


def _response_text(rec: Record, field: str, value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _err(rec, field, "a non-empty string (the response)", value)
    return value


def _completion(rec: Record, value: object) -> str:
    if isinstance(value, list):
        msgs = _messages(rec, "completion", value)
        if len(msgs) != 1 or msgs[0]["role"] != "assistant":
            raise _err(rec, "completion", "a string or a list with exactly one assistant message", value)
        return _response_text(rec, "completion[0].content", msgs[0]["content"])
    return _response_text(rec, "completion", value)


def _pref_response(rec: Record, field: str, value: object) -> str:
    """A response string, or a message list whose final assistant message is the response."""
    if isinstance(value, list):
        msgs = _messages(rec, field, value)
        last = len(msgs) - 1
        if msgs[last]["role"] != "assistant":
            raise _err(rec, f"{field}[{last}].role",
                       f"the final message to be the assistant response (role 'assistant'), got role {msgs[last]['role']!r}")
        return _response_text(rec, f"{field}[{last}].content", msgs[last]["content"])
    return _response_text(rec, field, value)


# --------------------------------------------------------------------------- HH-RLHF splitting


def _split_conversations(rec: Record, chosen: object, rejected: object) -> tuple[Prompt, str, str]:
    if isinstance(chosen, str) and isinstance(rejected, str):
        return _split_hh_strings(rec, chosen, rejected)
    if isinstance(chosen, list) and isinstance(rejected, list):
        return _split_message_lists(rec, chosen, rejected)
    bad, value = ("chosen", chosen) if not isinstance(chosen, (str, list)) else ("rejected", rejected)
    if isinstance(chosen, (str, list)) and isinstance(rejected, (str, list)):
        raise _err(rec, "rejected", f"the same kind of value as 'chosen' (both HH-RLHF strings or both message lists; "
                                    f"'chosen' is {_describe(chosen)})", rejected)
    raise _err(rec, bad, "a whole conversation: an HH-RLHF string ('\\n\\nHuman: ... \\n\\nAssistant: ...') "
                         "or a list of chat messages (with no 'prompt' field)", value)


def _split_hh_strings(rec: Record, chosen: str, rejected: str) -> tuple[Prompt, str, str]:
    n = 0
    limit = min(len(chosen), len(rejected))
    while n < limit and chosen[n] == rejected[n]:
        n += 1
    cut = chosen.rfind(HH_ASSISTANT, 0, n)
    if cut < 0 or cut + len(HH_ASSISTANT) > n:
        raise _err(rec, "chosen", "HH-RLHF conversations ('\\n\\nHuman: ... \\n\\nAssistant: ...') in 'chosen' and "
                                  "'rejected' that share a prefix ending in '\\n\\nAssistant:' (or a 'prompt' field)",
                   chosen)
    end = cut + len(HH_ASSISTANT)
    prompt = _hh_to_messages(chosen[:end])
    if not prompt or not any(m["content"].strip() for m in prompt):
        raise _err(rec, "chosen", "an HH-RLHF conversation with a non-empty human turn before the final "
                                  "'\\n\\nAssistant:'", chosen)
    chosen_resp = _response_text(rec, "chosen", chosen[end:].strip())
    rejected_resp = _response_text(rec, "rejected", rejected[end:].strip())
    return prompt, chosen_resp, rejected_resp


def _hh_to_messages(text: str) -> list[dict]:
    """'\\n\\nHuman: a\\n\\nAssistant: b\\n\\nHuman: c\\n\\nAssistant:' -> user/assistant messages (final empty turn dropped)."""
    markers = ((HH_HUMAN, "user"), (HH_ASSISTANT, "assistant"))
    msgs: list[dict] = []
    pos = 0
    role = None
    head = ""
    while True:
        nxt = [(text.find(mark, pos), mark, r) for mark, r in markers]
        nxt = [t for t in nxt if t[0] >= 0]
        if not nxt:
            break
        at, mark, new_role = min(nxt)
        chunk = text[pos:at].strip()
        if role is None:
            head = chunk
        else:
            msgs.append({"role": role, "content": chunk})
        role, pos = new_role, at + len(mark)
    tail = text[pos:].strip()
    if role is not None and tail:
        msgs.append({"role": role, "content": tail})
    if head:  # text before the first marker (e.g. "Human: ..." without the leading blank line)
        stripped = head[len("Human:"):].strip() if head.startswith("Human:") else head
        msgs.insert(0, {"role": "user", "content": stripped})
    return msgs


def _split_message_lists(rec: Record, chosen: list, rejected: list) -> tuple[Prompt, str, str]:
    c = _messages(rec, "chosen", chosen)
    r = _messages(rec, "rejected", rejected)
    k = 0
    while k < min(len(c), len(r)) and c[k] == r[k]:
        k += 1
    if k == len(c) == len(r):  # identical conversations
        k -= 1
    for field, msgs in (("chosen", c), ("rejected", r)):
        if len(msgs) - k != 1:
            raise _err(rec, field, f"'chosen' and 'rejected' conversations that differ only in their final assistant "
                                   f"message, but they share {k} leading messages and '{field}' has {len(msgs)}")
        if msgs[-1]["role"] != "assistant":
            raise _err(rec, f"{field}[{len(msgs) - 1}].role",
                       f"the final message to be the assistant response (role 'assistant'), got role {msgs[-1]['role']!r}")
    if k == 0:
        raise _err(rec, "chosen", "conversations that share at least one prompt message before the final assistant "
                                  "message, got none in common")
    prompt = c[:k]
    _check_prompt_content(rec, "chosen", prompt)
    chosen_resp = _response_text(rec, f"chosen[{len(c) - 1}].content", c[-1]["content"])
    rejected_resp = _response_text(rec, f"rejected[{len(r) - 1}].content", r[-1]["content"])
    return prompt, chosen_resp, rejected_resp
