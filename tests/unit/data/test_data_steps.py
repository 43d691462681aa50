"""Step-labelled solutions for a process reward model (tether.data.steps): rows validated naming the
file, the row and the field; steps joined by the one-token separator, then EOS; each step's end."""

from __future__ import annotations

import pytest

from tether.common.errors import ConfigError, DataError
from tether.data import Record
from tether.data.steps import separator_id, step_examples, tokenize_steps


def rows(*datas):
    return [Record(d, "steps.jsonl", i + 1) for i, d in enumerate(datas)]


def ids(tok, text):
    return tok.convert_tokens_to_ids(text.split())


def test_rows_in_either_field_name_with_boolean_or_0_1_labels():
    out = step_examples(rows({"prompt": "hi", "completions": ["a b", "c"], "labels": [True, 0]},
                             {"prompt": "hi", "steps": ["d"], "labels": [1], "extra": 5}), ":")
    assert [(e.steps, e.labels, e.row) for e in out] == [(["a b", "c"], [True, False], 1), (["d"], [True], 2)]


@pytest.mark.parametrize("data, needle", [
    ({"prompt": "hi", "labels": [True]}, "row 1: no known schema"),
    ({"prompt": "hi", "completions": [], "labels": []}, "field 'completions': expected a non-empty list"),
    ({"prompt": "hi", "completions": ["a", " "], "labels": [1, 1]}, "non-empty strings"),
    ({"prompt": "hi", "steps": ["a", "b"], "labels": [True]}, "field 'labels': expected a list of 2 booleans"),
    ({"prompt": "hi", "steps": ["a"], "labels": ["yes"]}, "field 'labels'"),
    ({"prompt": "hi", "steps": ["a : b"], "labels": [True]}, "step 1 contains the step separator ':'"),
    ({"completions": ["a"], "labels": [True]}, "row 1 has no field 'prompt'"),
])
def test_bad_rows_name_the_file_row_and_field(data, needle):
    with pytest.raises(DataError, match="steps.jsonl") as err:
        step_examples(rows(data), ":")
    assert needle in str(err.value)


def test_steps_are_joined_by_the_separator_and_end_at_it_or_at_eos(tok):
    (ex,) = step_examples(rows({"prompt": "hi", "steps": ["a b", "c", "d e f"], "labels": [1, 0, 1]}), ":")
    sep = separator_id(tok, ":")
    out = tokenize_steps(ex, tok, sep, max_length=64, mode="never")
    assert out.prompt_ids == ids(tok, "<bos> hi")
    assert out.response_ids == ids(tok, "a b : c : d e f <eos>")
    assert out.ends == [2, 4, 8] and out.labels == [True, False, True] and not out.truncated
    # Too long: whole steps kept while their end fits (2 prompt tokens + 5 of the response).
    cut = tokenize_steps(ex, tok, sep, max_length=7, mode="never")
    assert cut.response_ids == ids(tok, "a b : c :") and cut.ends == [2, 4] and cut.labels == [True, False]
    assert cut.truncated
    assert tokenize_steps(ex, tok, sep, max_length=4, mode="never") is None  # not even the first step fits
    assert tokenize_steps(ex, tok, sep, max_length=7, mode="never", on_long="drop") is None
    with pytest.raises(DataError, match=r"steps.jsonl, row 1: prompt \+ solution is 11 tokens"):
        tokenize_steps(ex, tok, sep, max_length=7, mode="never", on_long="error")


def test_a_separator_must_be_one_token(tok):
    with pytest.raises(ConfigError, match="'step_separator' = 'a b' encodes to 2 tokens"):
        separator_id(tok, "a b")
