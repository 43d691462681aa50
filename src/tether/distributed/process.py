"""The process group of a data-parallel run: started from ``torchrun``'s environment, torn down
at the end, and a collective that fails because a rank died turned into one clear error.

``torchrun`` sets ``WORLD_SIZE``, ``RANK``, ``LOCAL_RANK`` and the rendezvous address; a process
started without it (or with ``WORLD_SIZE=1``) is a one-process run and nothing here happens.
The backend follows the device: NCCL for CUDA, gloo for the CPU.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
from dataclasses import dataclass, field
from datetime import timedelta

import torch

from tether.common.errors import ConfigError, TrainingError, one_line

#: (hostname, pid) of every rank, filled at start: which ranks are gone when a collective fails.
_PEERS: list[tuple[str, int]] = []


def launched_by_torchrun() -> bool:
    """This process is one of several started by torchrun (``WORLD_SIZE`` > 1)."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def local_rank() -> int:
    return int(os.environ.get("LOCAL_RANK", "0"))


def backend_for(device: str) -> str:
    """``nccl`` when the run's device is CUDA (``auto`` with a GPU, ``cuda``, ``cuda:N``), else ``gloo``."""
    cuda = device.startswith("cuda") or (device == "auto" and torch.cuda.is_available())
    return "nccl" if cuda else "gloo"


def check_backend(backend: str, device: str) -> None:
    """``distributed.backend=nccl`` needs CUDA GPUs: refused before the process group is created,
    where torch would fail inside ``torch.cuda.set_device`` instead. (A CPU run.device with nccl is
    refused with the config, however the run is launched.)"""
    if backend != "nccl":
        return
    if not torch.cuda.is_available():
        raise ConfigError("Config key 'distributed.backend' = 'nccl': NCCL needs CUDA GPUs, and this machine has none "
                          "that torch can use; gloo is the CPU backend (distributed.backend=gloo, or auto).")


def _exited(pid: int) -> bool:
    """The process ``pid`` has exited (gone, or a zombie its launcher has not reaped yet)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True
    except OSError:  # no /proc (not Linux): ask the kernel whether the pid exists
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            pass
        return False


def lost_ranks(wait_s: float = 0.0) -> list[int]:
    """Ranks on this host whose process has exited (ranks on other hosts cannot be checked here).
    ``wait_s``: look again for that long while none has (a killed process's sockets close while
    it is still being torn down, so a collective can fail a moment before the process is gone)."""
    import time

    host = socket.gethostname()
    deadline = time.monotonic() + wait_s
    while True:
        gone = [r for r, (peer_host, pid) in enumerate(_PEERS)
                if peer_host == host and pid != os.getpid() and _exited(pid)]
        if gone or time.monotonic() >= deadline:
            return gone
        time.sleep(0.05)


def exited(gone: list[int], world: int) -> str:
    """'rank 1 of 2 exited' / 'ranks 1, 3 of 4 exited'."""
    return f"rank{'s' if len(gone) > 1 else ''} {', '.join(map(str, gone))} of {world} exited"


def describe_loss(rank: int, world: int, cause: BaseException | None = None) -> str:
    """One paragraph: which rank is lost (when it can be told) and what to do."""
    gone = lost_ranks(wait_s=3.0)
    if gone:
        who = exited(gone, world)
    else:
        remote = sorted({h for h, _ in _PEERS} - {socket.gethostname()})
        who = (f"another rank stopped or is unreachable (ranks on {', '.join(remote)} cannot be checked from here)"
               if remote else "another rank stopped or a collective timed out (distributed.timeout_s)")
    why = f" ({type(cause).__name__}: {one_line(str(cause).splitlines()[0], 200)})" if cause is not None and str(cause) else ""
    return (f"Rank {rank} stops: {who} during a collective{why}. The last complete checkpoint in run.out stays "
            "valid; continue the run with the same torchrun command and --resume RUN_DIR.")


@dataclass
class DistributedSession:
    """The process group of one stage: ``with DistributedSession(cfg): run the stage``.

    Starts it when torchrun launched several processes (and none is running yet), records every
    rank's host and pid, and at the end destroys what it started. A collective that fails (a
    rank was killed, the network went away, ``distributed.timeout_s`` passed) comes out as one
    :class:`~tether.common.errors.TrainingError` naming the lost rank when it can be told.
    """

    device: str = "auto"
    timeout_s: float = 600.0
    backend: str = "auto"
    started: bool = field(default=False, init=False)

    def __enter__(self) -> "DistributedSession":
        dist = torch.distributed
        if launched_by_torchrun() and not dist.is_initialized():
            backend = backend_for(self.device) if self.backend == "auto" else self.backend
            check_backend(backend, self.device)
            if backend == "nccl":
                torch.cuda.set_device(local_rank())
            dist.init_process_group(backend, timeout=timedelta(seconds=self.timeout_s))
            self.started = True
            _PEERS[:] = all_peers()
            signal.signal(signal.SIGTERM, _on_sigterm)
        return self

    def __exit__(self, kind, error, tb) -> bool:
        dist = torch.distributed
        if error is not None and dist.is_initialized() and _is_collective_failure(error):
            rank, world = dist.get_rank(), dist.get_world_size()
            self._stop()
            raise TrainingError(describe_loss(rank, world, error)) from error
        self._stop(finished=error is None)
        return False

    def _stop(self, finished: bool = False) -> None:
        if self.started and torch.distributed.is_initialized():
            try:
                if finished:  # no rank tears the group down while another is still in a collective
                    torch.distributed.barrier()
                torch.distributed.destroy_process_group()
            except Exception:  # a broken group may not tear down cleanly; the process is ending
                pass
            self.started = False


def all_peers() -> list[tuple[str, int]]:
    out: list = [None] * torch.distributed.get_world_size()
    torch.distributed.all_gather_object(out, (socket.gethostname(), os.getpid()))
    return [tuple(p) for p in out]


def _is_collective_failure(error: BaseException) -> bool:
    dist = torch.distributed
    kinds = tuple(k for k in (getattr(dist, "DistError", None), getattr(dist, "DistBackendError", None),
                              getattr(dist, "DistNetworkError", None)) if k is not None)
    if isinstance(error, kinds):
        return True
    text = str(error)
    return isinstance(error, RuntimeError) and any(
        s in text for s in ("Connection closed by peer", "Connection reset by peer", "Timed out", "timed out",
                            "[gloo", "Gloo", "NCCL", "Broken pipe"))


def _on_sigterm(signum, frame) -> None:
    """torchrun stops the other workers when one fails: say which rank failed, then exit."""
    dist = torch.distributed
    rank = dist.get_rank() if dist.is_initialized() else int(os.environ.get("RANK", "0"))
    world = dist.get_world_size() if dist.is_initialized() else int(os.environ.get("WORLD_SIZE", "1"))
    gone = lost_ranks(wait_s=1.0)
    who = (exited(gone, world) if gone else "the launcher stopped the run (another rank failed; torchrun's report names it)")
    print(f"tether: rank {rank} stops: {who}. The last complete checkpoint stays valid; continue with the same "
          "torchrun command and --resume RUN_DIR.", file=sys.stderr, flush=True)
    os._exit(143)


def init_distributed(device: str, distributed=None) -> DistributedSession:
    """The session of a stage on ``device`` (``run.device``) with its ``distributed`` block (None: a
    stage without one gets the defaults: a 600 s timeout, the backend the device implies)."""
    if distributed is None:
        return DistributedSession(device=device)
    return DistributedSession(device=device, timeout_s=distributed.timeout_s, backend=distributed.backend)
