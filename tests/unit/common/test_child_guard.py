"""The child guard with plain processes: a parent that dies by SIGKILL, SIGTERM or ``os._exit``
takes its descendants (children, grandchildren, forked and spawned ones) with it within a few
seconds; a parent that exits normally leaves them alone; a reused pid is never signalled."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from pathlib import Path

from tether.common import child_guard

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the guard reads /proc")

# A guarded parent: starts a child that starts a grandchild (both sleep), a forked and a
# spawned multiprocessing child, and a scratch directory for the watcher to remove; prints the
# pids and the directory as JSON, then does what argv[1] says.
PARENT = textwrap.dedent("""
    import json, multiprocessing, os, subprocess, sys, tempfile, time
    from tether.common.child_guard import guard_children, remove_on_death

    def nap():
        time.sleep(120)

    if __name__ == "__main__":
        assert guard_children() and guard_children()  # the second call reuses the watcher
        inner = ("import subprocess, sys, time; p = subprocess.Popen(['sleep', '120']); print(p.pid, flush=True); "
                 "time.sleep(120)")
        child = subprocess.Popen([sys.executable, "-c", inner], stdout=subprocess.PIPE, text=True)
        grandchild = int(child.stdout.readline())
        procs = [multiprocessing.get_context(m).Process(target=nap, daemon=True) for m in ("fork", "spawn")]
        for p in procs:
            p.start()
        scratch = tempfile.mkdtemp(prefix="tether-guard-test-")
        remove_on_death(scratch)
        print(json.dumps({"pids": [child.pid, grandchild, *[p.pid for p in procs]], "scratch": scratch}), flush=True)
        time.sleep(1.0)  # the watcher has seen them (it looks every 0.25 s)
        how = sys.argv[1]
        if how == "exit":
            sys.exit(0)  # a normal exit: the children are left running
        if how == "_exit":
            os._exit(3)
        time.sleep(120)  # killed by the test
""")


def start_parent(how: str, tmp_path):
    script = tmp_path / "parent.py"
    script.write_text(PARENT)
    proc = subprocess.Popen([sys.executable, str(script), how], stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    assert line, "the parent printed nothing"
    said = json.loads(line)
    starts = {pid: child_guard.proc_stat(pid)[1] for pid in said["pids"]}
    assert all(child_guard.alive(p, s) for p, s in starts.items())
    if how not in ("exit", "_exit"):
        time.sleep(1.2)  # past the parent's own pause: the watcher has seen every child
    return proc, starts, Path(said["scratch"])


def wait_gone(starts: dict[int, int], seconds: float) -> list[int]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        left = [pid for pid, start in starts.items() if child_guard.alive(pid, start)]
        if not left:
            return []
        time.sleep(0.1)
    return left


def kill_all(starts: dict[int, int]) -> None:
    for pid, start in starts.items():
        if child_guard.alive(pid, start):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("how", ["sigkill", "sigterm", "_exit"])
def test_a_parent_that_dies_takes_its_descendants(how, tmp_path):
    proc, starts, scratch = start_parent(how, tmp_path)
    try:
        if how == "sigkill":
            proc.kill()
        elif how == "sigterm":
            proc.terminate()  # Python's default: die at once, no atexit
        proc.wait(10)
        left = wait_gone(starts, 8)
        assert not left, f"still alive after the parent died ({how}): {left}"
        deadline = time.monotonic() + 3  # removed once the processes are gone
        while scratch.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not scratch.exists()
    finally:
        kill_all(starts)
        proc.kill()


def test_a_normal_exit_releases_the_children(tmp_path):
    proc, starts, scratch = start_parent("exit", tmp_path)
    try:
        assert proc.wait(10) == 0
        time.sleep(1.5)  # the watcher has had time to act, had it been told to
        alive = [pid for pid, start in starts.items() if child_guard.alive(pid, start)]
        # multiprocessing itself terminates its daemonic children at exit; the others live on.
        assert set(list(starts)[:2]) <= set(alive)
        assert scratch.is_dir()  # its owner's to remove
    finally:
        kill_all(starts)
        scratch.rmdir()


def test_no_watcher_is_left_behind(tmp_path):
    """The watcher exits with its parent, whichever way the parent ends."""
    for how in ("exit", "sigkill"):
        proc, starts, scratch = start_parent(how, tmp_path)
        try:
            watcher = [p for p in child_guard.children(proc.pid) if open(f"/proc/{p}/comm").read().strip()
                       == "tether-guard"]
            assert len(watcher) == 1, "one watcher per process, however often it is armed"
            w_start = child_guard.proc_stat(watcher[0])[1]
            if how == "sigkill":
                proc.kill()
            proc.wait(10)
            assert not wait_gone({watcher[0]: w_start}, 8)
        finally:
            kill_all(starts)
            proc.kill()
            if scratch.exists():
                scratch.rmdir()


def test_stop_never_signals_a_reused_pid():
    """A remembered (pid, start time) whose pid now belongs to another process is left alone."""
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        start = child_guard.proc_stat(sleeper.pid)[1]
        child_guard.stop({sleeper.pid: start + 1}, grace=0.2)  # another process's start time
        assert sleeper.poll() is None and child_guard.alive(sleeper.pid, start)
        child_guard.stop({sleeper.pid: start}, grace=0.2)
        assert sleeper.wait(5) == -signal.SIGTERM
    finally:
        sleeper.kill()


def test_proc_stat_reads_names_with_spaces_and_parentheses(tmp_path):
    """Field 2 of /proc/PID/stat is the process name, which may hold ') (': the fields after it
    are found from the last ')'."""
    odd = tmp_path / "a) b (c"
    odd.symlink_to("/bin/sleep")
    proc = subprocess.Popen([str(odd), "30"])
    try:
        ppid, start, state = child_guard.proc_stat(proc.pid)
        assert ppid == os.getpid() and start > 0 and state in "RSD"
    finally:
        proc.kill()
        proc.wait()


def test_descendants_without_the_kernels_children_files(monkeypatch):
    """Kernels without /proc/PID/task/TID/children: every process's parent pid gives the same tree."""
    inner = "import subprocess, time; subprocess.Popen(['sleep', '30']); time.sleep(30)"
    child = subprocess.Popen([sys.executable, "-c", inner])
    try:
        deadline = time.monotonic() + 10
        while len(child_guard.descendants([child.pid])) < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        fast = child_guard.descendants([os.getpid()])
        monkeypatch.setattr(child_guard, "_children_files", lambda: False)
        assert child_guard.descendants([os.getpid()]) == fast and child.pid in fast and len(fast) >= 2
    finally:
        for pid in child_guard.descendants([child.pid]):
            os.kill(pid, signal.SIGKILL)
        child.kill()
        child.wait()
