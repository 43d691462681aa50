"""Bad input under several processes is said once, with exit 2 and no traceback.

- ``tether launch [torchrun options] STAGE ...`` checks the config and data in one process before
  any rank starts, then runs torchrun's launcher: a refused input is one paragraph; an error that
  only the ranks can see (a batch that does not split over them) is printed by one rank, and the
  launcher adds no traceback; a good run ends as under torchrun.
- Plain ``torchrun -m tether.cli``: each machine's local rank 0 alone prints the error.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from tether.cli import main
from tether.runs import MANIFEST

from bad_input_helpers import good_sft, sft_args, write_jsonl

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}


def test_launch_refuses_bad_input_before_any_rank_starts(task, tmp_path, capsys):
    train = write_jsonl(tmp_path / "train.jsonl", good_sft())
    start = time.monotonic()
    code = main(["launch", "--standalone", "--nproc-per-node", "2", *sft_args(task, tmp_path / "out", train, "optim.lrr=1")])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("error:") == 1 and "optim.lrr" in err and "Traceback" not in err
    assert time.monotonic() - start < 20
    assert not (tmp_path / "out").exists()


def test_launch_without_a_stage_is_one_paragraph(capsys):
    assert main(["launch", "--nproc-per-node", "2"]) == 2
    err = capsys.readouterr().err
    assert "needs a stage" in err and "sft" in err


@pytest.mark.slow
def test_launch_rank_error_once_then_a_good_run(task, tmp_path):
    train = write_jsonl(tmp_path / "train.jsonl", good_sft(16))
    cmd = [sys.executable, "-m", "tether.cli", "launch", "--standalone", "--nproc-per-node", "2"]
    bad = subprocess.run([*cmd, *sft_args(task, tmp_path / "bad", train, "optim.batch_size=3")],
                         capture_output=True, text=True, timeout=240, env=ENV)
    assert bad.returncode == 2, bad.stderr
    assert bad.stderr.count("error:") == 1 and "optim.batch_size" in bad.stderr, bad.stderr
    assert "Traceback" not in bad.stderr and "ChildFailedError" not in bad.stderr
    good = subprocess.run([*cmd, *sft_args(task, tmp_path / "good", train)], capture_output=True, text=True,
                          timeout=240, env=ENV)
    assert good.returncode == 0, good.stderr
    assert (tmp_path / "good" / MANIFEST).is_file()


@pytest.mark.slow
def test_plain_torchrun_prints_a_config_error_once(task, tmp_path):
    train = write_jsonl(tmp_path / "train.jsonl", good_sft())
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                           "-m", "tether.cli", *sft_args(task, tmp_path / "out", train, "optim.lrr=1")],
                          capture_output=True, text=True, timeout=240, env=ENV)
    assert done.returncode != 0
    assert done.stderr.count("tether sft: error:") == 1, done.stderr
