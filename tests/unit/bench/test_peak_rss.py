"""Peak RSS is each process's own (docs/reliability.md, "second round", class 9): `tether compare` reported one 616 MB for
every method, because a child started by fork/vfork + exec keeps the parent's ru_maxrss."""

from __future__ import annotations

import os
import sys

import pytest

from tether.metrics.memory import own_peak_rss_mb, run_module

PARENT_MB = 600
CHILD = """
import os, signal, sys
held = b"x" * (int(sys.argv[1]) * 2**20)  # written, so resident
if sys.argv[2:] == ["exit3"]:
    sys.exit(3)
if sys.argv[2:] == ["killed"]:
    os.kill(os.getpid(), signal.SIGKILL)
"""

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="VmHWM is Linux's")


@pytest.fixture
def child_env(tmp_path) -> dict:
    (tmp_path / "rss_child.py").write_text(CHILD)
    paths = [str(tmp_path), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}


def test_children_report_their_own_peaks_not_the_parents(child_env):
    big = b"y" * (PARENT_MB * 2**20)  # the parent's high-water mark, above both children's
    del big
    assert own_peak_rss_mb() >= PARENT_MB
    small_code, small = run_module("rss_child", ["20"], env=child_env)
    large_code, large = run_module("rss_child", ["220"], env=child_env)
    assert small_code == large_code == 0
    assert 20 < small < 120, small  # an interpreter and 20 MB; none of the parent's 600 MB
    assert 180 < large - small < 260, (small, large)


def test_exit_code_passes_through_and_a_killed_child_has_no_peak(child_env):
    code, peak = run_module("rss_child", ["5", "exit3"], env=child_env)
    assert code == 3 and peak is not None and peak > 5
    code, peak = run_module("rss_child", ["5", "killed"], env=child_env)
    assert code == -9 and peak is None


def test_bench_reports_its_own_peak(monkeypatch):
    """`tether bench` started by another process (compare, a test runner) reports its own peak."""
    import tether.metrics.memory
    from tether.bench.runner import peak_rss_mb

    monkeypatch.setattr(tether.metrics.memory, "own_peak_rss_mb", lambda: 123.0)
    assert peak_rss_mb() == 123.0


def test_compare_measures_each_method_in_its_own_process(tmp_path):
    """`tether compare` runs each method as a child: its peak is the child's, far below the parent's."""
    from tether.demo.compare import run_method

    big = b"y" * (PARENT_MB * 2**20)
    del big
    result = run_method(["report", str(tmp_path / "none")], tmp_path / "method.log")  # a quick tether command
    assert result["exit_code"] == 2 and "is not a directory" in (tmp_path / "method.log").read_text()
    assert 10 < result["peak_rss_mb"] < PARENT_MB / 2, result
