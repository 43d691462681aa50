"""The trimmed last layer and gradient checkpointing on every supported transformers.

transformers < 5.20 checkpoints a decoder layer in ``__call__`` and recomputes it in the backward
through the instance's ``forward``, after :func:`tether.models.last_layer.last_layer_at` has put
the full forward back: the recomputation then has other shapes (a CheckpointError, seen with
5.17, the GPU image's). The trimmed layer therefore runs without checkpointing, whatever the
version, and the layer's setting is restored after.
"""

from __future__ import annotations

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from tether.models import last_layer
from tether.models.loading import enable_gradient_checkpointing


def test_trimmed_last_layer_is_not_checkpointed_and_the_setting_comes_back():
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=16))
    enable_gradient_checkpointing(model)
    layer = last_layer.decoder_layers(model)[-1]
    assert layer.gradient_checkpointing
    with last_layer._trimmed(model, slice(2, 5)):
        assert not layer.gradient_checkpointing
        assert "forward" in vars(layer)
    assert layer.gradient_checkpointing and "forward" not in vars(layer)
    assert last_layer.decoder_layers(model)[0].gradient_checkpointing  # the other layers are untouched
