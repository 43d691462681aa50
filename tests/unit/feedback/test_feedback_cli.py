"""`tether pairs` and `tether label` refuse bad arguments in one paragraph (exit 2), before any model loads."""

from __future__ import annotations

import pytest

from tether.cli import main


@pytest.mark.parametrize("argv, needle", [
    (["pairs", "--policy", "m", "--prompts", "p", "--out", "o", "--strategy", "checkpoints"], "--policy-b"),
    (["pairs", "--policy", "m", "--prompts", "p", "--out", "o", "--policy-b", "n"], "for --strategy checkpoints"),
    (["pairs", "--policy", "m", "--prompts", "p", "--out", "o", "--strategy", "best_worst"], "--reward-model"),
    (["pairs", "--policy", "m", "--prompts", "p", "--out", "o", "--strategy", "best_worst", "--reward-model", "r",
      "--n", "1"], "--n must be at least 2"),
    (["pairs", "--policy", "m", "--prompts", "p", "--out", "o", "--temperature", "0"], "--temperature"),
    (["pairs", "--policy", "m", "--prompts", "p", "--out", "o", "--judge-url", "http://x", "--judge-model", "j"],
     "give --labels"),
    (["pairs", "--policy", "m", "--prompts", "p", "--out", "o", "--labels", "l.jsonl"], "only then"),
    (["label", "--pairs", "missing.jsonl", "--out", "o", "--overlap", "0"], "--overlap"),
    (["label", "--pairs", "missing.jsonl", "--out", "o", "--export", "x"], "add --stats"),
    (["label", "--pairs", "missing.jsonl", "--out", "o"], "does not exist"),
    (["iterate", "--demo", "--from", "nowhere", "--rounds", "0"], "--rounds"),
    (["iterate", "--demo", "--from", "nowhere"], "task/, sft/ and rm/"),
])
def test_bad_arguments(argv, needle, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err
