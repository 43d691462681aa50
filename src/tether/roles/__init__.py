"""What each model is for: the actor (log-probs, update), the reference (log-probs), the critic
(values, update), and the reward sources (scores). Each role runs its model through an engine
(:mod:`tether.engines`); no threads, no Ray, no optimisers of their own."""

from tether.roles.critic import Critic, SharedTrunkCritic, ValueHead
from tether.roles.policy import Actor, PolicyOutput, PolicyWithValueHead, Reference
from tether.roles.reward import (
    CallableReward,
    EnsembleReward,
    ModelReward,
    RewardSource,
    combine_scores,
    import_callable,
)

__all__ = [
    "Actor",
    "CallableReward",
    "Critic",
    "EnsembleReward",
    "ModelReward",
    "PolicyOutput",
    "PolicyWithValueHead",
    "Reference",
    "RewardSource",
    "SharedTrunkCritic",
    "ValueHead",
    "combine_scores",
    "import_callable",
]
