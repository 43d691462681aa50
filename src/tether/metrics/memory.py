"""Peak resident memory (RSS) of this process, or of a child command: each its own.

``ru_maxrss`` is not a process's own on Linux: exec keeps it, and a child that ``subprocess``
starts (vfork or fork, then exec) from a parent that once held 600 MB reports at least that,
whatever it used itself (`tether compare` showed one 616 MB for every method). ``VmHWM`` in
``/proc/PID/status`` belongs to the address space, which exec replaces, so it is the process's
own; but it is gone with the process, so a child reads its own at its end and hands it to the
parent through a pipe (:func:`run_module`). Run as ``python -m tether.metrics.memory FD MODULE
ARGS...``, this module is that wrapper.
"""

from __future__ import annotations

import os
import subprocess
import sys

STATUS = "/proc/self/status"


def own_peak_rss_mb() -> float:
    """This process's peak resident memory in MB (2**20 bytes): ``VmHWM``, or ``ru_maxrss`` where
    there is no ``/proc`` (macOS; bytes there, KiB on Linux)."""
    try:
        with open(STATUS, encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024  # "VmHWM:   123456 kB"
    except OSError:
        pass
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 1024


def run_module(module: str, args: list[str], **popen_kwargs) -> tuple[int, float | None]:
    """Run ``python -m module args`` in a child process (``popen_kwargs`` as for
    :class:`subprocess.Popen`: stdout, env, ...); its exit code and its own peak RSS in MB (None
    when it died before it could tell, e.g. killed)."""
    read_end, write_end = os.pipe()
    try:
        proc = subprocess.Popen([sys.executable, "-m", __name__, str(write_end), module, *args],
                                pass_fds=(write_end,), **popen_kwargs)
    except BaseException:
        os.close(read_end)
        raise
    finally:
        os.close(write_end)
    code = proc.wait()
    # The child has exited, so what it wrote is in the pipe; a process it forked may still hold
    # the write end open, so the read must not wait for end-of-file.
    os.set_blocking(read_end, False)
    try:
        text = os.read(read_end, 64).decode("ascii", "replace")
    except BlockingIOError:
        text = ""
    finally:
        os.close(read_end)
    try:
        return code, float(text)
    except ValueError:
        return code, None


def _main() -> None:
    """``FD MODULE ARGS...``: run MODULE as ``python -m MODULE ARGS...`` would, then write this
    process's peak RSS (MB) to the file descriptor FD, however the module ends."""
    import runpy

    fd, module, *args = sys.argv[1:]
    fd = int(fd)
    os.set_inheritable(fd, False)  # the module's own child processes do not get it
    sys.argv = [module, *args]
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    finally:
        os.write(fd, f"{own_peak_rss_mb():.3f}".encode("ascii"))
        os.close(fd)


if __name__ == "__main__":
    _main()
