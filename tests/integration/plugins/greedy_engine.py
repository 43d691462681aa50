"""A third-party generation engine, as a user would write it outside tether's source: one file,
one class, one registration. It samples the policy it is given as tether's lean decode loop does,
at the rollout's settings, but always greedily (the most likely token)."""

import dataclasses

from tether.registry.engines import EngineSpec, register_engine
from tether.rollout.lean import LeanGenerationEngine


class GreedyEngine(LeanGenerationEngine):
    def generate(self, prompt_ids, prompts, params, seed=None, **kwargs):
        return super().generate(prompt_ids, prompts, dataclasses.replace(params, greedy=True), seed, **kwargs)


register_engine(EngineSpec(
    name="greedy", title="greedy", target=f"{__name__}:GreedyEngine",
    description="the lean decode loop, always taking the most likely token (a plugin engine)",
    holds_own_weights=False, returns_entropy=True, logprobs_switch="capture_logprobs", config_block=None,
    post_sync_check=False))
