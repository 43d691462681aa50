"""RoleThreads: jobs side by side with a share of the torch threads each, results in order."""

from __future__ import annotations

import threading

import pytest
import torch

from tether.placement.threads import RoleThreads


@pytest.fixture
def two_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def test_jobs_overlap_in_time(two_threads):
    # Each job waits for the other at a barrier: run one after the other, the first would time out.
    barrier = threading.Barrier(2, timeout=10)
    runner = RoleThreads(2)
    assert runner.parallel()
    out = runner.run([lambda: barrier.wait() is not None and "a", lambda: barrier.wait() is not None and "b"])
    assert out == ["a", "b"]
    runner.close()


def test_each_job_gets_its_share_of_threads_and_the_caller_gets_its_count_back(two_threads):
    runner = RoleThreads(2)
    seen = runner.run([torch.get_num_threads, torch.get_num_threads, torch.get_num_threads])
    assert seen == [1, 1, 1]
    assert torch.get_num_threads() == 2
    runner.close()


def test_results_come_back_in_job_order_and_jobs_run_in_worker_threads(two_threads):
    runner = RoleThreads(2)
    names = runner.run([lambda: threading.current_thread().name] * 4)
    assert all(n.startswith("tether-role") for n in names)
    assert runner.run([lambda i=i: i * i for i in range(5)]) == [0, 1, 4, 9, 16]
    runner.close()


def test_an_exception_in_a_job_reaches_the_caller_after_all_jobs_end(two_threads):
    done = []

    def fails():
        raise ValueError("bad job")

    def slow():
        threading.Event().wait(0.2)
        done.append(True)

    runner = RoleThreads(2)
    with pytest.raises(ValueError, match="bad job"):
        runner.run([fails, slow])
    assert done == [True]
    assert torch.get_num_threads() == 2
    runner.close()


def test_one_worker_or_one_thread_runs_in_order_in_the_calling_thread():
    caller = threading.current_thread().name
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert not RoleThreads(2).parallel()
        assert RoleThreads(2).run([lambda: threading.current_thread().name]) == [caller]
    finally:
        torch.set_num_threads(before)
    order = []
    assert RoleThreads(1).run([lambda: order.append(1) or 1, lambda: order.append(2) or 2]) == [1, 2]
    assert order == [1, 2]


def test_workers_must_be_positive():
    with pytest.raises(ValueError, match="workers"):
        RoleThreads(0)
