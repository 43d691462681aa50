"""The critic: a scalar-head model giving V(s_t) for every response token."""

from __future__ import annotations

import torch
from torch import Tensor

from tether.models.forward import response_values
from tether.types import Rollout


class CriticRole:
    """V(s_t) is read where token t is predicted: the position before it (like the log-probs)."""

    def __init__(self, model, autocast: str = "none", compile: bool | str = False):
        self.model = model
        self.autocast = autocast
        self.compile = compile

    def forward(self, rollout: Rollout) -> Tensor:
        """(B, A) values with gradient; padding positions are 0."""
        values = response_values(self.model, rollout.sequences, rollout.attention_mask, rollout.num_prompt_tokens,
                                 self.autocast, self.compile)
        return values * rollout.response_mask

    def values(self, rollout: Rollout) -> Tensor:
        with torch.no_grad():
            return self.forward(rollout)
