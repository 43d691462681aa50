"""The memory model on hand-worked numbers (benchmarks/memory_model.py's formula)."""

from __future__ import annotations

from types import SimpleNamespace

import torch
from transformers import LlamaConfig

from tether.plan.memory import RoleSize, human_bytes, per_rank_bytes, role_bytes, sampling_peak_bytes
from tether.plan.params import lora_params, model_shape, role_size


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


def test_parameter_counts_from_the_config_equal_the_built_model():
    shape = model_shape(TINY, scalar=False)
    from transformers import LlamaForCausalLM, LlamaForSequenceClassification

    assert shape.params == LlamaForCausalLM(TINY).num_parameters()
    # Hand count: embeddings 100x16, per layer q 16x16, k,v 16x8, o 16x16, gate,up 16x40, down 40x16, two norms 16,
    # final norm 16, lm_head 16x100.
    per_layer = 256 + 128 + 128 + 256 + 640 + 640 + 640 + 32
    assert shape.params == 1600 + 2 * per_layer + 16 + 1600
    scalar = model_shape(TINY, scalar=True)
    assert scalar.params == LlamaForSequenceClassification(TINY.__class__(**{**TINY.to_dict(), "num_labels": 1})).num_parameters()
    assert scalar.params == shape.params - 1600 + 16 and scalar.head_params == 16


def test_lora_adapter_count_equals_peft():
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaForCausalLM

    for targets in (["all-linear"], ["q_proj", "v_proj"]):
        lora = SimpleNamespace(r=4, target_modules=targets, enabled=True)
        shape = model_shape(TINY, scalar=False)
        torch.manual_seed(0)
        peft_model = get_peft_model(LlamaForCausalLM(TINY), LoraConfig(r=4, target_modules=targets[0] if targets ==
                                                                        ["all-linear"] else targets))
        trainable = sum(p.numel() for p in peft_model.parameters() if p.requires_grad)
        assert lora_params(shape, lora) == trainable, targets
    # By hand for q and v: r x (in + out) per layer = 4 x (16 + 16) + 4 x (16 + 8) = 224, two layers.
    assert lora_params(shape, SimpleNamespace(r=4, target_modules=["q_proj", "v_proj"])) == 448


def test_role_size_full_frozen_and_lora():
    shape = model_shape(TINY, scalar=True)
    assert role_size(shape, trained=False) == RoleSize(frozen=shape.params)
    assert role_size(shape, trained=True) == RoleSize(trained=shape.params)
    lora = SimpleNamespace(r=2, target_modules=["q_proj"], enabled=True)
    # The scalar head trains in full beside the adapters: 2 x (16 + 16) x 2 layers + 16.
    assert role_size(shape, True, lora, head_trained=True) == RoleSize(frozen=shape.params - 16, trained=128 + 16)
