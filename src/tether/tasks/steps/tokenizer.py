"""The multi-step world's word-level tokenizer: arith's
(:func:`tether.tasks.arith.tokenizer.word_tokenizer`) over
:data:`~tether.tasks.steps.world.VOCAB_WORDS`, with arith's chat template and 64 positions."""

from __future__ import annotations

from transformers import PreTrainedTokenizerFast

from tether.tasks.arith.tokenizer import word_tokenizer
from tether.tasks.steps.world import VOCAB_WORDS


def build_tokenizer() -> PreTrainedTokenizerFast:
    """The world's tokenizer (deterministic: ids never change)."""
    return word_tokenizer(VOCAB_WORDS)
