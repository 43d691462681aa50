"""Actor and reference: causal LMs that score the response tokens of a rollout."""

from __future__ import annotations

import torch
from torch import Tensor

from tether.models.forward import response_logprobs
from tether.types import Rollout


class PolicyRole:
    """A causal LM as a policy over response tokens. The actor trains it; the reference freezes it."""

    def __init__(self, model, temperature: float, trainable: bool):
        self.model = model
        self.temperature = temperature
        self.trainable = trainable
        if not trainable:
            model.eval()
            model.requires_grad_(False)

    def logprobs(self, rollout: Rollout, with_entropy: bool = False) -> tuple[Tensor, Tensor | None]:
        """(B, A) log pi(a_t | s_t) at the sampling temperature, and (B, A) entropies if asked.

        No gradient: this is the rollout-time pass (pi_old, pi_ref).
        """
        with torch.no_grad():
            return self.forward(rollout, with_entropy)

    def forward(self, rollout: Rollout, with_entropy: bool = False) -> tuple[Tensor, Tensor | None]:
        """Same as :meth:`logprobs` but with gradient (the PPO update)."""
        return response_logprobs(
            self.model,
            rollout.sequences,
            rollout.attention_mask,
            rollout.num_prompt_tokens,
            self.temperature,
            with_entropy,
        )
