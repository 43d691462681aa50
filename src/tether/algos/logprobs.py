"""Per-token log-probabilities of label tokens under a causal LM's logits."""

from __future__ import annotations

import torch


def token_logprobs(logits: torch.Tensor, labels: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """log softmax(logits / temperature) gathered at ``labels``: logits (B, T, V), labels (B, T) -> (B, T).

    Computed as z[label] - logsumexp(z) so no full (B, T, V) log-softmax is materialised; the only
    (B, T, V) temporary is the temperature-scaled (and, for half precision, float32) copy.
    Negative labels (e.g. -100 ignore index) yield 0.
    """
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    z = logits if logits.dtype in (torch.float32, torch.float64) else logits.float()
    if temperature != 1.0:
        # Sampling used softmax(logits / T); log-probs must match it (Ziegler et al. 2019 sec. 2.2).
        z = z / temperature if z is logits else z.div_(temperature)
    safe = labels.clamp(min=0)
    picked = z.gather(-1, safe.unsqueeze(-1)).squeeze(-1)
    out = picked - torch.logsumexp(z, dim=-1)
    return torch.where(labels < 0, torch.zeros((), dtype=out.dtype, device=out.device), out)


def sampled_entropy_estimate(logprobs: torch.Tensor) -> torch.Tensor:
    """Per-token entropy estimated from the sampled tokens alone: (B, A) log-probs -> (B, A) −log p.

    For a token a drawn from p, E[−log p(a)] = H(p), so the mean of −log p over sampled tokens
    is an unbiased estimate of the mean entropy (one sample per position: noisy per token, fine
    averaged over a batch). Used when an engine returns log-probs but no entropies (vLLM).
    """
    return -logprobs
