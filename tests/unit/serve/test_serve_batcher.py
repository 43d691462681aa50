"""The batcher: compatible jobs share a call, seeded jobs run alone, bounded queue, drain on close."""

from __future__ import annotations

import threading

import pytest

from tether.serve.batcher import Batcher, Job, QueueFull, ShuttingDown


class Recorder:
    """A run_batch that records each batch; the first call can be held until released."""

    def __init__(self, hold_first: bool = False):
        self.batches: list[list[Job]] = []
        self.gate = threading.Event()
        self.entered = threading.Event()
        if not hold_first:
            self.gate.set()

    def __call__(self, jobs):
        self.entered.set()
        self.gate.wait(10)
        self.batches.append(list(jobs))
        for job in jobs:
            if getattr(job, "boom", False):
                raise ValueError("bad job")
        return [f"done:{id(job)}" for job in jobs]


def hold_worker(batcher, recorder):
    """Submit a blocker job and wait until the worker is stuck in it, so later jobs queue up."""
    blocker = Job(key="block")
    batcher.submit(blocker)
    assert recorder.entered.wait(10)
    return blocker


@pytest.fixture
def held():
    recorder = Recorder(hold_first=True)
    batcher = Batcher(recorder, max_batch_rows=4, queue_depth=8)
    batcher.start()
    blocker = hold_worker(batcher, recorder)
    yield batcher, recorder, blocker
    recorder.gate.set()
    batcher.close()


def test_compatible_jobs_share_a_batch_and_incompatible_wait(held):
    batcher, recorder, _ = held
    a1, b1, a2, a3 = Job(key="a"), Job(key="b"), Job(key="a", rows=2), Job(key="a", rows=2)
    for job in (a1, b1, a2, a3):
        batcher.submit(job)
    recorder.gate.set()
    for job in (a1, b1, a2, a3):
        job.future.result(10)
    # After the blocker: a1 + a2 (3 rows; a3 would exceed 4), then b1 (oldest left), then a3.
    assert [[j for j in batch] for batch in recorder.batches[1:]] == [[a1, a2], [b1], [a3]]


def test_seeded_jobs_with_no_key_run_alone(held):
    batcher, recorder, _ = held
    jobs = [Job(key=None), Job(key=None), Job(key="x"), Job(key="x")]
    for job in jobs:
        batcher.submit(job)
    recorder.gate.set()
    for job in jobs:
        job.future.result(10)
    assert [len(b) for b in recorder.batches[1:]] == [1, 1, 2]


def test_a_job_larger_than_the_batch_still_runs(held):
    batcher, recorder, _ = held
    big = Job(key="a", rows=10)
    batcher.submit(big)
    recorder.gate.set()
    assert big.future.result(10).startswith("done")


def test_queue_depth_is_enforced(held):
    batcher, _, _ = held
    for _ in range(8):
        batcher.submit(Job(key="a"))
    assert batcher.pending == 8
    with pytest.raises(QueueFull):
        batcher.submit(Job(key="a"))


def test_cancelled_job_is_skipped(held):
    batcher, recorder, _ = held
    gone, kept = Job(key="a"), Job(key="a")
    batcher.submit(gone)
    batcher.submit(kept)
    gone.cancel()
    recorder.gate.set()
    kept.future.result(10)
    assert gone.future.cancelled()
    assert all(gone not in batch for batch in recorder.batches)


def test_a_failing_job_does_not_fail_its_batch_mates(held):
    batcher, recorder, _ = held
    good, bad = Job(key="a"), Job(key="a")
    bad.boom = True
    batcher.submit(good)
    batcher.submit(bad)
    recorder.gate.set()
    assert good.future.result(10).startswith("done")
    with pytest.raises(ValueError, match="bad job"):
        bad.future.result(10)


def test_close_drains_accepted_jobs_then_refuses_new_ones():
    recorder = Recorder(hold_first=True)
    batcher = Batcher(recorder, max_batch_rows=1, queue_depth=8)
    batcher.start()
    hold_worker(batcher, recorder)
    queued = [Job(key="a") for _ in range(3)]
    for job in queued:
        batcher.submit(job)
    closer = threading.Thread(target=batcher.close)
    closer.start()
    while not batcher.closing:
        pass
    with pytest.raises(ShuttingDown):
        batcher.submit(Job(key="a"))
    recorder.gate.set()
    closer.join(10)
    assert not closer.is_alive()
    assert all(job.future.result(0).startswith("done") for job in queued)


def test_close_without_drain_fails_waiting_jobs():
    recorder = Recorder(hold_first=True)
    batcher = Batcher(recorder, queue_depth=8)
    batcher.start()
    hold_worker(batcher, recorder)
    waiting = Job(key="a")
    batcher.submit(waiting)
    closer = threading.Thread(target=batcher.close, kwargs={"drain": False})
    closer.start()
    with pytest.raises(ShuttingDown):
        waiting.future.result(10)
    recorder.gate.set()
    closer.join(10)
