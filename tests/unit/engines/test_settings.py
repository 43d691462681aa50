"""The engine settings carry model.padding_free to every model prepared for its device."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from tether.config import RLConfig, load_config
from tether.engines import engine_settings, prepare_models
from tether.models.packing import padding_free

PPO_MIN = ["model.name_or_path=m", "prompts=p.jsonl", "reward.models=[r]", "run.device=cpu"]


def tiny_llama() -> LlamaForCausalLM:
    config = LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=32)
    torch.manual_seed(0)
    return LlamaForCausalLM(config)


@pytest.mark.parametrize("setting, expected", [("true", True), ("false", False)])
def test_prepare_models_sets_padding_free_on_each_model(setting, expected):
    cfg = load_config(RLConfig, None, [*PPO_MIN, f"model.padding_free={setting}"])
    settings = engine_settings(cfg.run, cfg.model, cfg.cpu)
    models = [tiny_llama(), tiny_llama()]
    prepare_models(models, settings)
    assert [padding_free(m) for m in models] == [expected, expected]
