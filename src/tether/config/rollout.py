"""Sampling responses: the rollout block and its vLLM engine (``rollout.*``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tether.config.base import option, section
from tether.rollout.registry import DEFAULT_ENGINE, ENGINES
from tether.rollout.registry import help_text as engine_help


@dataclass(frozen=True)
class VLLMRolloutConfig:
    """The vLLM engine (rollout.engine=vllm; docs/performance.md)."""

    dtype: Literal["float32", "bfloat16", "float16"] = option(
        "float32", "The engine's weights and compute dtype (its copy of the policy; the actor keeps its own).")
    gpu_memory_utilization: float = option(
        0.3, "Fraction of the GPU's memory vLLM may take for weights and KV cache (on the CPU build: of RAM).",
        gt=0, le=1)
    max_model_len: int | None = option(
        None, "Positions the engine holds per sequence; null = the policy's context length.", ge=1)
    tensor_parallel_size: int = option(1, "GPUs one engine shards the policy over.", ge=1)
    enforce_eager: bool = option(True, "No CUDA graphs (faster start; graphs speed up decoding on GPUs).")
    cpu_kvcache_gb: int = option(1, "KV-cache GiB of the CPU build (VLLM_CPU_KVCACHE_SPACE, whole GiB).", ge=1)
    sync_bucket_mb: float = option(64.0, "Weights pushed into the engine per message when syncing, in MiB.", gt=0)
    seed_requests: bool = option(
        True, "Give every request its own seed from the run's torch stream (a seeded run samples the same "
              "responses again). vLLM's CPU build fails on seeded requests once a batch outgrows its KV cache: "
              "false then samples from the engine's own generator (seeded once with run.seed).")
    check_sync: bool = option(
        False, "After every weight sync, sample a few tokens and compare the engine's log-probs with the actor's; "
               "a difference above sync_tolerance is an invariant failure naming the iteration.")
    sync_tolerance: float = option(1e-3, "Largest |engine - actor| log-prob allowed by check_sync.", gt=0)


@dataclass(frozen=True)
class RolloutConfig:
    """Sampling responses from the actor."""

    batch_size: int = option(64, "Prompts per iteration (group.size responses each; one for PPO by default).", ge=1)
    max_new_tokens: int = option(64, "Response length cap.", ge=1)
    min_new_tokens: int = option(0, "Forbid EOS before this many tokens.", ge=0)
    temperature: float = option(1.0, "Sampling temperature; log-probs use the same one.", gt=0)
    top_k: int = option(0, "Top-k filtering (0 = off).", ge=0)
    top_p: float = option(1.0, "Nucleus filtering (1 = off).", gt=0, le=1)
    max_prompt_length: int = option(256, "Prompts longer than this are dropped (and counted).", ge=1)
    # The choices and their help come from the engine registry (tether.rollout.registry): a live view,
    # so an engine registered later is a valid choice too.
    engine: str = option(DEFAULT_ENGINE, engine_help(), choices=ENGINES.keys())
    capture_logprobs: bool = option(
        True,
        "Keep the actor's log-probs computed while sampling instead of a second forward pass; the "
        "first-minibatch ratio check (ppo.ratio_tolerance) verifies they agree with a fresh forward.",
    )
    use_engine_logprobs: bool = option(
        False,
        "rollout.engine=vllm: take the rollout log-probs (pi_old) from the engine instead of an actor forward pass. "
        "The first-minibatch ratio check (ppo.ratio_tolerance) measures how far they are from the actor's "
        "(logged as rollout/engine_ratio_deviation); objective/entropy is then the sampled tokens' mean "
        "-log-prob (an unbiased estimate: vLLM returns no entropies). The lean and hf engines use "
        "rollout.capture_logprobs instead.",
    )
    vllm: VLLMRolloutConfig = section(VLLMRolloutConfig, "The vLLM engine (rollout.engine=vllm).")
