"""An RL algorithm is an advantage estimator plus the loss each trained role gets.

The RL loop (:mod:`tether.loops.rl`) samples, scores and updates through the roles; what makes
PPO PPO — or GRPO, RLOO, REINFORCE++ — is only this protocol. A new algorithm is one file that
implements it with the pure functions of :mod:`tether.algos`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # annotations only: the registry imports this package without torch
    from torch import Tensor

    from tether.types import Experience, Rollout

#: ``loss(policy_output, micro_batch) -> (loss, stats)`` for the actor; ``loss(values, micro_batch)``
#: for the critic. Losses are token means over the micro-batch; stats are floats. A stats key under
#: ``check/`` is a diagnostic the loop reads and does not log.
Loss = Callable[[object, "Experience"], "tuple[Tensor, dict]"]


class Algorithm(Protocol):
    """What the RL loop asks of an algorithm. Its metadata (name, whether it trains a critic,
    group sizes, the keys it ignores) is its registry entry's: :mod:`tether.registry.algorithms`."""

    #: Responses sampled per prompt (the group size of GRPO / RLOO; 1 for PPO).
    samples_per_prompt: int

    def experience(self, rollout: Rollout, logprobs: Tensor, ref_logprobs: Tensor, values: Tensor | None,
                   scores: Tensor, kl_coef: float) -> tuple[Experience, dict]:
        """Shaped rewards, advantages and returns of a scored rollout (all (B, A) but scores (B,)),
        and the algorithm's own stats. Pure tensor maths on the rollout's device."""

    def actor_loss(self, kl_coef: float) -> Loss:
        """The actor's loss for this iteration (``kl_coef``: the KL controller's current beta)."""

    def critic_loss(self) -> Loss | None:
        """The critic's loss (None without a critic)."""
