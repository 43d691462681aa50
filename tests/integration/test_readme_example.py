"""The README's Python example runs as written: its code block, executed from a fresh directory
holding the repository's configs/, trains SFT, the reward model and PPO on the demo task."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def readme_example() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    match = re.search(r"<!-- python-example: start -->\n```python\n(.*?)```\n<!-- python-example: end -->", text, re.S)
    assert match, "README.md has no python example between its markers"
    return match.group(1)


def test_the_readme_python_example_runs_as_written(tmp_path):
    (tmp_path / "configs").symlink_to(ROOT / "configs")
    (tmp_path / "example.py").write_text(readme_example(), encoding="utf-8")
    proc = subprocess.run([sys.executable, "example.py"], cwd=tmp_path, capture_output=True, text=True, timeout=900,
                          env={**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 0, proc.stderr[-4000:]
    lines = proc.stdout.strip().splitlines()
    sft_loss = float(re.search(r"SFT held-out loss ([\d.]+)", proc.stdout).group(1))
    accuracy = float(re.search(r"RM held-out accuracy ([\d.]+)", proc.stdout).group(1))
    assert sft_loss < 2.0 and accuracy > 0.6  # it learned: the untrained model starts at ln(vocab) ~ 5.9
    assert re.search(r"PPO held-out gold score: [+-][\d.]+ -> [+-][\d.]+, KL [\d.]+", proc.stdout)
    assert lines[-1].startswith("Unknown config key 'rl.clipp'. Did you mean 'rl.clip'?")  # as the command prints
    for stage in ("sft", "rm", "ppo"):
        assert (tmp_path / "runs" / "notebook" / stage / "tether_checkpoint.json").is_file()
        assert (tmp_path / "runs" / "notebook" / stage / "README.md").is_file()
    print(proc.stdout)
