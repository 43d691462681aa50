"""The vLLM engine's registry entry (:data:`tether.rollout.registry.ENGINES`): its capabilities,
readable without importing torch or vLLM (the registry builds its ``EngineSpec`` from them). The
engine itself is :mod:`tether.rollout.vllm_engine`."""

from __future__ import annotations

CAPABILITIES = dict(
    name="vllm", title="vLLM", target="tether.rollout.vllm_engine:VLLMGenerationEngine",
    description="a vLLM engine holding its own copy of the policy, synced after every update (rollout.vllm.*)",
    holds_own_weights=True,
    returns_entropy=False,  # vLLM gives the sampled tokens' log-probs only
    logprobs_switch="use_engine_logprobs", config_block="rollout.vllm", post_sync_check=True)
