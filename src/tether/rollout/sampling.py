"""Per-step sampling shared by the engines: the filters, the draw, and captured log-probs.

The filters follow Hugging Face ``generate``'s order and arithmetic (min-new-tokens EOS ban,
temperature, top-k, top-p) and the draw is ``torch.multinomial`` on the softmax, so with the
same torch RNG state the lean engine samples exactly the tokens ``generate`` samples.
"""

from __future__ import annotations

import torch
from torch import Tensor

from tether.algos.logprobs import token_logprobs
from tether.algos.losses import entropy_from_logits
from tether.rollout.base import SamplingParams


def filter_logits(logits: Tensor, step: int, params: SamplingParams, eos_id: int) -> Tensor:
    """(B, V) fp32 logits of step ``step`` (0-based) -> the scores the token is drawn from."""
    scores = logits
    if params.min_new_tokens and step < params.min_new_tokens:
        scores = scores.clone()
        scores[:, eos_id] = -float("inf")
    if params.greedy:
        return scores
    if params.temperature != 1.0:
        scores = scores / params.temperature
    if params.top_k:
        k = min(params.top_k, scores.shape[-1])
        kth = torch.topk(scores, k)[0][..., -1, None]
        scores = scores.masked_fill(scores < kth, -float("inf"))
    if params.top_p < 1.0:
        sorted_scores, order = torch.sort(scores, descending=False)
        cumulative = sorted_scores.softmax(dim=-1).cumsum(dim=-1)
        remove = cumulative <= (1 - params.top_p)
        remove[..., -1:] = False  # keep at least one token
        scores = scores.masked_fill(remove.scatter(1, order, remove), -float("inf"))
    return scores


def draw(scores: Tensor, params: SamplingParams) -> Tensor:
    """(B,) the next tokens: argmax when greedy, else one multinomial draw per row."""
    if params.greedy:
        return scores.argmax(dim=-1)
    return torch.multinomial(torch.softmax(scores, dim=-1), num_samples=1).squeeze(1)


def step_logprobs(logits: Tensor, tokens: Tensor, temperature: float, with_entropy: bool = True):
    """(B,) log-probs of ``tokens`` and (B,) entropies under softmax(logits / temperature).

    The unfiltered distribution, computed like :func:`tether.models.forward.response_logprobs`
    does: that is the policy PPO trains, whatever filters the draw used.
    """
    z = logits.float() / temperature
    logp = token_logprobs(z.unsqueeze(1), tokens.unsqueeze(1)).squeeze(1)
    entropy = entropy_from_logits(z) if with_entropy else None
    return logp, entropy
