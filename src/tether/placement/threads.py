"""Run independent role work side by side on one machine's CPU cores.

PPO's actor and critic are separate models with separate losses and optimisers. On a CPU,
one stream of small-batch ops leaves cores idle between kernels (Python, the autograd
engine, elementwise ops that do not parallelise well at these sizes). :class:`RoleThreads`
runs such jobs in separate Python threads, each with its share of the torch threads: torch
releases the GIL inside its kernels and its autograd engine, so the jobs overlap. The maths is unchanged — each job sees exactly the tensors it would see
sequentially; only the number of threads inside each matmul changes, which moves results
by float rounding (``tests/integration/test_ppo_equivalence.py`` checks the runs match).

``RoleThreads(1)`` (or a machine with one thread) runs the jobs one after the other in the
calling thread, in order: the sequential path is the same code.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Sequence, TypeVar

import torch

T = TypeVar("T")


def _with_threads(n: int, job: Callable[[], T]) -> Callable[[], T]:
    """``job`` run with ``n`` intra-op threads in whatever thread runs it.

    torch's OpenMP thread count is per OS thread: a worker thread keeps the count it first saw,
    so each job sets its own (a no-op when it already matches).
    """

    def run() -> T:
        if torch.get_num_threads() != n:
            torch.set_num_threads(n)
        return job()

    return run


class RoleThreads:
    """Run lists of independent jobs concurrently, ``workers`` at a time.

    The torch threads of the calling thread (``torch.get_num_threads()`` when :meth:`run` is
    called) are split evenly between the jobs running at once, and restored afterwards.
    """

    def __init__(self, workers: int = 2):
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self.workers = workers
        self._pool: ThreadPoolExecutor | None = None
        # Optional job -> job wrapper applied in the worker (the bench's operator clock uses it).
        self.wrap: Callable[[Callable[[], T]], Callable[[], T]] | None = None

    def parallel(self) -> bool:
        """Jobs will run concurrently: more than one worker and more than one torch thread."""
        return self.workers > 1 and torch.get_num_threads() > 1

    def run(self, jobs: Sequence[Callable[[], T]]) -> list[T]:
        """Results of ``jobs`` in order. An exception in any job is raised after all have ended."""
        if len(jobs) <= 1 or not self.parallel():
            return [job() for job in jobs]
        if self.wrap is not None:
            jobs = [self.wrap(job) for job in jobs]
        total = torch.get_num_threads()
        width = min(self.workers, len(jobs))
        per_job = max(1, total // width)
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="tether-role")
        # The process-wide counts (MKL's among them) follow the last set_num_threads: set them to
        # the per-job share here, and every worker's own OpenMP count in _with_threads.
        torch.set_num_threads(per_job)
        futures = [self._pool.submit(_with_threads(per_job, job)) for job in jobs]
        try:
            errors = [f.exception() for f in futures]  # waits for every job
        finally:
            torch.set_num_threads(total)  # the calling thread's count back
        for error in errors:
            if error is not None:
                raise error
        return [f.result() for f in futures]

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def __del__(self):
        pool = getattr(self, "_pool", None)
        if pool is not None:
            pool.shutdown(wait=False)
