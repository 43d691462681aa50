"""Sampling responses: the rollout block and its vLLM engine (``rollout.*``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tether.config.base import option, section
from tether.common.errors import ConfigError
from tether.registry.engines import DEFAULT_ENGINE, ENGINES, engine_spec
from tether.registry.engines import help_text as engine_help


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
    # The choices and their help come from the engine registry (tether.registry.engines): a live view,
    # so an engine registered later is a valid choice too.
    engine: str = option(DEFAULT_ENGINE, engine_help(), choices=ENGINES.keys())
    capture_logprobs: bool = option(
        True,
        "Keep the actor's log-probs computed while sampling instead of a second forward pass; the "
        "first-minibatch ratio check (rl.ratio_tolerance) verifies they agree with a fresh forward.",
    )
    use_engine_logprobs: bool = option(
        False,
        "rollout.engine=vllm: take the rollout log-probs (pi_old) from the engine instead of an actor forward pass. "
        "The first-minibatch ratio check (rl.ratio_tolerance) measures how far they are from the actor's "
        "(logged as rollout/engine_ratio_deviation); objective/entropy is then the sampled tokens' mean "
        "-log-prob (an unbiased estimate: vLLM returns no entropies). The lean and hf engines use "
        "rollout.capture_logprobs instead.",
    )
    is_correction: Literal["none", "tis", "mis"] = option(
        "none",
        "Off-policy correction of the actor's loss when the engine's sampling distribution is not the actor's "
        "(an engine that holds its own copy of the weights, e.g. vLLM in bf16 against an fp32 actor), in the "
        "clipped-surrogate algorithms (ppo, grpo, rloo, reinforce_pp; refused for online_dpo and rs): each "
        "token's surrogate weighted by rho = pi_old/pi_engine: tis = min(rho, is_cap) (truncated importance "
        "sampling); mis = rho where rho <= is_cap, 0 above (masked importance sampling); none = no correction. "
        "A token whose log-ratio is NaN or inf (e.g. a NaN engine log-prob) weighs 0 under tis and mis. "
        "Logged as rollout/is_weight_mean and rollout/is_clipped_frac.",
    )
    is_cap: float = option(2.0, "The importance-weight bound of rollout.is_correction.", ge=1)
    max_staleness: int = option(
        0,
        "Asynchronous RL: 0 = sample each iteration's responses, then train on them (the synchronous loop); "
        "k >= 1 = a sampler with its own copy of the weights (a worker process for lean and hf, a thread driving "
        "vLLM) samples the next iterations' responses while this one trains, from weights at most k updates "
        "older than the ones that train on them "
        "(logged as rollout/staleness_mean and rollout/staleness_max). The actor recomputes pi_old; "
        "rollout.is_correction weighs it against the worker's log-probs.",
        ge=0,
    )
    worker_threads: int = option(
        1, "rollout.max_staleness >= 1: torch threads of the sampling worker process (the trainer keeps its own).",
        ge=1)
    vllm: VLLMRolloutConfig = section(VLLMRolloutConfig, "The vLLM engine (rollout.engine=vllm).")


def check_max_staleness(rollout, placement) -> None:
    """``rollout.max_staleness`` >= 1 samples ahead beside one actor process (local, a torchrun rank, or
    a Ray actor group of one worker), with pi_old recomputed by the actor."""
    if rollout.max_staleness == 0:
        return
    key = f"Config key 'rollout.max_staleness' = {rollout.max_staleness}"
    if rollout.use_engine_logprobs:
        raise ConfigError(
            f"{key} with rollout.use_engine_logprobs=true: the engine's log-probs are of weights up to "
            f"{rollout.max_staleness} update(s) old, not pi_old. The actor recomputes pi_old; set "
            "rollout.use_engine_logprobs=false (rollout.is_correction weighs the two).")
    if rollout.vllm.check_sync:
        raise ConfigError(
            f"{key} with rollout.vllm.check_sync=true: the engine is busy sampling ahead when the actor's weights "
            "change, so there is no moment to compare them; the correction's weights (rollout.is_correction, "
            "rollout/is_weight_mean) watch the engine instead. Set rollout.vllm.check_sync=false.")
    workers = placement.ray.resources("actor").num_workers if placement.backend == "ray" else 1
    if workers > 1:
        raise ConfigError(
            f"{key} with placement.ray.roles.actor.num_workers={workers}: the sampling worker samples whole "
            "rollouts beside one actor process; data-parallel actor groups do not yet sample ahead. Use one actor "
            "worker or rollout.max_staleness=0.")


def check_is_correction(rollout) -> None:
    """``rollout.is_correction`` needs behaviour log-probs that are not pi_old: an engine with its own
    copy of the weights, and pi_old recomputed by the actor (else every weight is 1: a setting that
    would do nothing)."""
    if rollout.is_correction == "none":
        return
    engine = engine_spec(rollout.engine)
    key = f"Config key 'rollout.is_correction' = {rollout.is_correction!r}"
    if not engine.holds_own_weights and rollout.max_staleness == 0:
        owners = ", ".join(s.name for s in ENGINES.values() if s.holds_own_weights)
        raise ConfigError(
            f"{key} with rollout.engine={engine.name}: that engine samples with the actor's own weights, so its "
            f"log-probs are pi_old and every weight would be 1. The correction is for an engine that holds its own "
            f"copy of the weights ({owners}) or for asynchronous sampling (rollout.max_staleness >= 1); "
            "drop the key.")
    if rollout.use_engine_logprobs:
        raise ConfigError(
            f"{key} with rollout.use_engine_logprobs=true: pi_old would then be the engine's own log-probs and "
            "every weight 1. Let the actor recompute pi_old (rollout.use_engine_logprobs=false): the correction "
            "weighs it against the engine's.")
