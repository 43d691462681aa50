"""The critic: a scalar-head model giving V(s_t) for every response token.

:class:`CriticRole` is PPO-RLHF's usual separate value model; :class:`SharedTrunkCritic` is a
value head on the actor's trunk (``critic.shared_trunk``), a different model that costs
one trunk pass in the update instead of two.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import Tensor

from tether.errors import ModelError
from tether.models.forward import logprobs_from_hidden, response_hidden, response_values, scalar_head
from tether.types import Rollout


class CriticRole:
    """V(s_t) is read where token t is predicted: the position before it (like the log-probs)."""

    shared_trunk = False

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


VALUE_HEAD_FILE = "value_head.safetensors"
VALUE_HEAD_CONFIG = "value_head.json"


class ValueHead(torch.nn.Module):
    """The scalar value head of a shared-trunk critic: (..., H) -> (...). Holds no trunk.

    ``save_pretrained`` / :meth:`from_pretrained` use their own small layout
    (``value_head.safetensors`` + ``value_head.json``): it is not a transformers model.
    """

    def __init__(self, hidden_size: int):
        super().__init__()
        self.hidden_size = hidden_size
        self.score = torch.nn.Linear(hidden_size, 1)
        # V = 0 everywhere at the start: the first advantages are the rewards' own.
        torch.nn.init.zeros_(self.score.weight)
        torch.nn.init.zeros_(self.score.bias)

    def forward(self, hidden: Tensor) -> Tensor:
        return scalar_head(self.score, hidden)

    def save_pretrained(self, directory) -> None:
        from safetensors.torch import save_file

        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        save_file({k: v.detach().contiguous() for k, v in self.state_dict().items()}, directory / VALUE_HEAD_FILE)
        (directory / VALUE_HEAD_CONFIG).write_text(json.dumps({"shared_trunk": True, "hidden_size": self.hidden_size}))

    @classmethod
    def from_pretrained(cls, directory, hidden_size: int) -> "ValueHead":
        from safetensors.torch import load_file

        directory = Path(directory)
        path = directory / VALUE_HEAD_FILE
        if not path.is_file():
            raise ModelError(f"'{directory}' holds no shared-trunk value head ({VALUE_HEAD_FILE}); it was not "
                             "written by a critic.shared_trunk=true run.")
        head = cls(hidden_size)
        state = load_file(path)
        if tuple(state.get("score.weight", torch.empty(0)).shape) != (1, hidden_size):
            raise ModelError(f"'{path}': expected score.weight of shape (1, {hidden_size}) for this policy, "
                             f"got {tuple(state.get('score.weight', torch.empty(0)).shape)}.")
        head.load_state_dict(state)
        return head


class SharedTrunkCritic:
    """V(s_t) from a value head on the actor's own trunk (lm-human-preferences' layout).

    A different model from :class:`CriticRole`'s separate critic: the value loss trains the
    actor's trunk too, and one forward pass serves both losses in the update
    (:meth:`forward_with_policy`). ``model`` is the value head alone (what the critic
    optimiser and checkpoints hold); ``policy`` is the actor's :class:`PolicyRole`.
    """

    shared_trunk = True

    def __init__(self, policy, head: ValueHead):
        self.policy = policy
        self.model = head

    def _hidden(self, rollout: Rollout) -> tuple[Tensor, Tensor]:
        """The actor trunk's (B, A, H) hidden states at the response positions, and the (B, A) ids."""
        p = self.policy
        return response_hidden(p.model, rollout.sequences, rollout.attention_mask, rollout.num_prompt_tokens,
                               p.autocast, p.compile)

    def forward(self, rollout: Rollout) -> Tensor:
        """(B, A) values with gradient (into the head and the actor's trunk); padding positions are 0."""
        hidden, _ = self._hidden(rollout)
        return self.model(hidden) * rollout.response_mask

    def values(self, rollout: Rollout) -> Tensor:
        with torch.no_grad():
            return self.forward(rollout)

    def forward_with_policy(self, rollout: Rollout, with_entropy: bool) -> tuple[Tensor, Tensor | None, Tensor]:
        """One trunk pass: the actor's (B, A) log-probs, entropies or None, and (B, A) values."""
        p = self.policy
        hidden, tokens = self._hidden(rollout)
        logp, entropy = logprobs_from_hidden(p.model, hidden, tokens, p.temperature, with_entropy)
        return logp, entropy, self.model(hidden) * rollout.response_mask
