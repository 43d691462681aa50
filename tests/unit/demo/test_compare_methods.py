"""`tether compare`'s preference methods read the stage table: KTO runs beside DPO, SimPO and ORPO
on the demo's pair files, with its own colour and as many snapshots along its run."""

from __future__ import annotations

from pathlib import Path

from tether.demo.compare import _snapshot_every, method_args, preference_methods
from tether.plots.compare import PALETTE, method_color, method_name


def test_kto_is_a_preference_method_on_the_pair_files(tmp_path):
    assert "kto" in preference_methods()
    argv = method_args("kto", tmp_path, tmp_path / "out", 0, [])
    assert argv[0] == "kto" and argv[2].endswith("configs/demo/kto.yaml")
    assert f"data.train={tmp_path / 'task' / 'prefs_train.jsonl'}" in argv
    assert f"data.eval={tmp_path / 'task' / 'prefs_eval.jsonl'}" in argv


def test_kto_snapshots_count_two_rows_per_pair(tmp_path):
    (tmp_path / "task").mkdir()
    (tmp_path / "task" / "prefs_train.jsonl").write_text("{}\n" * 1024)
    # DPO: 1024 pairs / 64 per step = 16 steps; KTO: 2048 rows / 128 per step = 16 steps; 4 snapshots.
    assert _snapshot_every(Path(tmp_path), "dpo") == _snapshot_every(Path(tmp_path), "kto") == 4


def test_each_preference_method_has_its_own_colour_and_title():
    colours = [method_color(m) for m in preference_methods()]
    assert len(set(colours)) == len(colours) and not set(colours) & set(PALETTE)
    assert method_name("kto") == "KTO"
