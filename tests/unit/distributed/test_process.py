"""The process group's helpers: the backend for a device, whether torchrun launched us, which
local ranks have exited (gone or zombie), and the message a lost rank produces."""

from __future__ import annotations

import os
import socket
import subprocess
import time

import pytest
import torch

from tether.distributed import process
from tether.distributed.process import (
    DistributedSession,
    _exited,
    _is_collective_failure,
    backend_for,
    describe_loss,
    launched_by_torchrun,
    lost_ranks,
)


# -- backend and launch ----------------------------------------------------------------------------


@pytest.mark.parametrize("device, backend", [("cpu", "gloo"), ("cuda", "nccl"), ("cuda:1", "nccl"), ("mps", "gloo")])
def test_backend_for_a_device(device, backend):
    assert backend_for(device) == backend


def test_backend_for_auto_follows_cuda(monkeypatch):
    assert not torch.cuda.is_available()  # this machine: CPU only
    assert backend_for("auto") == "gloo"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert backend_for("auto") == "nccl"
    assert backend_for("cpu") == "gloo"


@pytest.mark.parametrize("world, launched", [("2", True), ("8", True), ("1", False)])
def test_launched_by_torchrun_reads_world_size(monkeypatch, world, launched):
    monkeypatch.setenv("WORLD_SIZE", world)
    assert launched_by_torchrun() is launched


def test_not_launched_without_world_size(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert launched_by_torchrun() is False


def test_session_in_one_process_starts_nothing(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    with DistributedSession(device="cpu") as session:
        assert not torch.distributed.is_initialized()
    assert session.started is False
    with pytest.raises(ValueError, match="not a collective"):  # errors pass through unchanged
        with DistributedSession(device="cpu"):
            raise ValueError("not a collective")


# -- which ranks are gone --------------------------------------------------------------------------


@pytest.fixture
def zombie():
    """The pid of a child that has exited and has not been reaped (a zombie)."""
    child = subprocess.Popen(["true"])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # no wait()/poll(): that would reap it
        time.sleep(0.1)
        with open(f"/proc/{child.pid}/stat", encoding="utf-8") as f:
            if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                break
    yield child.pid
    child.wait()


def test_exited_on_this_process_is_false():
    assert _exited(os.getpid()) is False


def test_exited_on_a_reaped_process_is_true():
    child = subprocess.Popen(["true"])
    child.wait()
    assert _exited(child.pid) is True


def test_exited_on_a_zombie_is_true(zombie):
    assert _exited(zombie) is True


def test_exited_on_a_running_child_is_false():
    child = subprocess.Popen(["sleep", "5"])
    try:
        assert _exited(child.pid) is False
    finally:
        child.kill()
        child.wait()


def test_lost_ranks_names_the_zombie_rank(monkeypatch, zombie):
    host = socket.gethostname()
    monkeypatch.setattr(process, "_PEERS", [(host, os.getpid()), (host, zombie)])
    assert lost_ranks() == [1]


def test_lost_ranks_skips_this_process_and_other_hosts(monkeypatch, zombie):
    host = socket.gethostname()
    # rank 0: another host (cannot be checked), rank 1: this process, rank 2: a zombie here.
    monkeypatch.setattr(process, "_PEERS", [("elsewhere-host", zombie), (host, os.getpid()), (host, zombie)])
    assert lost_ranks() == [2]


def test_lost_ranks_with_no_peers_is_empty(monkeypatch):
    monkeypatch.setattr(process, "_PEERS", [])
    assert lost_ranks() == []


# -- the message -----------------------------------------------------------------------------------


def test_describe_loss_names_the_lost_rank_and_resume(monkeypatch, zombie):
    host = socket.gethostname()
    monkeypatch.setattr(process, "_PEERS", [(host, os.getpid()), (host, zombie)])
    text = describe_loss(0, 2, RuntimeError("Connection closed by peer\n(stack of the backend)"))
    assert text.startswith("Rank 0 stops: rank 1 of 2 exited during a collective (RuntimeError: Connection closed by peer).")
    assert "stack of the backend" not in text  # the first line of the cause only
    assert "--resume" in text and "same torchrun command" in text


def test_describe_loss_several_lost_ranks(monkeypatch, zombie):
    host = socket.gethostname()
    monkeypatch.setattr(process, "_PEERS", [(host, os.getpid()), (host, zombie), (host, zombie)])
    assert describe_loss(0, 3).startswith("Rank 0 stops: ranks 1, 2 of 3 exited during a collective.")


def test_describe_loss_without_a_known_lost_rank(monkeypatch):
    host = socket.gethostname()
    monkeypatch.setattr(process, "_PEERS", [(host, os.getpid()), ("node-b", 4242)])
    text = describe_loss(0, 2)
    assert "ranks on node-b cannot be checked from here" in text and "--resume" in text
    monkeypatch.setattr(process, "_PEERS", [(host, os.getpid()), (host, os.getpid())])
    assert "a collective timed out (distributed.timeout_s)" in describe_loss(1, 2)


def test_collective_failures_are_recognised():
    assert _is_collective_failure(RuntimeError("[../gloo/transport/tcp/pair.cc:534] Connection closed by peer"))
    assert _is_collective_failure(RuntimeError("Socket Timed out"))
    assert not _is_collective_failure(RuntimeError("shape mismatch"))
    assert not _is_collective_failure(ValueError("Connection closed by peer"))
