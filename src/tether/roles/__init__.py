"""The four PPO roles as plain classes: actor/reference (policy), critic, reward source."""

from tether.roles.critic import CriticRole, SharedTrunkCritic, ValueHead
from tether.roles.policy import PolicyRole
from tether.roles.reward import (
    CallableReward,
    EnsembleReward,
    ModelReward,
    RewardSource,
    combine_scores,
    import_callable,
)

__all__ = [
    "CallableReward",
    "CriticRole",
    "EnsembleReward",
    "ModelReward",
    "PolicyRole",
    "RewardSource",
    "SharedTrunkCritic",
    "ValueHead",
    "combine_scores",
    "import_callable",
]
