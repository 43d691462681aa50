"""Records passed between the phases of an RL iteration: data only, no model objects.

Shapes: ``B`` episodes, ``P`` prompt tokens (left-padded), ``A`` response ("action") tokens
(right-padded after EOS), ``T = P + A``. Selecting rows (:func:`select_rows`) and moving to a
device (:func:`to_device`) follow from the fields: a tensor or list field with one entry per
episode is indexed, anything else is carried as is.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class Rollout:
    """Sampled responses. Everything the scoring models need, as token ids."""

    prompt_ids: Tensor  # (B, P) long, left-padded
    prompt_mask: Tensor  # (B, P) long, 1 on real prompt tokens
    response_ids: Tensor  # (B, A) long, pad after the first EOS
    response_mask: Tensor  # (B, A) long, 1 on response tokens up to and including EOS
    ended: Tensor  # (B,) bool, the response emitted EOS before the length cap
    prompts: list[str]  # (B,) prompt text, for judges and logs
    responses: list[str]  # (B,) decoded response text without special tokens
    # Log-probs and entropies of the sampled tokens computed while sampling (None when the engine
    # does not capture them): (B, A) each, 0 on padding, at the sampling temperature, from the
    # unfiltered distribution (no top-k/top-p/min-tokens masks), under the weights that sampled.
    # The actor may use them in place of a forward pass; its first-minibatch ratio check verifies
    # they agree with a fresh one.
    sampled_logprobs: Tensor | None = None
    sampled_entropy: Tensor | None = None
    # Multi-turn episodes (tether.rollout.episodes): the response holds the policy's sampled turns and
    # the environment's observation tokens between them. ``action_mask`` (B, A) long: 1 on the tokens
    # the policy sampled (the only ones with a loss, KL, entropy or value target), 0 on observation
    # tokens and padding; None: every response token was sampled. ``token_rewards`` (B, A) float: the
    # environment's per-turn rewards on the last sampled token of their turn, 0 elsewhere (None: none).
    # ``episodes``: (B,) one record per episode (its turns, tool calls and errors, truncation,
    # messages: :class:`tether.environments.base.EpisodeStats`), for metrics and logs.
    action_mask: Tensor | None = None
    token_rewards: Tensor | None = None
    episodes: list | None = None

    @property
    def loss_mask(self) -> Tensor:
        """(B, A) 1 on the response tokens the policy sampled: ``action_mask``, or the response mask."""
        return self.response_mask if self.action_mask is None else self.action_mask

    @property
    def sequences(self) -> Tensor:
        """(B, T) prompt + response ids."""
        return torch.cat([self.prompt_ids, self.response_ids], dim=1)

    @property
    def attention_mask(self) -> Tensor:
        """(B, T) 1 on real tokens (padding on both sides is 0)."""
        return torch.cat([self.prompt_mask, self.response_mask], dim=1)

    @property
    def num_prompt_tokens(self) -> int:
        return self.prompt_ids.shape[1]

    @property
    def lengths(self) -> Tensor:
        """(B,) response lengths in tokens."""
        return self.response_mask.sum(dim=1)

    def __len__(self) -> int:
        return self.prompt_ids.shape[0]


@dataclass
class Experience:
    """A rollout with everything the update needs, frozen for the update epochs.

    ``values`` is None for algorithms without a critic.
    """

    rollout: Rollout
    logprobs: Tensor  # (B, A) log pi_old(a_t | s_t) at the sampling temperature
    ref_logprobs: Tensor  # (B, A) log pi_ref(a_t | s_t), same temperature
    values: Tensor | None  # (B, A) V_old(s_t)
    scores: Tensor  # (B,) sequence score after EOS penalty / normalisation
    rewards: Tensor  # (B, A) shaped per-token reward
    advantages: Tensor  # (B, A) advantages (whitened if configured)
    returns: Tensor  # (B, A) value targets (advantages + values before whitening)
    is_weights: Tensor | None = None  # (B, A) off-policy correction weights of the surrogate (rollout.is_correction)

    def select(self, index: Tensor) -> "Experience":
        """The sub-batch of episodes ``index`` (1-D long tensor)."""
        return select_rows(self, index)

    def __len__(self) -> int:
        return len(self.rollout)


def select_rows(record, index: Tensor):
    """The rows ``index`` of a record: every tensor and list field indexed (dataclass fields are
    records themselves), ``None`` and anything else carried over."""
    rows = index.tolist()

    def pick(value):
        if isinstance(value, Tensor):
            return value[index.to(value.device)]
        if isinstance(value, list):
            return [value[i] for i in rows]
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return select_rows(value, index)
        return value

    return dataclasses.replace(record, **{f.name: pick(getattr(record, f.name)) for f in dataclasses.fields(record)})


def to_device(value, device: torch.device | str):
    """``value`` with every tensor in it on ``device``: tensors, records (dataclasses), dicts,
    lists and tuples are walked; anything else is returned as is."""
    device = torch.device(device)
    if isinstance(value, Tensor):
        return value if value.device == device else value.to(device, non_blocking=device.type == "cuda")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.replace(value, **{f.name: to_device(getattr(value, f.name), device)
                                             for f in dataclasses.fields(value)})
    if isinstance(value, dict):
        return {k: to_device(v, device) for k, v in value.items()}
    if isinstance(value, (list, tuple)) and any(isinstance(v, (Tensor, dict, list, tuple)) or dataclasses.is_dataclass(v)
                                               for v in value):
        return type(value)(to_device(v, device) for v in value)
    return value


def trim_padding(rollout: Rollout) -> Rollout:
    """A rollout without the prompt columns that are padding in every row (on the left) and the
    response columns that are padding in every row (on the right): rows picked out of a wider
    batch come back to the shape they were sampled in."""
    prompt_real = rollout.prompt_mask.bool().any(dim=0)
    response_real = rollout.response_mask.bool().any(dim=0)
    start = int(prompt_real.long().argmax()) if bool(prompt_real.any()) else rollout.prompt_mask.shape[1] - 1
    start = min(start, rollout.prompt_mask.shape[1] - 1)  # keep at least one prompt column
    end = int(response_real.nonzero().max()) + 1 if bool(response_real.any()) else 1
    cut = {"prompt_ids": (start, None), "prompt_mask": (start, None), "response_ids": (0, end),
           "response_mask": (0, end), "sampled_logprobs": (0, end), "sampled_entropy": (0, end),
           "action_mask": (0, end), "token_rewards": (0, end)}
    return dataclasses.replace(rollout, **{
        name: None if getattr(rollout, name) is None else getattr(rollout, name)[:, lo:hi]
        for name, (lo, hi) in cut.items()})
