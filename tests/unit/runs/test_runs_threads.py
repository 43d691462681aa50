"""`run.threads=0` picks threads from the free cores (docs/reliability.md, first new-user trial,
class 7): torch's default of one thread per core runs 10-20x slower beside one busy process on a
2-core machine."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
import torch

from tether.runs import busy_cores, set_threads, threads_for


@pytest.mark.parametrize("available,busy,default,expected", [
    (2, 0.0, 2, 2),     # idle machine: torch's default
    (2, 1.0, 2, 1),     # one busy neighbour on 2 cores: 1 thread
    (2, 0.4, 2, 2),     # a neighbour at 0.4 of a core: that core still counts as free
    (2, 0.8, 2, 1),     # 0.8 of a core busy counts as a busy core
    (2, 2.0, 2, 1),     # everything busy: still 1
    (8, 3.0, 8, 5),     # 5 free cores
    (8, 0.0, 4, 4),     # never more than torch's default
    (4, None, 4, 4),    # unknown: torch's default
])
def test_threads_for_worked_cases(available, busy, default, expected):
    assert threads_for(available, busy, default) == expected


def test_busy_cores_sees_a_busy_neighbour():
    if not os.path.exists("/proc/stat"):
        pytest.skip("no /proc/stat on this platform")
    idle = busy_cores(0.5)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    if idle is not None and idle > cores - 1:
        pytest.skip(f"{idle:.1f} of {cores} cores already busy: no free core for the spinner to fill")
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)
        busy = busy_cores(0.5)
    finally:
        spinner.kill()
        spinner.wait()
    assert busy is not None and idle is not None
    assert busy >= idle + 0.6, (idle, busy)  # one core kept busy by the spinner


def test_set_threads_leaves_out_busy_cores():
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    if cores < 2 or not os.path.exists("/proc/stat"):
        pytest.skip("needs 2+ cores and /proc/stat")
    before = torch.get_num_threads()
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)
        torch.set_num_threads(cores)
        chosen, why = set_threads(0)
        assert chosen <= cores - 1 and torch.get_num_threads() == chosen
        assert "run.threads=0" in why and "busy" in why
        assert set_threads(1) == (1, "run.threads=1")
    finally:
        spinner.kill()
        spinner.wait()
        torch.set_num_threads(before)
