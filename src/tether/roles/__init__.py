"""The four PPO roles as plain classes: actor/reference (policy), critic, reward source."""

from tether.roles.critic import CriticRole
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
    "combine_scores",
    "import_callable",
]
