"""The memory model on hand-worked numbers (benchmarks/memory_model.py's formula)."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig

from tether.plan.memory import RoleSize, human_bytes, per_rank_bytes, role_bytes, sampling_peak_bytes
from tether.plan.params import shape_of


def test_bytes_per_role_by_dtype():
    # 1,000 trained + 500 frozen parameters: fp32 16 B and 4 B each; half weights 12 B and 2 B.
    size = RoleSize(frozen=500, trained=1000)
    assert role_bytes(size, "float32") == 1000 * 16 + 500 * 4 == 18_000
    assert role_bytes(size, "bfloat16") == 1000 * 12 + 500 * 2 == 13_000
    assert role_bytes(RoleSize(frozen=7), "float16") == 14


def test_fsdp_shards_trained_roles_only():
    roles = {"actor": RoleSize(trained=1000), "reference": RoleSize(frozen=1000), "critic": RoleSize(trained=10)}
    # 4 ranks: the actor's 16,000 B shard to 4,000; the frozen reference stays whole (4,000);
    # the critic under ddp stays whole (160); 10 x 16 / 4 would be 40 under fsdp.
    assert per_rank_bytes(roles, "float32", 4, {"actor": "fsdp", "critic": "ddp"}) == \
        {"actor": 4000, "reference": 4000, "critic": 160}
    assert per_rank_bytes(roles, "float32", 3, {"actor": "fsdp"})["actor"] == 5334  # ceil(16,000 / 3)
    assert per_rank_bytes(roles, "float32", 1, {"actor": "fsdp"})["actor"] == 16_000


def test_sampling_peak_gathers_the_rest_of_the_actor():
    # 1,000 bf16 weights (2 B) on 4 ranks: each holds a quarter and gathers the other 3/4 = 1,500 B.
    assert sampling_peak_bytes(1000, "bfloat16", 4) == 1500
    assert sampling_peak_bytes(1000, "float32", 1) == 0


def test_human_bytes():
    assert human_bytes(999) == "999 B"
    assert human_bytes(1536) == "1.5 KB"
    assert human_bytes(8_671_232) == "8.7 MB"
    assert human_bytes(2.5e12) == "2.5 TB"


TINY = LlamaConfig(vocab_size=100, hidden_size=16, intermediate_size=40, num_hidden_layers=2, num_attention_heads=4,
                   num_key_value_heads=2, tie_word_embeddings=False)


def meta(cls, config):
    with torch.device("meta"):
        return cls(config)


def test_parameter_counts_of_a_meta_model_equal_the_built_model():
    from transformers import LlamaForCausalLM

    shape = shape_of(meta(LlamaForCausalLM, TINY))
    assert shape.params == LlamaForCausalLM(TINY).num_parameters() and shape.architecture == "LlamaForCausalLM"
    # Hand count: embeddings 100x16, per layer q 16x16, k,v 16x8, o 16x16, gate,up 16x40, down 40x16, two norms 16,
    # final norm 16, lm_head 16x100.
    per_layer = 256 + 128 + 128 + 256 + 640 + 640 + 640 + 32
    assert shape.params == 1600 + 2 * per_layer + 16 + 1600


@pytest.mark.parametrize("model, lora", [
    ("llama", {"target_modules": ["all-linear"]}),
    ("llama", {"target_modules": ["q_proj", "v_proj"]}),
    ("llama", {"target_modules": ["q_proj"], "modules_to_save": ["norm"]}),
    ("gpt2", {"target_modules": ["all-linear"]}),  # Conv1D layers: a count by nn.Linear saw none of them
])
def test_trained_parameters_as_set_up_equal_peft(model, lora):
    """The dry run sets a trained model up on the meta device as the run does (peft itself), so
    its trained/frozen split is the run's: checked against peft on a real model."""
    import warnings

    from peft import LoraConfig, get_peft_model
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaForCausalLM

    from tether.config.common import LoRAConfig
    from tether.plan.meta_models import set_up

    cls, config = (LlamaForCausalLM, TINY) if model == "llama" else \
        (GPT2LMHeadModel, GPT2Config(vocab_size=100, n_positions=16, n_embd=16, n_layer=2, n_head=2))
    size = set_up(meta(cls, config), LoRAConfig(r=4, **lora), False, False, "lora")
    targets = lora["target_modules"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        real = get_peft_model(cls(config), LoraConfig(
            r=4, target_modules="all-linear" if targets == ["all-linear"] else targets,
            modules_to_save=lora.get("modules_to_save"), fan_in_fan_out=model == "gpt2"))
    trained = sum(p.numel() for p in real.parameters() if p.requires_grad)
    assert size == RoleSize(frozen=sum(p.numel() for p in real.parameters()) - trained, trained=trained)
    assert trained > 0
    if targets == ["q_proj", "v_proj"]:  # by hand: r x (in + out) per layer = 4 x (16 + 16) + 4 x (16 + 8), 2 layers
        assert trained == 448
