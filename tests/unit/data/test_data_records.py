"""load_records: local files (.jsonl/.json/.parquet), hub branch (mocked), and error messages."""

from __future__ import annotations

import json

import pytest

from tether.data import Record, load_records
from tether.common.errors import DataError


def test_jsonl_rows_are_line_numbers_and_blank_lines_skipped(write):
    path = write("d.jsonl", '{"a": 1}\n\n   \n{"a": 2}\r\n')
    recs = load_records(path)
    assert recs == [Record({"a": 1}, path, 1), Record({"a": 2}, path, 4)]


def test_jsonl_utf8_bom_is_accepted(write):
    path = write("bom.jsonl", b'\xef\xbb\xbf{"a": "\xc3\xa9"}\n')
    assert load_records(path)[0].data == {"a": "é"}


def test_jsonl_malformed_line_names_file_and_line(write):
    path = write("bad.jsonl", '{"a": 1}\n{"a": 2,}\n')
    with pytest.raises(DataError) as e:
        load_records(path)
    msg = str(e.value)
    assert "bad.jsonl, line 2: not valid JSON" in msg
    assert "expected one JSON object per line" in msg


@pytest.mark.parametrize("line, kind", [("[1, 2]", "a list"), ('"text"', "a string"), ("3", "a number"),
                                        ("null", "null")])
def test_jsonl_non_object_line(write, line, kind):
    path = write("arr.jsonl", '{"a": 1}\n' + line + "\n")
    with pytest.raises(DataError, match=rf"arr\.jsonl, line 2: expected a JSON object .* got {kind}"):
        load_records(path)


def test_jsonl_non_utf8_names_line_and_byte_offset(write):
    path = write("latin.jsonl", b'{"a": 1}\n{"a": "caf\xe9"}\n')
    with pytest.raises(DataError) as e:
        load_records(path)
    msg = str(e.value)
    assert "latin.jsonl, line 2: not valid UTF-8" in msg
    assert "offset 19" in msg  # 9 bytes on line 1 + 10 into line 2


def test_jsonl_deep_nesting_is_a_data_error(write):
    path = write("deep.jsonl", '{"a": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    with pytest.raises(DataError, match=r"deep\.jsonl, line 1: not valid JSON"):
        load_records(path)


def test_unpaired_surrogate_escape_is_rejected(write):
    ok = write("pair.jsonl", '{"a": "\\ud83d\\ude00"}\n')  # a valid surrogate pair is an emoji
    assert load_records(ok)[0].data == {"a": "\U0001F600"}
    bad = write("lone.jsonl", '{"a": 1}\n{"a": "x\\ud800"}\n')
    with pytest.raises(DataError, match=r"lone\.jsonl, line 2: .*unpaired UTF-16 surrogate"):
        load_records(bad)
    bad_json = write("lone.json", '[{"a": "\\uDC00"}]')
    with pytest.raises(DataError, match=r"lone\.json: .*unpaired"):
        load_records(bad_json)


@pytest.mark.parametrize("content", ["", "\n\n  \n"])
def test_empty_file(write, content):
    path = write("empty.jsonl", content)
    with pytest.raises(DataError, match=r"empty\.jsonl: the dataset is empty"):
        load_records(path)


def test_json_list_of_objects(write):
    path = write("d.json", json.dumps([{"a": 1}, {"a": 2}], indent=2))
    assert load_records(path) == [Record({"a": 1}, path, 1), Record({"a": 2}, path, 2)]


def test_json_single_object_and_json_lines(write):
    one = write("one.json", '{"a": 1}')
    assert load_records(one) == [Record({"a": 1}, one, 1)]
    lines = write("lines.json", '{"a": 1}\n{"a": 2}\n')
    assert [r.row for r in load_records(lines)] == [1, 2]


def test_json_lines_error_names_line(write):
    path = write("lines.json", '{"a": 1}\n{"a": 2}\n{oops}\n')
    with pytest.raises(DataError, match=r"lines\.json, line 3: not valid JSON"):
        load_records(path)


def test_json_list_errors(write):
    bad = write("bad.json", '[\n  {"a": 1},\n  {"a": 2\n]')
    with pytest.raises(DataError, match=r"bad\.json, line 4, column 1: not valid JSON"):
        load_records(bad)
    nonobj = write("nonobj.json", '[{"a": 1}, 5]')
    with pytest.raises(DataError, match=r"nonobj\.json, row 2: expected a JSON object"):
        load_records(nonobj)
    scalar = write("scalar.json", "42")
    with pytest.raises(DataError, match=r"scalar\.json: expected a JSON list of objects"):
        load_records(scalar)
    empty = write("empty.json", "[]")
    with pytest.raises(DataError, match="empty"):
        load_records(empty)


def test_json_non_utf8(write):
    path = write("x.json", b'[{"a": 1},\n {"a": "\xff"}]')
    with pytest.raises(DataError, match=r"x\.json, line 2: not valid UTF-8 \(bad byte at file offset 19"):
        load_records(path)


def test_parquet_roundtrip_and_corrupt(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "d.parquet"
    pq.write_table(pa.Table.from_pylist([{"prompt": "p1", "n": 1}, {"prompt": "p2", "n": 2}]), path)
    recs = load_records(str(path))
    assert [(r.data, r.row) for r in recs] == [({"prompt": "p1", "n": 1}, 1), ({"prompt": "p2", "n": 2}, 2)]

    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"this is not parquet")
    with pytest.raises(DataError, match=r"bad\.parquet: cannot read as a parquet file"):
        load_records(str(bad))


def test_unsupported_extension_and_directory(tmp_path, write):
    path = write("d.csv", "a,b\n1,2\n")
    with pytest.raises(DataError, match=r"d\.csv: unsupported file type '\.csv'"):
        load_records(path)
    with pytest.raises(DataError, match="is a directory"):
        load_records(str(tmp_path))


@pytest.mark.parametrize("name", ["missing.jsonl", "data/train.parquet", "./nope", "/abs/path/x", "a b c"])
def test_missing_file_that_is_not_a_hub_id(tmp_path, monkeypatch, name):
    monkeypatch.chdir(tmp_path)
    import datasets

    def boom(*a, **k):  # the hub must not even be tried
        raise AssertionError("hub was queried")

    monkeypatch.setattr(datasets, "load_dataset", boom)
    with pytest.raises(DataError, match="no such file") as e:
        load_records(name)
    assert name in str(e.value)


class _FakeDataset(list):
    """What iterating a datasets.Dataset yields: dict rows."""


def test_hub_branch_calls_load_dataset(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    import datasets

    calls = []

    def fake(name, subset=None, split=None):
        calls.append((name, subset, split))
        return _FakeDataset([{"prompt": "p", "chosen": "c", "rejected": "r"}, {"prompt": "q"}])

    monkeypatch.setattr(datasets, "load_dataset", fake)
    recs = load_records("Org/hh-data:harmless-base", split="test")
    assert calls == [("Org/hh-data", "harmless-base", "test")]
    assert recs[1] == Record({"prompt": "q"}, "Org/hh-data:harmless-base", 2)
    load_records("plainname")
    assert calls[-1] == ("plainname", None, "train")


def test_hub_errors_are_wrapped(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    import datasets

    def offline(*a, **k):
        raise ConnectionError("Couldn't reach the hub")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(DataError) as e:
        load_records("org/name", split="train")
    msg = str(e.value)
    assert "org/name" in msg and "'train'" in msg and "ConnectionError" in msg and "no local file" in msg

    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: _FakeDataset())
    with pytest.raises(DataError, match=r"org/name \(split 'train'\): the dataset is empty"):
        load_records("org/name")


@pytest.mark.parametrize("content,where", [
    ('{"prompt": "a", "completion": "b"\n', "line 1: not valid JSON (Expecting ',' delimiter at column 34)"),
    ('{"prompt": "a", "completion": }\n', "line 1: not valid JSON (Expecting value at column 31)"),
    ('{"a": 1}\n{"prompt": "a",, "b": 1}\n', "line 2: not valid JSON (Expecting property name enclosed in "
                                            "double quotes at column 16)"),
    ('{"prompt": "a", "completion": "b\n', "line 1: not valid JSON (Unterminated string starting at column 31)"),
])
def test_jsonl_errors_point_at_the_real_column(write, content, where):
    """An error at the end of a line was reported at 'column 1' (of the line break)."""
    path = write("cols.jsonl", content)
    with pytest.raises(DataError) as info:
        load_records(path)
    assert where in str(info.value)


def test_json_document_spread_over_lines_points_at_its_line_and_column(write):
    path = write("pretty.json", '{\n  "prompt": "a",\n  "completion": \n}\n')
    with pytest.raises(DataError, match=r"pretty\.json, line 4, column 1: not valid JSON \(Expecting value"):
        load_records(path)


def test_errors_name_the_config_key(write, tmp_path):
    path = write("bad.jsonl", '{"prompt": 1\n')
    with pytest.raises(DataError, match=r"bad\.jsonl \(data\.train\), line 1"):
        load_records(path, key="data.train")
    with pytest.raises(DataError, match=r"nope\.jsonl \(data\.eval\): no such file"):
        load_records(str(tmp_path / "nope.jsonl"), key="data.eval")
    rows = load_records(write("ok.jsonl", '{"a": 1}\n'), key="prompts")
    assert rows[0].source.endswith("ok.jsonl (prompts)")
