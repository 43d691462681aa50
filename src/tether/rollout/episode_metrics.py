"""What a batch of episodes logs: the environment's totals, how much of each episode the policy
wrote, and whether the trainer scores the tokens the engine sampled.

``rollout/token_mismatch`` is the fraction of sampled tokens whose log-prob under the trainer's
forward differs from the engine's own by more than :data:`MISMATCH_NATS`: float noise between a
decode step and a whole-sequence forward is far below it (fp32 ~1e-6, bf16 ~1e-2), while a token
the engine did not sample (a re-tokenised turn) is typically off by nats. On the lean and hf
engines, which sample from the actor's own weights, it is 0; ``rollout/logprob_diff_max`` is the
largest difference, for the record.
"""

from __future__ import annotations

import torch

from tether.algos.off_policy import mismatch_rate, token_mismatch
from tether.environments.base import batch_metrics
from tether.types import Rollout

#: A sampled token whose trainer and engine log-probs differ by more than this is a mismatch.
MISMATCH_NATS = 0.1


def episode_metrics(rollout: Rollout, trainer_logprobs: torch.Tensor | None = None) -> dict[str, float]:
    """The metrics of a rollout of episodes (``rollout.episodes`` set): ``env/turns``,
    ``env/truncated``, ``env/<counter>`` (tool calls, errors, timeouts, malformed calls; totals),
    ``env/observation_share`` (observation tokens / response tokens), ``env/turn_reward`` (the mean
    reward of the turns the environment rewarded) and, when the engine returned its log-probs and
    ``trainer_logprobs`` (B, A) is given, ``rollout/token_mismatch`` and ``rollout/logprob_diff_max``."""
    stats = batch_metrics(record.stats for record in rollout.episodes)
    response = rollout.response_mask.bool()
    sampled = rollout.loss_mask.bool() & response
    stats["env/observation_share"] = float((response & ~sampled).sum()) / max(int(response.sum()), 1)
    rewards = [r for record in rollout.episodes for r in record.turn_rewards if r is not None]
    if rewards:
        stats["env/turn_reward"] = sum(rewards) / len(rewards)
    if trainer_logprobs is not None and rollout.sampled_logprobs is not None:
        engine = rollout.sampled_logprobs.to(trainer_logprobs.device)
        sampled = sampled.to(trainer_logprobs.device)
        stats["rollout/token_mismatch"] = mismatch_rate(trainer_logprobs, engine, sampled, MISMATCH_NATS)
        stats["rollout/logprob_diff_max"] = token_mismatch(trainer_logprobs, engine, sampled)
    return stats
