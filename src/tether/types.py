"""Records passed between the phases of a PPO iteration.

Shapes: ``B`` episodes, ``P`` prompt tokens (left-padded), ``A`` response ("action") tokens
(right-padded after EOS), ``T = P + A``.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

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
    # unfiltered distribution (no top-k/top-p/min-tokens masks). ``sampled_by`` is the model that
    # sampled: only that model's role may use them in place of a forward pass.
    sampled_logprobs: Tensor | None = None
    sampled_entropy: Tensor | None = None
    sampled_by: object = None

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


@dataclass
class Experience:
    """A rollout with everything PPO needs, frozen for the update epochs."""

    rollout: Rollout
    logprobs: Tensor  # (B, A) log pi_old(a_t | s_t) at the sampling temperature
    ref_logprobs: Tensor  # (B, A) log pi_ref(a_t | s_t), same temperature
    values: Tensor  # (B, A) V_old(s_t)
    scores: Tensor  # (B,) sequence score after EOS penalty / normalisation
    rewards: Tensor  # (B, A) shaped per-token reward
    advantages: Tensor  # (B, A) GAE advantages (whitened if configured)
    returns: Tensor  # (B, A) advantages + values (before whitening)

    def select(self, index: Tensor) -> "Experience":
        """The sub-batch of episodes ``index`` (1-D long tensor)."""
        ro = self.rollout
        sub_rollout = replace(
            ro,
            prompt_ids=ro.prompt_ids[index],
            prompt_mask=ro.prompt_mask[index],
            response_ids=ro.response_ids[index],
            response_mask=ro.response_mask[index],
            ended=ro.ended[index],
            prompts=[ro.prompts[i] for i in index.tolist()],
            responses=[ro.responses[i] for i in index.tolist()],
            sampled_logprobs=None if ro.sampled_logprobs is None else ro.sampled_logprobs[index],
            sampled_entropy=None if ro.sampled_entropy is None else ro.sampled_entropy[index],
        )
        tensors = {
            f.name: getattr(self, f.name)[index] for f in fields(self) if f.name != "rollout"
        }
        return Experience(rollout=sub_rollout, **tensors)
