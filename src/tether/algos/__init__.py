"""Pure tensor math for RLHF (torch only): masking, KL, rewards, GAE, losses, stats."""

from tether.algos.gae import gae_advantages
from tether.algos.kl import KL_KINDS, kl_estimate, kl_k1, kl_k2, kl_k3
from tether.algos.kl_control import AdaptiveKLController, FixedKLController
from tether.algos.logprobs import sampled_entropy_estimate, token_logprobs
from tether.algos.losses import (
    PolicyLossOutput,
    ValueLossOutput,
    bradley_terry_loss,
    clipped_surrogate,
    entropy_from_logits,
    ppo_policy_loss,
    sft_loss,
    value_loss,
)
from tether.algos.masked import masked_mean, masked_sum, masked_var, masked_whiten, zero_padding
from tether.algos.rewards import last_token_index, shape_rewards
from tether.algos.stats import RunningMoments, explained_variance, repetition_rate
from tether.algos.turns import episode_totals, place_turn_rewards, shape_episode_rewards, turn_ends

__all__ = [
    "KL_KINDS", "AdaptiveKLController", "FixedKLController", "PolicyLossOutput", "RunningMoments",
    "ValueLossOutput", "bradley_terry_loss", "clipped_surrogate", "entropy_from_logits",
    "episode_totals", "explained_variance", "gae_advantages", "kl_estimate", "kl_k1", "kl_k2", "kl_k3",
    "last_token_index", "masked_mean", "masked_sum", "masked_var", "masked_whiten",
    "place_turn_rewards", "ppo_policy_loss", "repetition_rate", "sampled_entropy_estimate", "sft_loss",
    "shape_episode_rewards", "shape_rewards", "token_logprobs", "turn_ends", "value_loss", "zero_padding",
]
