"""Child processes die with the process that started them, however it dies.

vLLM runs its engine core and workers as processes of their own. When the process that started
them ends without running its shutdown (SIGKILL, the OOM killer, ``os._exit``), nothing in it can
stop them: reparented to PID 1 they keep their memory (GBs of RAM, or GPU memory) until someone
finds them. :func:`guard_children` starts, once per process, a small watcher process that
remembers every descendant of this process (pid and start time, so a reused pid is never
touched) and, when this process is gone without having said ``release`` (which it says at a
normal exit), sends SIGTERM to each of them still alive, then SIGKILL to any left after
:data:`GRACE_S`.

Why a watcher process rather than ``prctl(PR_SET_PDEATHSIG)``: that signal is set by the child
itself after fork (vLLM's spawned processes run no at-fork hook of ours), fires when the parent
*thread* that started it exits rather than the process, and reaches only direct children, not
the workers an engine core starts in turn. The watcher needs nothing from the processes it
guards. Linux only (it reads ``/proc``); elsewhere :func:`guard_children` does nothing.

The watcher is ``python -m tether.common.child_guard PID``: it imports only the standard library, ignores
SIGINT/SIGHUP/SIGTERM (a Ctrl-C or a signal to the whole process group reaches it too, and it
must outlive its parent to do its job), and exits as soon as its parent is gone.
"""

from __future__ import annotations

import atexit
import os
import select
import shutil
import signal
import subprocess
import sys
import threading
import time

POLL_S = 0.25  # how often the watcher looks for new descendants and for its parent
GRACE_S = 2.0  # between SIGTERM (vLLM shuts its workers down on it) and SIGKILL
READY_TIMEOUT_S = 30.0  # the watcher's first look, on a busy machine
RELEASE = b"release"  # the parent ends normally
REMOVE = b"remove "  # + a path: a scratch directory of the parent's, removed if it dies

# Process-wide by nature: one watcher process per parent process, shared by every run in it.
_lock = threading.Lock()
_watcher: subprocess.Popen | None = None
_owner: int | None = None  # the pid whose watcher _watcher is (a forked child has none)


# -- in the guarded process --------------------------------------------------------------------


def guard_children() -> bool:
    """Start this process's watcher unless it runs already; True once it watches. Every process
    this one starts after the call (and their descendants) is stopped when this one dies without
    a normal exit."""
    global _watcher, _owner
    if not sys.platform.startswith("linux"):
        return False
    with _lock:
        if _owner == os.getpid():
            return True
        watcher = subprocess.Popen(
            [sys.executable, "-m", "tether.common.child_guard", str(os.getpid())],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, close_fds=True)
        ready = _wait_ready(watcher)
        _watcher, _owner = watcher, os.getpid()
    atexit.register(release)
    if not ready:
        import logging

        logging.getLogger(__name__).warning(
            "tether: the watcher that stops this process's children if it is killed did not start "
            "(`%s -m tether.common.child_guard`); a SIGKILL would leave them running.", sys.executable)
    return ready


def remove_on_death(path: str) -> None:
    """Have the watcher remove ``path`` (a scratch directory) if this process dies without a
    normal exit; at a normal exit its owner removes it. Does nothing without a watcher."""
    with _lock:
        if _watcher is None or _owner != os.getpid():
            return
        try:
            _watcher.stdin.write(REMOVE + os.fsencode(path) + b"\n")
            _watcher.stdin.flush()
        except OSError:
            pass


def release() -> None:
    """Tell the watcher this process ends normally (its children are its own business), and let
    it go. Runs at interpreter exit; safe to call twice."""
    global _watcher, _owner
    with _lock:
        watcher, mine = _watcher, _owner == os.getpid()
        _watcher = _owner = None
    if watcher is None or not mine:
        return
    try:
        watcher.stdin.write(RELEASE + b"\n")
        watcher.stdin.close()
    except OSError:  # the watcher is gone already
        pass
    try:
        watcher.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


def _wait_ready(watcher: subprocess.Popen) -> bool:
    """Wait for the watcher's ``ready`` line (its first look at this process's children)."""
    ready, _, _ = select.select([watcher.stdout], [], [], READY_TIMEOUT_S)
    line = watcher.stdout.readline() if ready else b""
    watcher.stdout.close()  # the watcher writes nothing more
    return line == b"ready\n"


def _forget_after_fork() -> None:
    """A forked child is not the guarded process: drop the pipe it inherited (held open, it would
    hide its parent's death from the watcher); it may start a watcher of its own."""
    global _watcher, _owner
    watcher, _watcher, _owner = _watcher, None, None
    if watcher is not None:
        try:
            watcher.stdin.close()  # nothing is buffered: closing writes nothing
        except OSError:
            pass


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)


# -- reading /proc -------------------------------------------------------------------------------


def proc_stat(pid: int) -> tuple[int, int, str] | None:
    """(parent pid, start time in clock ticks since boot, state letter) of ``pid``, or None when
    there is no such process. ``/proc/PID/stat`` field 2 (the name) may hold spaces and
    parentheses: the fields after it start after the last ')'."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    fields = data[data.rindex(b")") + 2:].split()  # fields 3 (state), 4 (ppid), ..., 22 (starttime)
    return int(fields[1]), int(fields[19]), fields[0].decode()


def alive(pid: int, start: int) -> bool:
    """``pid`` is still the process that started at ``start`` and has not exited (zombies have)."""
    stat = proc_stat(pid)
    return stat is not None and stat[1] == start and stat[2] not in "ZXx"


def _children_files() -> bool:
    """The kernel lists each thread's children in ``/proc/PID/task/TID/children``
    (CONFIG_PROC_CHILDREN, on in common kernels)."""
    return os.path.exists(f"/proc/self/task/{os.getpid()}/children")


def children(pid: int, parents: dict[int, int] | None = None) -> list[int]:
    """Direct children of ``pid``: from its threads' ``children`` files (cheap however many
    processes the machine runs), or from ``parents`` (pid -> parent pid of every process)."""
    if parents is not None:
        return [p for p, ppid in parents.items() if ppid == pid]
    found = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as fh:
                found += [int(p) for p in fh.read().split()]
        except OSError:  # the thread ended meanwhile
            continue
    return found


def _all_parents() -> dict[int, int]:
    parents = {}
    for name in os.listdir("/proc"):
        if name.isdigit() and (stat := proc_stat(int(name))) is not None:
            parents[int(name)] = stat[0]
    return parents


def descendants(roots: list[int], skip: int | None = None) -> dict[int, int]:
    """Every live descendant of ``roots`` that is not a root: pid -> start time. ``skip``: a pid
    left out with its own descendants (the watcher itself)."""
    parents = None if _children_files() else _all_parents()
    found, seen, todo = {}, set(roots), list(roots)
    while todo:
        for child in children(todo.pop(), parents):
            if child == skip or child in seen:
                continue
            seen.add(child)
            stat = proc_stat(child)
            if stat is not None and stat[2] not in "ZXx":
                found[child] = stat[1]
                todo.append(child)
    return found


# -- the watcher process -------------------------------------------------------------------------


def watch(parent: int, stdin_fd: int = 0, on_ready=None) -> bool:
    """Remember ``parent``'s descendants until the parent is gone; True if it said ``release``
    first (then nothing is stopped), else every remembered process still alive is stopped and
    the paths it named are removed."""
    me = os.getpid()
    watched = descendants([parent], skip=me)
    if on_ready is not None:
        on_ready()
    said = _Said(stdin_fd)
    while not said.released:
        ready, _, _ = select.select([stdin_fd], [], [], POLL_S)
        if ready and not said.read():  # every writer closed its end: the parent is gone
            break
        if os.getppid() != parent:  # reparented: the parent has exited (the pid cannot be reused)
            said.drain()  # a release written just before the exit is still in the pipe
            break
        _refresh(watched, parent, me)
    if said.released:
        return True
    stop(watched, skip=me)
    for path in said.remove:
        shutil.rmtree(path, ignore_errors=True)
    return False


class _Said:
    """What the parent wrote to the watcher, line by line."""

    def __init__(self, fd: int):
        self.fd, self.buffer, self.released, self.remove = fd, b"", False, []

    def read(self) -> bool:
        """Read what is there; False at end of file."""
        chunk = os.read(self.fd, 4096)
        self.buffer += chunk
        *lines, self.buffer = self.buffer.split(b"\n")
        for line in lines:
            if line == RELEASE:
                self.released = True
            elif line.startswith(REMOVE):
                self.remove.append(os.fsdecode(line[len(REMOVE):]))
        return bool(chunk)

    def drain(self) -> None:
        while not self.released and select.select([self.fd], [], [], 0)[0] and self.read():
            pass


def _refresh(watched: dict[int, int], parent: int, me: int) -> None:
    """Forget the processes that ended; add the parent's new descendants and those of processes
    already watched (an orphaned worker's own children)."""
    for pid, start in list(watched.items()):
        if not alive(pid, start):
            del watched[pid]
    for pid, start in descendants([parent, *watched], skip=me).items():
        watched.setdefault(pid, start)


def stop(watched: dict[int, int], skip: int | None = None, grace: float = GRACE_S) -> list[int]:
    """SIGTERM every watched process still alive and the descendants they have now, wait up to
    ``grace`` seconds, then SIGKILL the rest. Returns the pids signalled."""
    targets = {pid: start for pid, start in watched.items() if alive(pid, start)}
    targets.update(descendants(list(targets), skip=skip))
    _signal(targets, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(alive(p, s) for p, s in targets.items()):
        time.sleep(0.05)
        for pid, start in descendants([p for p, s in targets.items() if alive(p, s)], skip=skip).items():
            targets.setdefault(pid, start)
    _signal({p: s for p, s in targets.items() if alive(p, s)}, signal.SIGKILL)
    return sorted(targets)


def _signal(targets: dict[int, int], sig: int) -> None:
    for pid, start in targets.items():
        if alive(pid, start):  # checked right before: never a reused pid
            try:
                os.kill(pid, sig)
            except OSError:
                pass


def main(argv: list[str]) -> int:
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    try:
        with open("/proc/self/comm", "w") as fh:  # `ps` shows what it is
            fh.write("tether-guard")
    except OSError:
        pass

    def ready():
        try:
            os.write(1, b"ready\n")
        except OSError:
            pass

    watch(int(argv[0]), on_ready=ready)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
