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


@pytest.mark.parametrize("value", ["0", "-1", "abc", "1.5"])
def test_launch_refuses_a_process_count_that_is_not_positive_in_one_paragraph(value, tmp_path, capsys):
    for form in (["--nproc-per-node", value], [f"--nproc_per_node={value}"]):
        code = main(["launch", "--standalone", *form, "sft", f"run.out={tmp_path / 'out'}"])
        err = capsys.readouterr().err
        assert code == 2, err
        assert err.startswith(f"tether launch: error: --nproc-per-node {value}: expected a whole number") and \
            "at least 1" in err, err
        assert err.count("error:") == 1 and err.strip().count("\n") == 0 and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_launch_refuses_no_machines_and_an_absent_device_kind(capsys):
    assert main(["launch", "--nnodes", "0", "--nproc-per-node", "1", "sft"]) == 2
    assert "--nnodes 0: expected a number of machines" in capsys.readouterr().err
    import torch

    if not torch.cuda.is_available():
        assert main(["launch", "--nproc-per-node", "gpu", "sft"]) == 2
        err = capsys.readouterr().err
        assert "--nproc-per-node gpu: Cuda is not available" in err and "Traceback" not in err


def _failure(exitcode: int, local_rank: int = 1, pid: int = 4242):
    from torch.distributed.elastic.multiprocessing.errors import ProcessFailure

    return ProcessFailure(local_rank=local_rank, pid=pid, exitcode=exitcode, error_file="/nonexistent/error.json")


@pytest.mark.parametrize("exitcode, status, needle", [(-9, 137, "was killed by signal 9 (SIGKILL)"),
                                                      (-15, 143, "was killed by signal 15 (SIGTERM)"),
                                                      (3, 3, "exited with code 3"), (300, 1, "exited with code 300")])
def test_the_launch_report_of_a_failed_rank_uses_what_torchrun_records(exitcode, status, needle, capsys):
    """ProcessFailure has no host name: the report names the rank, its local rank and pid, and how it ended."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    from tether.commands.launch import report_failure

    err = ChildFailedError("tether.cli", {3: _failure(exitcode)})
    assert report_failure(err) == status
    said = capsys.readouterr().err
    assert said.startswith("tether launch: rank 3 (local rank 1, pid 4242) ") and needle in said, said
    assert f"Exit status {status}." in said and said.strip().count("\n") == 0


def test_a_rank_that_printed_tethers_error_is_not_reported_again(capsys):
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    from tether.commands.launch import report_failure

    two = ChildFailedError("tether.cli", {0: _failure(2, 0, 11), 1: _failure(-9, 1, 12)})
    first, _ = two.get_first_failure()
    assert report_failure(two) == (2 if first == 0 else 137)
    if first == 0:
        assert capsys.readouterr().err == ""


#: A plugin (TETHER_PLUGINS) that the launcher loads harmlessly and each rank loads first: local
#: rank 1 ends as the test asks, local rank 0 waits to be stopped by torchrun.
RANK_ENDER = """\
import os, signal, time
if "LOCAL_RANK" in os.environ:
    if os.environ["LOCAL_RANK"] == "1":
        how = os.environ["END_RANK_WITH"]
        if how == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        os._exit(int(how))
    time.sleep(120)
"""


@pytest.mark.slow
@pytest.mark.parametrize("how, status, needle", [("kill", 137, "was killed by signal 9 (SIGKILL)"),
                                                 ("5", 5, "exited with code 5")])
def test_launch_reports_a_killed_rank_in_one_paragraph_with_its_exit_status(how, status, needle, task, tmp_path):
    plugin = tmp_path / "rank_ender_plugin.py"
    plugin.write_text(RANK_ENDER)
    train = write_jsonl(tmp_path / "train.jsonl", good_sft())
    env = {**ENV, "TETHER_PLUGINS": str(plugin), "END_RANK_WITH": how}
    done = subprocess.run([sys.executable, "-m", "tether.cli", "launch", "--standalone", "--nproc-per-node", "2",
                           *sft_args(task, tmp_path / "out", train)], capture_output=True, text=True, timeout=240,
                          env=env)
    assert done.returncode == status, done.stderr
    assert "Traceback" not in done.stderr and "AttributeError" not in done.stderr, done.stderr
    report = [line for line in done.stderr.splitlines() if line.startswith("tether launch:")]
    assert len(report) == 1 and report[0].startswith("tether launch: rank 1 (local rank 1, pid ") and \
        needle in report[0] and f"Exit status {status}." in report[0], done.stderr
