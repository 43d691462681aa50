"""Validators: accepted schemas, HH-RLHF splitting, and error messages naming file/row/field."""

from __future__ import annotations

import pytest

from tether.data import (
    PreferenceExample,
    PromptExample,
    Record,
    SFTExample,
    load_records,
    preference_examples,
    prompt_examples,
    sft_examples,
)
from tether.common.errors import DataError

U = lambda c: {"role": "user", "content": c}  # noqa: E731
A = lambda c: {"role": "assistant", "content": c}  # noqa: E731
S = lambda c: {"role": "system", "content": c}  # noqa: E731


def rec(data, row=3, source="set.jsonl"):
    return Record(data, source, row)


def assert_error(fn, data, *fragments, row=3):
    """fn([record]) raises DataError naming the file, the row and every fragment (the field, ...)."""
    with pytest.raises(DataError) as e:
        fn([rec(data, row=row)])
    msg = str(e.value)
    assert "set.jsonl" in msg and f"row {row}" in msg, msg
    assert "\n" not in msg, msg
    for f in fragments:
        assert f in msg, (f, msg)
    return msg


sft = sft_examples
pref = lambda recs: preference_examples(recs)[0]  # noqa: E731


# --------------------------------------------------------------------------- SFT


def test_sft_prompt_completion_strings_and_extra_columns():
    [ex] = sft([rec({"prompt": "hi", "completion": "hello", "id": 7, "meta": {"x": 1}})])
    assert ex == SFTExample("hi", "hello", "set.jsonl", 3)


def test_sft_prompt_as_messages_and_completion_as_assistant_message():
    [ex] = sft([rec({"prompt": [S("be nice"), U("hi")], "completion": [A("hello")]})])
    assert ex.prompt == [S("be nice"), U("hi")] and ex.completion == "hello"


def test_sft_messages_schema_keeps_only_role_and_content():
    msgs = [U("hi"), A("hello"), {"role": "user", "content": "how", "name": "bob"}, A("fine")]
    [ex] = sft([rec({"messages": msgs})])
    assert ex.prompt == [U("hi"), A("hello"), U("how")]
    assert ex.completion == "fine"


@pytest.mark.parametrize(
    "data, fragments",
    [
        ({"messages": [U("hi"), U("again")]}, ["messages[1].role", "assistant"]),
        ({"messages": [A("only")]}, ["'messages'", "at least one message"]),
        ({"messages": []}, ["'messages'", "non-empty list of chat messages", "an empty list"]),
        ({"messages": "hi"}, ["'messages'", "list of chat messages", "the string 'hi'"]),
        ({"messages": [U("hi"), A("   ")]}, ["messages[1].content", "non-empty string", "whitespace-only"]),
        ({"messages": [{"content": "hi"}, A("x")]}, ["messages[0]", 'no "role"']),
        ({"messages": [{"role": "user"}, A("x")]}, ["messages[0]", 'no "content"']),
        ({"messages": [{"role": 1, "content": "hi"}, A("x")]}, ["messages[0].role", "the number 1"]),
        ({"messages": [{"role": "user", "content": None}, A("x")]}, ["messages[0].content", "a string", "null"]),
        ({"messages": ["hi", A("x")]}, ["messages[0]", "chat message object"]),
        ({"messages": [U(""), A("x")]}, ["'messages'", "non-empty content"]),
        ({"prompt": "hi", "completion": ""}, ["'completion'", "non-empty string", "an empty string"]),
        ({"prompt": "hi", "completion": " \n\t"}, ["'completion'", "whitespace-only"]),
        ({"prompt": "hi", "completion": 5}, ["'completion'", "the number 5"]),
        ({"prompt": "hi", "completion": [U("x")]}, ["'completion'", "exactly one assistant message"]),
        ({"prompt": "hi", "completion": [A("")]}, ["completion[0].content"]),
        ({"prompt": "  ", "completion": "x"}, ["'prompt'", "non-empty string or a list of chat messages"]),
        ({"prompt": None, "completion": "x"}, ["'prompt'", "null"]),
        ({"prompt": {"text": "hi"}, "completion": "x"}, ["'prompt'", "an object"]),
        ({"prompt": "hi", "complection": "x"}, ["no field 'completion'", "did you mean 'complection'?",
                                                "expected fields: prompt, completion"]),
        ({"promt": "hi", "completion": "x"}, ["no field 'prompt'", "did you mean 'promt'?"]),
        ({"text": "hi"}, ["no known schema", "fields present: text", "{messages}", "{prompt, completion}"]),
        ({"mesages": []}, ["no known schema", "'mesages' -> 'messages'"]),
        ({}, ["no known schema", "fields present: none"]),
    ],
)
def test_sft_errors(data, fragments):
    assert_error(sft, data, *fragments)


# --------------------------------------------------------------------------- preferences


def test_pref_prompt_chosen_rejected_strings():
    exs, counts = preference_examples([rec({"prompt": "hi", "chosen": "good", "rejected": "bad", "x": None})])
    assert exs == [PreferenceExample("hi", "good", "bad", "set.jsonl", 3)]
    assert counts == {"identical_skipped": 0}


def test_pref_prompt_with_message_list_responses():
    [ex] = pref([rec({"prompt": "hi", "chosen": [U("hi"), A("good")], "rejected": [A("bad")]})])
    assert (ex.prompt, ex.chosen, ex.rejected) == ("hi", "good", "bad")


def test_pref_hh_strings_split_at_last_common_assistant():
    chosen = "\n\nHuman: hi there\n\nAssistant: hello\n\nHuman: how are you\n\nAssistant: fine, thanks"
    rejected = "\n\nHuman: hi there\n\nAssistant: hello\n\nHuman: how are you\n\nAssistant: fiddlesticks"
    [ex] = pref([rec({"chosen": chosen, "rejected": rejected})])
    assert ex.prompt == [U("hi there"), A("hello"), U("how are you")]
    assert ex.chosen == "fine, thanks" and ex.rejected == "fiddlesticks"


def test_pref_hh_strings_one_response_prefix_of_other_and_no_leading_blank_line():
    chosen = "Human: q\n\nAssistant: yes"
    rejected = "Human: q\n\nAssistant: yes and more"
    [ex] = pref([rec({"chosen": chosen, "rejected": rejected})])
    assert ex.prompt == [U("q")] and (ex.chosen, ex.rejected) == ("yes", "yes and more")


def test_pref_hh_message_lists_split_at_longest_common_prefix():
    base = [S("sys"), U("hi"), A("hello"), U("how")]
    [ex] = pref([rec({"chosen": base + [A("fine")], "rejected": base + [A("bad")]})])
    assert ex.prompt == base and (ex.chosen, ex.rejected) == ("fine", "bad")


def test_pref_identical_error_and_skip():
    rows = [rec({"prompt": "p", "chosen": "same", "rejected": "same"}, row=1),
            rec({"prompt": "p", "chosen": "a", "rejected": "b"}, row=2)]
    with pytest.raises(DataError, match=r"set\.jsonl, row 1: fields 'chosen' and 'rejected' .* on_identical='skip'"):
        preference_examples(rows)
    exs, counts = preference_examples(rows, on_identical="skip")
    assert [e.row for e in exs] == [2] and counts == {"identical_skipped": 1}
    # identical HH conversations (strings and message lists) are detected too
    hh = "\n\nHuman: q\n\nAssistant: a"
    assert preference_examples([rec({"chosen": hh, "rejected": hh}), rows[1]], on_identical="skip")[1] == {
        "identical_skipped": 1}
    msgs = [U("q"), A("a")]
    with pytest.raises(DataError, match="identical"):
        preference_examples([rec({"chosen": msgs, "rejected": list(msgs)})], on_identical="skip")
    with pytest.raises(ValueError):
        preference_examples(rows, on_identical="maybe")


@pytest.mark.parametrize(
    "data, fragments",
    [
        ({"prompt": "p", "chosn": "a", "rejected": "b"},
         ["row 3 has no field 'chosen'; did you mean 'chosn'? expected fields: prompt, chosen, rejected"]),
        ({"prompt": "p", "chosen": "a"}, ["no field 'rejected'"]),
        ({"chosen": "a", "rejectd": "b"}, ["no field 'rejected'", "did you mean 'rejectd'?"]),
        ({"prompt": "p", "chosen": "", "rejected": "b"}, ["'chosen'", "non-empty string", "an empty string"]),
        ({"prompt": "p", "chosen": "a", "rejected": "   "}, ["'rejected'", "whitespace-only"]),
        ({"prompt": "p", "chosen": "a", "rejected": 1.5}, ["'rejected'", "the number 1.5"]),
        ({"prompt": "p", "chosen": [U("x")], "rejected": "b"}, ["chosen[0].role", "assistant"]),
        ({"prompt": "p", "chosen": [{"role": "assistant"}], "rejected": "b"}, ["chosen[0]", 'no "content"']),
        ({"prompt": ["hi"], "chosen": "a", "rejected": "b"}, ["prompt[0]", "chat message object"]),
        ({"chosen": "no markers here", "rejected": "nor here"}, ["'chosen'", "HH-RLHF", "share a prefix"]),
        ({"chosen": "\n\nHuman: q\n\nAssistant:", "rejected": "\n\nHuman: q\n\nAssistant: b"},
         ["'chosen'", "non-empty string", "an empty string"]),
        ({"chosen": "\n\nHuman: \n\nAssistant: a", "rejected": "\n\nHuman: \n\nAssistant: b"},
         ["'chosen'", "non-empty human turn"]),
        ({"chosen": "\n\nHuman: q\n\nAssistant: a", "rejected": [A("b")]}, ["'rejected'", "same kind of value"]),
        ({"chosen": 3, "rejected": "x"}, ["'chosen'", "whole conversation", "the number 3"]),
        ({"chosen": [U("q"), A("a")], "rejected": [U("other"), A("b")]}, ["'chosen'", "share 0 leading messages"]),
        ({"chosen": [A("a")], "rejected": [A("b")]}, ["'chosen'", "share at least one prompt message"]),
        ({"chosen": [U("q"), A("a"), U("more"), A("x")], "rejected": [U("q"), A("b")]},
         ["'chosen'", "differ only in their final assistant message"]),
        ({"chosen": [U("q"), U("a")], "rejected": [U("q"), U("b")]}, ["chosen[1].role", "assistant"]),
        ({"chosen": [U("q"), A("a")], "rejected": [U("q"), A(" ")]}, ["rejected[1].content", "whitespace-only"]),
        ({"chosen": [U(""), A("a")], "rejected": [U(""), A("b")]}, ["'chosen'", "non-empty content"]),
        ({"question": "p", "good": "a"}, ["no known schema", "{prompt, chosen, rejected}", "{chosen, rejected}"]),
    ],
)
def test_pref_errors(data, fragments):
    assert_error(pref, data, *fragments)


def test_pref_all_skipped_is_an_error():
    rows = [rec({"prompt": "p", "chosen": "x", "rejected": "x"}, row=i) for i in (1, 2)]
    with pytest.raises(DataError, match=r"set\.jsonl: all 2 rows were skipped"):
        preference_examples(rows, on_identical="skip")
    assert preference_examples([]) == ([], {"identical_skipped": 0})


# --------------------------------------------------------------------------- prompts


def test_prompt_schemas():
    exs = prompt_examples([
        rec({"prompt": "hi", "chosen": "ignored"}, row=1),
        rec({"prompt": [U("hi")]}, row=2),
        rec({"messages": [S("s"), U("hi"), A("old answer")]}, row=3),
        rec({"messages": [U("hi")]}, row=4),
    ])
    assert exs == [
        PromptExample("hi", "set.jsonl", 1),
        PromptExample([U("hi")], "set.jsonl", 2),
        PromptExample([S("s"), U("hi")], "set.jsonl", 3),
        PromptExample([U("hi")], "set.jsonl", 4),
    ]


@pytest.mark.parametrize(
    "data, fragments",
    [
        ({"prompt": ""}, ["'prompt'", "an empty string"]),
        ({"prompt": 12}, ["'prompt'", "the number 12"]),
        ({"prompt": [{"role": "user", "content": ["x"]}]}, ["prompt[0].content", "a string"]),
        ({"messages": [A("x")]}, ["'messages'", "besides a trailing assistant message"]),
        ({"messages": [{"role": "", "content": "x"}]}, ["messages[0].role", "non-empty string"]),
        ({"promt": "hi"}, ["no known schema", "'promt' -> 'prompt'", "{prompt} or {messages}"]),
    ],
)
def test_prompt_errors(data, fragments):
    assert_error(prompt_examples, data, *fragments)


def test_errors_from_a_real_file_name_the_file_line(write):
    path = write("prefs.jsonl", '{"prompt": "p", "chosen": "a", "rejected": "b"}\n\n{"prompt": "p", "chosn": "a"}\n')
    with pytest.raises(DataError) as e:
        preference_examples(load_records(path))
    msg = str(e.value)
    assert msg.startswith(path) and "row 3 has no field 'chosen'; did you mean 'chosn'?" in msg
