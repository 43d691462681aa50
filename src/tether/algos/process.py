"""Process supervision: rewards on the steps of a response, and the critic-free advantage they give.

A process reward model scores each *step* of a response; its step rewards sit on the tokens that
end the steps: a (B, A) tensor, zero elsewhere, as an environment's per-turn rewards are
(:mod:`tether.algos.turns`). PPO's GAE reads such dense rewards as they are. The critic-free
algorithms need a rule of their own; this is DeepSeekMath's process supervision (Shao et al. 2024,
sec. 4.1.3): every step reward is normalised by the mean and standard deviation of all the step
rewards of its prompt's group,

    r̃_j = (r_j − mean(R)) / std(R),       R = every step reward of the group's responses,

and a token's advantage is the sum of the normalised rewards of its response's steps that end at
or after it, Â_t = Σ_{end(j) ≥ t} r̃_j. With one step per response (the reward on the last token)
this is GRPO's outcome advantage at every token (:func:`tether.algos.group.group_advantages`);
the std is the sample one and ``eps`` is added to it, as there.
"""

from __future__ import annotations

import torch

from tether.algos.group import grouped
from tether.algos.masked import zero_padding
from tether.algos.turns import turn_ends


def process_advantages(step_rewards: torch.Tensor, ends: torch.Tensor, mask: torch.Tensor, group_size: int,
                       scale_by_std: bool = True, eps: float = 1e-4) -> torch.Tensor:
    """(B, A) advantages from step rewards.

    step_rewards (B, A) float: each step's reward on the token that ends it (read only where
    ``ends`` is True); ends (B, A) bool: the steps' last tokens; mask (B, A): the sampled tokens.
    Rows come in groups of ``group_size`` consecutive responses to one prompt. Returns, per
    token, the sum of the group-normalised rewards of the steps ending at or after it
    (``scale_by_std`` False: centred only, Dr. GRPO's choice), 0 where the mask is 0. A group
    whose steps number one or none has advantage 0.
    """
    if step_rewards.shape != ends.shape or ends.shape != mask.shape:
        raise ValueError(f"step_rewards {tuple(step_rewards.shape)}, ends {tuple(ends.shape)} and mask "
                         f"{tuple(mask.shape)} must have one shape")
    B, A = step_rewards.shape
    grouped(torch.zeros(B), group_size)  # the rows must split into groups
    at_end = (ends.bool() & mask.bool()).reshape(B // group_size, group_size * A)
    r = zero_padding(step_rewards.float(), ends.bool() & mask.bool()).reshape(B // group_size, group_size * A)
    count = at_end.sum(dim=1, keepdim=True).float()
    centred = zero_padding(r - r.sum(dim=1, keepdim=True) / count.clamp(min=1), at_end)
    if scale_by_std:
        std = ((centred ** 2).sum(dim=1, keepdim=True) / (count - 1).clamp(min=1)).sqrt()
        centred = centred / (std + eps)
    normalised = centred.reshape(B, A)
    to_go = normalised.flip(1).cumsum(dim=1).flip(1)  # Σ over the steps ending at or after t
    return zero_padding(to_go, mask)


def step_ends(token_ids: torch.Tensor, mask: torch.Tensor, separator_ids: list[int]) -> torch.Tensor:
    """(B, A) bool: the last token of each step of each response. A step runs up to and including
    a sampled separator token (any of ``separator_ids``); the last sampled token of each turn
    (:func:`tether.algos.turns.turn_ends`: of the response, in a single-turn one) closes a step too.
    token_ids, mask (B, A): the responses and their sampled tokens."""
    m = mask.bool()
    separators = torch.tensor(separator_ids, dtype=token_ids.dtype, device=token_ids.device)
    return (torch.isin(token_ids, separators) & m) | turn_ends(m)
