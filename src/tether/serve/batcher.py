"""A bounded request queue and the one worker thread that runs the model.

Requests are queued as :class:`Job`s. The worker takes the oldest job and, when its ``key`` is
not None, every other waiting job with the same key, up to ``max_batch_rows`` sequences, and
runs them in one call: concurrent requests with the same sampling settings share one
``generate``. A job whose key is None (a seeded request) always runs alone. Jobs arriving
while a batch runs wait and form the next batch, so batches grow with the load.

The queue is bounded: :meth:`Batcher.submit` raises :class:`QueueFull` at ``queue_depth``
waiting jobs and :class:`ShuttingDown` once :meth:`close` began. ``close`` lets the worker
finish what was already accepted (drain) before the thread ends.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)


class QueueFull(Exception):
    """``queue_depth`` jobs are already waiting."""


class ShuttingDown(Exception):
    """The batcher is closing and accepts no new jobs."""


@dataclass(eq=False)
class Job:
    """A unit of model work. Jobs with equal, non-None keys may run in one batch."""

    key: Hashable | None = None
    rows: int = 1  # sequences this job adds to a batch
    future: Future = field(default_factory=Future, repr=False)
    cancelled: bool = False  # set by the caller when nobody waits for the result any more
    emitted: bool = False  # the job already streamed output, so it cannot be run again

    def cancel(self) -> None:
        self.cancelled = True
        self.future.cancel()  # succeeds only while the job is still queued


class Batcher:
    """``run_batch(jobs) -> results`` (one result per job) runs on a single worker thread."""

    def __init__(self, run_batch: Callable[[list[Job]], list[Any]], max_batch_rows: int = 32,
                 queue_depth: int = 64, wait_s: float = 0.0, name: str = "tether-batcher"):
        self.run_batch = run_batch
        self.max_batch_rows = max_batch_rows
        self.queue_depth = queue_depth
        self.wait_s = wait_s
        self.name = name
        self._pending: deque[Job] = deque()
        self._cond = threading.Condition()
        self._closing = False
        self._thread: threading.Thread | None = None
        self.batches_run = 0
        self.largest_batch = 0

    # -- caller side ----------------------------------------------------------------------------
    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
            self._thread.start()

    def submit(self, job: Job) -> Future:
        """Queue ``job``; its future resolves on the worker thread."""
        with self._cond:
            if self._closing:
                raise ShuttingDown()
            if len(self._pending) >= self.queue_depth:
                raise QueueFull()
            self._pending.append(job)
            self._cond.notify()
        return job.future

    @property
    def pending(self) -> int:
        return len(self._pending)

    @property
    def closing(self) -> bool:
        return self._closing

    def close(self, drain: bool = True, timeout: float | None = None) -> None:
        """Refuse new jobs; finish the queued ones (``drain``) or fail them; stop the worker."""
        with self._cond:
            self._closing = True
            if not drain:
                while self._pending:
                    job = self._pending.popleft()
                    if job.future.set_running_or_notify_cancel():
                        job.future.set_exception(ShuttingDown())
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)

    # -- worker side ----------------------------------------------------------------------------
    def _loop(self) -> None:
        while (batch := self._next_batch()) is not None:
            live = [job for job in batch if job.future.set_running_or_notify_cancel()]
            if live:
                self._run(live)

    def _next_batch(self) -> list[Job] | None:
        with self._cond:
            while not self._pending and not self._closing:
                self._cond.wait()
            if not self._pending:
                return None
            room = sum(job.rows for job in self._pending) < self.max_batch_rows
        if room and self.wait_s > 0 and not self._closing:
            # Requests that just got their answers come back within a few ms; waiting for them
            # fills the batch instead of splitting the clients into two alternating halves.
            time.sleep(self.wait_s)
        with self._cond:
            return self._take()

    def _take(self) -> list[Job]:
        """The oldest job and every compatible waiting job that fits (called under the lock)."""
        first = self._pending.popleft()
        batch, rows = [first], first.rows
        if first.key is None:
            return batch
        rest: deque[Job] = deque()
        for job in self._pending:
            if job.key == first.key and not job.cancelled and rows + job.rows <= self.max_batch_rows:
                batch.append(job)
                rows += job.rows
            else:
                rest.append(job)
        self._pending = rest
        return batch

    def _run(self, jobs: list[Job]) -> None:
        self.batches_run += 1
        self.largest_batch = max(self.largest_batch, sum(j.rows for j in jobs))
        try:
            results = self.run_batch(jobs)
        except Exception as err:  # noqa: BLE001 - the error belongs to the requests, not the worker
            if len(jobs) > 1:
                # One bad job must not fail its batch-mates: run each alone to isolate it
                # (except a job that already streamed output: a rerun would repeat it).
                for job in jobs:
                    if job.emitted:
                        job.future.set_exception(err)
                    else:
                        self._run_alone(job)
                return
            log.exception("model call failed")
            jobs[0].future.set_exception(err)
            return
        for job, result in zip(jobs, results, strict=True):
            job.future.set_result(result)

    def _run_alone(self, job: Job) -> None:
        try:
            (result,) = self.run_batch([job])
        except Exception as err:  # noqa: BLE001
            log.exception("model call failed")
            job.future.set_exception(err)
        else:
            job.future.set_result(result)
