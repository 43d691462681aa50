"""A generation engine in a process of its own, over its own copy of the policy: the sampler of
asynchronous RL (``rollout.max_staleness`` >= 1; the loop's side is
:mod:`tether.loops.rollout_pipeline`).

The parent (:class:`RolloutWorker`) and the child (:func:`serve`) talk over one pipe, in order:

- ``("weights", version, [(name, tensor), ...])``: the actor's weights after ``version`` updates,
  snapshotted in the parent between iterations (a LoRA actor's adapters merged in, as for vLLM);
  the child copies them into its model before it serves the next request;
- ``("generate", key, prompt_ids, prompts, params, seed, rows)``: one rollout, sampled with the
  weights the child holds then, under its own RNG stream seeded with ``seed`` (``rows``: the prompt
  rows its episodes start from, when the run has an environment; else None);
- the child answers each request with ``("rollout", key, version, rollout, wait_s, generate_s)``:
  the version that sampled it, how long the child waited for this request (for weights or for
  work) and how long it sampled; an error is answered with ``("error", text)``.

Messages go out through a sender thread, so the trainer never blocks on a child that is busy
sampling. Tensors cross in shared memory (torch.multiprocessing's pickling). Which engine runs
in the child is the run's ``rollout.engine`` (one that samples the model it is given: lean, hf),
built through its own ``from_config`` (and wrapped in an episode engine of the run's environment,
which then runs in the child: its tools too); the child has ``threads`` torch threads of its own and keeps
its copy on the actor's device (a second process on the same GPU, when the actor is on one).
"""

from __future__ import annotations

import contextlib
import queue
import sys
import threading
import time
import traceback
import types
from dataclasses import dataclass
from typing import Any

import torch

from tether.common.dispatch import answers, asks
from tether.common.errors import TrainingError
from tether.types import Rollout, to_device


@dataclass(frozen=True)
class Sampled:
    """One rollout the worker sampled: which request (``key``), the weights ``version`` that sampled
    it, the seconds the worker waited before it (for weights or for the request) and sampled it."""

    key: int
    rollout: Rollout
    version: int
    wait_s: float
    generate_s: float


@dataclass(frozen=True)
class WorkerSpec:
    """What the child builds its engine from: the engine's registered name, the policy's model
    config (a ``transformers`` config object), its tokenizer, the precision it samples in, whether
    it keeps the sampled tokens' log-probs, its torch threads and the model's attention."""

    engine: str
    model_config: Any
    tokenizer: Any
    autocast: str = "none"
    capture: bool = False
    threads: int = 1
    attn_implementation: str | None = None
    trust_remote_code: bool = False
    #: The dtype of the policy's weights (the worker's copy holds the same).
    dtype: torch.dtype = torch.float32
    #: Where the worker's copy lives and samples ("cpu", "cuda:1", ...).
    device: str = "cpu"
    #: The run's episodes (:class:`tether.rollout.episodes.EpisodeSpec`), or None: single-turn.
    episodes: Any = None


class RolloutWorker:
    """The parent's handle on a sampling process (see the module). ``weights_source``: () -> (name,
    tensor) pairs of the actor's current weights (the actor's ``sync_weights``). The process
    samples nothing before the first :meth:`push_weights`."""

    def __init__(self, spec: WorkerSpec, weights_source):
        import torch.multiprocessing as mp

        self.weights_source = weights_source
        self.version: int | None = None  # the last version pushed
        self.device = spec.device
        ctx = mp.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._process = ctx.Process(target=serve, args=(child, spec), name="tether-rollout-worker", daemon=True)
        start_without_main(self._process)
        child.close()
        self._outbox: queue.Queue = queue.Queue()
        self._send_error: BaseException | None = None
        self._sender = threading.Thread(target=self._send_loop, name="tether-rollout-sender", daemon=True)
        self._sender.start()
        self._received: dict[int, Sampled] = {}

    # -- the trainer's calls ----------------------------------------------------------------
    def push_weights(self, version: int) -> float:
        """Snapshot the actor's weights now and queue them for the child, tagged ``version``; MiB."""
        with torch.no_grad():
            named = [(name, tensor.detach().to("cpu", copy=True)) for name, tensor in self.weights_source()]
        self.version = version
        self._post(("weights", version, named))
        return sum(t.numel() * t.element_size() for _, t in named) / 2**20

    @asks
    def request(self, prompt_ids: list[list[int]], prompts: list[str], params, seed: int, key: int,
                rows: list[dict] | None = None) -> None:
        """Queue rollout ``key``: sampled after every weight push queued before this call
        (``rows``: the prompt rows of an episode engine, one per prompt)."""
        self._post(("generate", key, prompt_ids, prompts, params, seed, rows))

    @answers
    def receive(self, key: int) -> Sampled:
        """Rollout ``key`` (requested earlier), waiting for it if the child is still sampling."""
        while key not in self._received:
            message = self._recv()
            if message[0] == "error":
                raise TrainingError(f"the rollout worker failed:\n{message[1]}")
            _, got, version, rollout, wait_s, generate_s = message  # the rollout crosses on the CPU
            self._received[got] = Sampled(got, to_device(rollout, self.device), version, wait_s, generate_s)
        return self._received.pop(key)

    def drain(self) -> None:
        """Nothing to wait for: the process's engine is its own, the trainer's is free to use."""

    def close(self) -> None:
        """Stop the child at once (rollouts still queued are of no use to anyone) and the sender thread."""
        if self._process is None:
            return
        self._process.kill()
        self._process.join()
        self._outbox.put(None)
        self._sender.join(timeout=10)
        self._conn.close()
        self._process = None

    def __del__(self):
        process = getattr(self, "_process", None)
        if process is not None and process.is_alive():
            process.kill()

    # -- the pipe -------------------------------------------------------------------------------
    def _post(self, message: tuple) -> None:
        if self._send_error is not None:
            raise TrainingError(f"the rollout worker cannot be reached: {self._send_error}")
        if self._process is None:
            raise TrainingError("the rollout worker is closed")
        self._outbox.put(message)

    def _send_loop(self) -> None:
        while True:
            message = self._outbox.get()
            if message is None:  # closed
                return
            try:
                self._conn.send(message)
            except (OSError, EOFError, ValueError) as error:  # the child is gone: the next receive says why
                self._send_error = error
                return

    def _recv(self) -> tuple:
        try:
            while not self._conn.poll(1.0):
                if not self._process.is_alive():
                    raise EOFError
            return self._conn.recv()
        except (EOFError, OSError):
            code = self._process.exitcode if self._process is not None else None
            raise TrainingError(f"the rollout worker exited (exit code {code}) before sending a rollout; "
                                "its error, if any, is above.") from None


@contextlib.contextmanager
def _main_hidden():
    """``sys.modules['__main__']`` replaced by an empty module for the duration of the block.

    A spawned child re-imports the parent's ``__main__`` (by ``__spec__`` name or ``__file__``, as
    ``multiprocessing.spawn.get_preparation_data`` records them at ``Process.start()``) before it
    runs its target. A user's script without an ``if __name__ == "__main__":`` guard would then run
    its training calls again in the child. The worker's target and arguments live in tether's and
    the libraries' modules, so the child needs nothing from ``__main__``: an empty stand-in (no
    ``__file__``, no ``__spec__``) tells the child to leave its own ``__main__`` alone."""
    main = sys.modules.get("__main__")
    stand_in = types.ModuleType("__main__")
    stand_in.__spec__ = None
    sys.modules["__main__"] = stand_in
    try:
        yield
    finally:
        if main is None:
            sys.modules.pop("__main__", None)
        else:
            sys.modules["__main__"] = main


def start_without_main(process) -> None:
    """``process.start()`` for a spawned process whose target needs nothing from the caller's
    ``__main__``: the child never re-runs the caller's script (see :func:`_main_hidden`)."""
    with _main_hidden():
        process.start()


class EngineThread:
    """The sampler of asynchronous RL over an engine that holds its own copy of the weights and
    samples in processes of its own (vLLM): its weight loads and requests run in order in one
    thread of this process, beside the trainer. Same calls as :class:`RolloutWorker`.

    ``engine``: the run's engine (its ``load_weights`` and ``generate``); ``weights_source``: the
    actor's (name, tensor) pairs, snapshotted at each push between iterations.
    """

    def __init__(self, engine, weights_source):
        from concurrent.futures import ThreadPoolExecutor

        self.engine, self.weights_source = engine, weights_source
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="tether-sampler")
        self._pending: dict[int, Any] = {}
        self._version: int | None = None
        self._idle_since = time.perf_counter()

    def push_weights(self, version: int) -> float:
        with torch.no_grad():
            named = [(name, tensor.detach().to("cpu", copy=True)) for name, tensor in self.weights_source()]
        self._pool.submit(self._load, version, named)
        return sum(t.numel() * t.element_size() for _, t in named) / 2**20

    @asks
    def request(self, prompt_ids: list[list[int]], prompts: list[str], params, seed: int, key: int,
                rows: list[dict] | None = None) -> None:
        self._pending[key] = self._pool.submit(self._generate, key, prompt_ids, prompts, params, seed, rows)

    @answers
    def receive(self, key: int) -> Sampled:
        try:
            return self._pending.pop(key).result()
        except Exception as error:
            raise TrainingError(f"the sampling thread failed on rollout {key}: {error}") from error

    def drain(self) -> None:
        """Wait until every queued load and request has run: the engine is then free for another
        caller (held-out evaluation) and holds the last weights pushed."""
        self._pool.submit(lambda: None).result()

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def _load(self, version: int, named: list) -> None:
        self.engine.load_weights(named)
        self._version = version

    def _generate(self, key: int, prompt_ids, prompts, params, seed, rows) -> Sampled:
        if self._version is None:
            raise RuntimeError("a rollout was requested before any weights were pushed")
        start = time.perf_counter()
        rollout = self.engine.generate(prompt_ids, prompts, params, seed=seed, **episode_rows(rows))
        done = time.perf_counter()
        sampled = Sampled(key, rollout, self._version, start - self._idle_since, done - start)
        self._idle_since = done
        return sampled


def serve(conn, spec: WorkerSpec) -> None:
    """The child's loop: build the engine, then apply weights and answer requests in order."""
    try:
        engine, model = _build(spec)
        version, idle_since = None, time.perf_counter()
        while True:
            message = conn.recv()  # EOFError once the trainer is gone: the loop ends
            if message[0] == "weights":
                _, version, named = message
                _load_weights(model, named)
                continue
            _, key, prompt_ids, prompts, params, seed, rows = message
            if version is None:
                raise RuntimeError("a rollout was requested before any weights were sent")
            start = time.perf_counter()
            rollout = engine.generate(prompt_ids, prompts, params, seed=seed, **episode_rows(rows))
            done = time.perf_counter()
            conn.send(("rollout", key, version, to_device(rollout, "cpu"), start - idle_since, done - start))
            idle_since = done
    except (EOFError, KeyboardInterrupt):
        return
    except BaseException:
        try:
            conn.send(("error", traceback.format_exc()))
        except OSError:
            pass


def _build(spec: WorkerSpec):
    """(the engine, its model): the policy's architecture with placeholder weights (the first push
    replaces every one), in eval mode, and ``spec.engine`` over it."""
    from transformers import AutoModelForCausalLM

    from tether.registry.engines import engine_class
    from tether.rollout.setup import EngineSetup

    torch.set_num_threads(spec.threads)
    extra = {"attn_implementation": spec.attn_implementation} if spec.attn_implementation else {}
    model = AutoModelForCausalLM.from_config(spec.model_config, trust_remote_code=spec.trust_remote_code, **extra)
    model.to(device=spec.device, dtype=spec.dtype).eval().requires_grad_(False)
    setup = EngineSetup(spec.tokenizer, model=model, autocast=spec.autocast, capture=spec.capture)
    engine = engine_class(spec.engine).from_config(setup)
    if spec.episodes is not None:
        engine = spec.episodes.wrap(engine, spec.tokenizer)
    return engine, model


def episode_rows(rows: list[dict] | None) -> dict:
    """The keyword an episode engine's ``generate`` takes its prompt rows by (none: single-turn)."""
    return {} if rows is None else {"rows": rows}


def _load_weights(model: torch.nn.Module, named: list) -> None:
    """Copy the pushed (name, tensor) pairs into ``model``; every parameter must be covered (tied
    parameters count once) and every name known."""
    own = dict(model.named_parameters(remove_duplicate=False)) | dict(model.named_buffers())
    unknown = [name for name, _ in named if name not in own]
    if unknown:
        raise KeyError(f"the pushed weights name {unknown[:3]} (of {len(unknown)}), which the worker's model has not")
    covered = set()
    with torch.no_grad():
        for name, tensor in named:
            own[name].copy_(tensor)
            covered.add(own[name].data_ptr())
    missing = [n for n, p in model.named_parameters() if p.data_ptr() not in covered]
    if missing:
        raise KeyError(f"the pushed weights leave {missing[:3]} (of {len(missing)}) of the worker's model unset")
