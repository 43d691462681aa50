"""The report's tolerant readers: a crashed run's files still read."""

from __future__ import annotations

from tether.plots.run_files import read_json, read_jsonl, read_yaml


def test_read_jsonl_skips_a_line_cut_mid_write_and_non_objects(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text('{"step": 1}\n\n[1, 2]\n{"step": 2}\n{"step": 3, "lo', encoding="utf-8")
    assert read_jsonl(path) == [{"step": 1}, {"step": 2}]


def test_missing_or_broken_files_read_as_empty(tmp_path):
    broken = tmp_path / "b.json"
    broken.write_text("{not json", encoding="utf-8")
    assert read_json(None) is None and read_json(broken) is None
    assert read_yaml(None) == {} and read_yaml(tmp_path / "absent.yaml") == {}
    listy = tmp_path / "l.yaml"
    listy.write_text("- 1\n- 2\n", encoding="utf-8")
    assert read_yaml(listy) == {}
