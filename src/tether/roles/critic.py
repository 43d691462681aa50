"""The critic: a scalar-head model giving V(s_t) for every response token.

:class:`Critic` is PPO-RLHF's usual separate value model; :class:`SharedTrunkCritic` is a
value head on the actor's trunk (``critic.shared_trunk``), a different model that costs
one trunk pass in the update instead of two.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import Tensor

from tether.common.dispatch import rows
from tether.common.errors import ModelError
from tether.models.forward import response_values, scalar_head
from tether.roles.policy import minibatch_steps
from tether.roles.trained import TrainedRole
from tether.types import Experience, Rollout


class Critic(TrainedRole):
    """V(s_t) for every response token, from a scalar-head model; read where token t is
    predicted (the position before it, like the log-probs). Trained through its engine."""

    def __init__(self, engine):
        self.engine = engine

    def _values(self, module, rollout: Rollout, compile: bool | str = False) -> Tensor:
        values = response_values(module, rollout.sequences, rollout.attention_mask, rollout.num_prompt_tokens,
                                 self.engine.autocast, compile)
        return values * rollout.loss_mask  # a value only where the policy acts (0 on observations, padding)

    @rows
    def values(self, rollout: Rollout) -> Tensor:
        """(B, A) values, 0 on padding and on an episode's observation tokens; no gradient."""
        return self.engine.infer(self._values, rollout)

    def update(self, exp: Experience, minibatches: list[list[Tensor]], loss_fn, where: str = "?") -> list[dict]:
        """One optimiser step per minibatch with ``loss_fn(values, micro_batch) -> (loss, stats)``."""
        e = self.engine

        def step_loss(module, mb: Experience):
            return loss_fn(self._values(module, mb.rollout, e.compile), mb)

        return minibatch_steps(e, exp, minibatches, step_loss, "value loss", where, ("optim/critic_grad_norm",))

    def trains_alone(self) -> bool:
        """The critic has its own update (a shared-trunk one trains inside the actor's)."""
        return True

    def named_weights(self):
        return self.engine.named_weights()



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
        """Write the head to ``directory``; under FSDP call on every rank (the weights are
        gathered), with ``directory`` None on the ranks that do not write."""
        from safetensors.torch import save_file

        state = {k: (v.full_tensor() if hasattr(v, "full_tensor") else v).detach().cpu().contiguous()
                 for k, v in self.state_dict().items()}
        if directory is None:
            return
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        save_file(state, directory / VALUE_HEAD_FILE)
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

    A different model from :class:`Critic`'s separate one: the value loss trains the actor's
    trunk too, in the actor's own update (one pass and one backward serve both losses), so this
    view's :meth:`update` has nothing to do. Its checkpoint is the value head alone.
    """

    def __init__(self, actor):
        self.actor = actor

    @property
    def head(self) -> ValueHead:
        return self.actor.engine.model.value_head

    @rows
    def values(self, rollout: Rollout) -> Tensor:
        return self.actor.values(rollout)

    def update(self, exp: Experience, minibatches, loss_fn, where: str = "?") -> list[dict]:
        return []  # trained with the actor (PolicyWithValueHead)

    def trains_alone(self) -> bool:
        return False

    def named_weights(self):
        return self.head.named_parameters()

    def nonfinite(self) -> str | None:
        from tether.engines.training import first_nonfinite

        return first_nonfinite(self.head.state_dict().items())

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass

    def save_pretrained(self, directory, **kwargs) -> None:
        self.head.save_pretrained(directory)

    def export(self, directory) -> None:
        self.head.save_pretrained(directory)
