"""The arith task's base policy: a tiny randomly initialised Llama (~0.5M parameters).

No pretraining is needed for this world: SFT from random init on the
demonstrations is enough.  The config is small enough for a 2-core CPU
(hidden 128, 2 layers, 4 heads, FFN 512, tied embeddings, 64 positions).
"""

from __future__ import annotations

import torch
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerBase

HIDDEN_SIZE = 128
NUM_LAYERS = 2
NUM_HEADS = 4
INTERMEDIATE_SIZE = 512
MAX_POSITIONS = 64


#: The sizes of the demo's policies: ``base`` (the demo's own) and ``small`` (a student for
#: on-policy distillation, ~0.12M parameters, one quarter of the base's).
SIZES = {"base": dict(hidden_size=HIDDEN_SIZE, intermediate_size=INTERMEDIATE_SIZE, num_hidden_layers=NUM_LAYERS,
                      num_attention_heads=NUM_HEADS),
         "small": dict(hidden_size=64, intermediate_size=256, num_hidden_layers=2, num_attention_heads=2)}


def build_config(tokenizer: PreTrainedTokenizerBase, max_positions: int = MAX_POSITIONS,
                 size: str = "base") -> LlamaConfig:
    """The tiny Llama's config for ``tokenizer``'s vocabulary, ``max_positions`` positions, of
    ``size`` (:data:`SIZES`)."""
    shape = SIZES[size]
    return LlamaConfig(
        vocab_size=len(tokenizer),
        **shape,
        num_key_value_heads=shape["num_attention_heads"],
        max_position_embeddings=max_positions,
        tie_word_embeddings=True,
        attention_dropout=0.0,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )


def build_base_model(tokenizer: PreTrainedTokenizerBase, seed: int,
                     max_positions: int = MAX_POSITIONS, size: str = "base") -> LlamaForCausalLM:
    """A freshly initialised :class:`LlamaForCausalLM` for ``tokenizer``, a pure function of ``seed``
    (``max_positions``: its context length; ``size``: one of :data:`SIZES`).

    The global torch RNG state is left untouched.
    """
    config = build_config(tokenizer, max_positions, size)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    gen = model.generation_config
    gen.bos_token_id = tokenizer.bos_token_id
    gen.eos_token_id = tokenizer.eos_token_id
    gen.pad_token_id = tokenizer.pad_token_id
    model.eval()
    return model
