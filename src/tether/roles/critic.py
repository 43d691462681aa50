"""The critic: a scalar-head model giving V(s_t) for every response token."""

from __future__ import annotations

import torch
from torch import Tensor

from tether.models.forward import scalar_outputs
from tether.types import Rollout


class CriticRole:
    """V(s_t) is read where token t is predicted: the position before it (like the log-probs)."""

    def __init__(self, model):
        self.model = model

    def forward(self, rollout: Rollout) -> Tensor:
        """(B, A) values with gradient; padding positions are 0."""
        out = scalar_outputs(self.model, rollout.sequences, rollout.attention_mask)
        values = out[:, rollout.num_prompt_tokens - 1 : -1]
        return values * rollout.response_mask

    def values(self, rollout: Rollout) -> Tensor:
        with torch.no_grad():
            return self.forward(rollout)
