"""Loading Hugging Face models by hub id or path, and the forward passes RLHF needs."""

from tether.models.loading import (
    context_length,
    disable_dropout,
    load_causal_lm,
    load_scalar_model,
    load_tokenizer,
    score_head,
    score_offset,
)

__all__ = [
    "context_length",
    "disable_dropout",
    "load_causal_lm",
    "load_scalar_model",
    "load_tokenizer",
    "score_head",
    "score_offset",
]
