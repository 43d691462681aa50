"""What each model is for: the actor (log-probs, update), the reference (log-probs), the critic
(values, update), the reward sources (scores), and a supervised stage's trained model
(:mod:`tether.roles.supervised`). Each role runs its model through an engine (:mod:`tether.engines`;
a trained one made by :func:`tether.roles.builder.build_trained`); no threads, no Ray, no
optimisers of their own. How a placement dispatches a role's methods is declared on them
(:mod:`tether.common.dispatch`)."""

from tether.roles.critic import Critic, SharedTrunkCritic, ValueHead
from tether.roles.policy import Actor, PolicyOutput, PolicyWithValueHead, Reference
from tether.roles.reward import (
    CallableReward,
    EnsembleReward,
    ModelReward,
    RewardSource,
    combine_scores,
)
from tether.roles.reward_terms import ComposedReward, LengthPenaltyReward, RegexReward

__all__ = [
    "Actor",
    "CallableReward",
    "ComposedReward",
    "Critic",
    "EnsembleReward",
    "LengthPenaltyReward",
    "ModelReward",
    "PolicyOutput",
    "PolicyWithValueHead",
    "Reference",
    "RegexReward",
    "RewardSource",
    "SharedTrunkCritic",
    "ValueHead",
    "combine_scores",
]
