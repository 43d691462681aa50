"""Forward passes that compute only what RLHF needs.

The LM head runs only at response positions (a causal LM's head over prompt positions is
wasted work), and position ids come from the attention mask so that a left-padded batch
gets the same positions as ``generate`` gave it.
"""

from __future__ import annotations

import torch
from torch import Tensor

from tether.algos.logprobs import token_logprobs
from tether.algos.losses import entropy_from_logits
from tether.models.loading import score_head


def position_ids(attention_mask: Tensor) -> Tensor:
    """(B, T) positions counting real tokens only: left padding does not shift them."""
    return (attention_mask.long().cumsum(dim=1) - 1).clamp(min=0)


def hidden_states(model, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
    """(B, T, H) final hidden states of the decoder trunk (no LM or scalar head)."""
    out = model.base_model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids(attention_mask),
        use_cache=False,
    )
    return out.last_hidden_state


def response_logprobs(
    model,
    sequences: Tensor,
    attention_mask: Tensor,
    num_prompt_tokens: int,
    temperature: float = 1.0,
    with_entropy: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """Log-probs (and entropies) of the response tokens.

    sequences, attention_mask: (B, T) with the first ``num_prompt_tokens`` the prompt.
    Returns logp (B, A) and entropy (B, A) or None, where A = T - num_prompt_tokens.
    Logits are divided by ``temperature`` so the log-probs describe the sampling distribution.
    """
    hidden = hidden_states(model, sequences, attention_mask)
    # Position t predicts token t+1: response token j is predicted at P - 1 + j.
    hidden = hidden[:, num_prompt_tokens - 1 : -1]
    logits = model.get_output_embeddings()(hidden).float() / temperature
    logp = token_logprobs(logits, sequences[:, num_prompt_tokens:])
    entropy = entropy_from_logits(logits) if with_entropy else None
    return logp, entropy


def scalar_outputs(model, sequences: Tensor, attention_mask: Tensor) -> Tensor:
    """(B, T) the scalar head at every position of a ``*ForSequenceClassification`` model."""
    hidden = hidden_states(model, sequences, attention_mask)
    return score_head(model)(hidden).squeeze(-1).float()


def last_token_scores(model, sequences: Tensor, attention_mask: Tensor) -> Tensor:
    """(B,) the scalar head at the last real token of each row (any padding side)."""
    hidden = hidden_states(model, sequences, attention_mask)
    positions = torch.arange(sequences.shape[1], device=sequences.device)
    last = (attention_mask.long() * positions).argmax(dim=1)
    picked = hidden[torch.arange(sequences.shape[0], device=sequences.device), last]
    return score_head(model)(picked).squeeze(-1).float()
