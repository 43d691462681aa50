"""KTO's rows: unpaired {prompt, completion, label} rows or preference pairs split in two, the
format read from a file's first row; errors name the file, the row and the expected keys; the
tokenized row keeps its prompt and response apart."""

from __future__ import annotations

import pytest

from tether.data import Record, UnpairedExample, tokenize_unpaired, unpaired_examples
from tether.common.errors import DataError


def recs(*rows, source="kto.jsonl"):
    return [Record(data, source, i + 1) for i, data in enumerate(rows)]


def error(*rows) -> str:
    with pytest.raises(DataError) as e:
        unpaired_examples(recs(*rows))
    msg = str(e.value)
    assert "kto.jsonl" in msg and "\n" not in msg, msg
    return msg


GOOD = {"prompt": "hi", "completion": "a b", "label": True}


def test_unpaired_rows_keep_their_labels():
    rows, counts = unpaired_examples(recs(GOOD, {"prompt": [{"role": "user", "content": "hi"}],
                                                "completion": "c", "label": False, "extra": 1}))
    assert [(r.completion, r.desirable, r.pair, r.row) for r in rows] == [("a b", True, None, 1), ("c", False, None, 2)]
    assert rows[1].prompt == [{"role": "user", "content": "hi"}] and counts == {"identical_skipped": 0}


def test_a_pair_file_is_split_into_a_desirable_and_an_undesirable_row():
    rows, _ = unpaired_examples(recs({"prompt": "hi", "chosen": "good", "rejected": "bad"},
                                     {"prompt": "yo", "chosen": "fine", "rejected": "worse"}))
    assert rows == [UnpairedExample("hi", "good", True, "kto.jsonl", 1, 1),
                    UnpairedExample("hi", "bad", False, "kto.jsonl", 1, 1),
                    UnpairedExample("yo", "fine", True, "kto.jsonl", 2, 2),
                    UnpairedExample("yo", "worse", False, "kto.jsonl", 2, 2)]


def test_identical_pairs_are_skipped_and_counted():
    rows, counts = unpaired_examples(recs({"prompt": "hi", "chosen": "a", "rejected": "a"},
                                          {"prompt": "hi", "chosen": "a", "rejected": "b"}), "skip")
    assert len(rows) == 2 and counts == {"identical_skipped": 1}


def test_a_row_without_a_label_names_the_row_and_the_keys():
    msg = error(GOOD, {"prompt": "hi", "completion": "b"})
    assert "row 2" in msg and "'label'" in msg and "prompt, completion, label" in msg


@pytest.mark.parametrize("label", ["true", 1, None, [True]])
def test_a_label_that_is_not_a_boolean_is_refused(label):
    msg = error(GOOD, {**GOOD, "label": label})
    assert "row 2" in msg and "field 'label'" in msg and "JSON boolean" in msg


def test_a_first_row_of_no_known_format_lists_both():
    msg = error({"question": "hi", "answer": "a"})
    assert "row 1" in msg and "no known schema" in msg and "{prompt, completion, label}" in msg and "chosen" in msg


def test_a_bad_completion_names_its_field():
    assert "field 'completion'" in error({**GOOD, "completion": "  "})


def test_a_pair_file_row_without_rejected_is_a_pair_error():
    msg = error({"prompt": "hi", "chosen": "a", "rejected": "b"}, {"prompt": "hi", "chosen": "a"})
    assert "row 2" in msg and "'rejected'" in msg


def ids(tok, text):
    return tok.convert_tokens_to_ids(text.split())


def test_a_row_tokenizes_to_its_prompt_and_its_response(tok):
    out = tokenize_unpaired(UnpairedExample("hi there", "a b c", False, "kto.jsonl", 4), tok, 64, mode="never")
    assert out.prompt_ids == ids(tok, "<bos> hi there") and out.completion_ids == ids(tok, "a b c <eos>")
    assert out.desirable is False and out.pair is None and not out.truncated


def test_too_long_rows_are_cut_dropped_or_refused_naming_the_field(tok):
    ex = UnpairedExample("hi there", "a b c", True, "kto.jsonl", 4, pair=4)  # 3 + 4 tokens
    cut = tokenize_unpaired(ex, tok, 5, mode="never", on_long="truncate")
    assert cut.completion_ids == ids(tok, "a b") and cut.truncated and cut.pair == 4
    assert tokenize_unpaired(ex, tok, 5, mode="never", on_long="drop") is None
    with pytest.raises(DataError, match="kto.jsonl, row 4: field 'chosen': prompt \\+ response is 7 tokens"):
        tokenize_unpaired(ex, tok, 5, mode="never", on_long="error")
