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


# -- the peak: activations, logits, the KV cache per phase (hand-worked) -----------------------------

from tether.plan.memory import (Shape, Workload, activation_bytes, autocast_copy_bytes, bench_roles,  # noqa: E402
                                decode_bytes, decode_copy_bytes, head_bytes, inference_activation_bytes, kv_cache_bytes,
                                layer_activation_bytes, predict_peak, sft_head_bytes)

# hidden 16, 4 heads of 4 (q 16), 2 KV heads (kv 8), MLP 40, 2 layers, vocabulary 100.
SHAPE = Shape(hidden=16, intermediate=40, layers=2, heads=4, kv_heads=2, vocab=100)


def test_shape_of_a_config_and_its_parameter_count():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(vocab_size=100, hidden_size=16, intermediate_size=40, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)
    shape = Shape.of(config)
    assert shape == Shape(hidden=16, intermediate=40, layers=2, heads=4, kv_heads=2, vocab=100, tied=True)
    assert (shape.hd, shape.q, shape.kv) == (4, 16, 8)
    # Qwen2 (q/k/v biases), tied: the meta model's own count.
    assert shape.causal_lm_params() == shape_of(meta(Qwen2ForCausalLM, config)).params
    # Per layer: r (in + out) of q 16->16, k, v 16->8, o 16->16, gate, up 16->40, down 40->16; r = 2, 2 layers.
    assert shape.lora_params(2) == 2 * 2 * (32 + 24 + 24 + 32 + 56 + 56 + 56)


def test_layer_activations_by_hand():
    # fp32, per token: norms 4 x 16 x 4 B = 256; attention 5 x 16 + MLP 4 x 40 = 240 elements x 4 B = 960.
    assert layer_activation_bytes(SHAPE, 10, compute=4) == 10 * (256 + 960)
    # bf16 autocast over fp32: norms 256 + their casts 2 x 16 x 2 = 64 + 240 x 2 = 480.
    assert layer_activation_bytes(SHAPE, 10, compute=2) == 10 * (256 + 64 + 480)
    # model.dtype bfloat16: everything half, no casts: 4 x 16 x 2 + 240 x 2.
    assert layer_activation_bytes(SHAPE, 10, compute=2, residual=2) == 10 * (128 + 480)


def test_activations_with_and_without_checkpointing():
    layer = 12_160  # 10 tokens, fp32 (above)
    ends = 3 * 10 * 16 * 4  # embedding output, final norm in and out
    # Without: both layers' kept + one layer's backward working set.
    assert activation_bytes(SHAPE, 10, 4, checkpointing=False) == 2 * layer + layer + ends == 38_400
    # With: each layer's input (10 x 16 x 4 B), one recomputed layer, the working set.
    assert activation_bytes(SHAPE, 10, 4, checkpointing=True) == 2 * 640 + layer + layer + ends == 27_520
    assert inference_activation_bytes(SHAPE, 10, 4) == layer + 2 * 640


def test_head_buffers_at_response_positions():
    # 6 positions x 100 tokens x 4 B = 2,400 B a buffer.
    assert head_bytes(6, 100, grad=False) == 2 * 2400  # logits + logsumexp's temporary
    assert head_bytes(6, 100, grad=True) == 4 * 2400  # + the gather's gradient, logsumexp's exp and product
    assert head_bytes(6, 100, grad=True, entropy=True) == 7 * 2400
    assert head_bytes(6, 100, grad=True, chunk=2) == 5 * 800  # one chunk of 2 positions at a time, recomputed
    assert head_bytes(6, 100, grad=False, chunk=2) == 3 * 800
    assert head_bytes(6, 100, grad=False, chunk=50) == 2 * 2400  # a chunk above the positions: all of them
    # SFT: every position via the model's logits: fp32 4 buffers; bf16 logits add 2 half-size ones.
    assert sft_head_bytes(6, 100, 4) == 4 * 2400
    assert sft_head_bytes(6, 100, 2) == 4 * 2400 + 2 * 1200


def test_kv_cache_and_decode():
    # 2 (k and v) x 2 layers x 8 (2 KV heads x 4) x 20 tokens x batch 3 x 2 B.
    assert kv_cache_bytes(SHAPE, 3, 20, 2) == 2 * 2 * 8 * 20 * 3 * 2 == 3840
    # One layer's cache copied as it grows + 4 fp32 [3, 100] sampling buffers.
    assert decode_bytes(SHAPE, 3, 20, 2) == 2 * 8 * 20 * 3 * 2 + 4 * 3 * 100 * 4


def test_autocast_copies():
    linears = 2 * (16 * 16 + 2 * 16 * 8 + 16 * 16 + 3 * 16 * 40)  # 2 layers of q, k, v, o, gate, up, down
    full, lora = RoleSize(trained=1), RoleSize(frozen=1, trained=1)
    assert autocast_copy_bytes(SHAPE, full, True, True, 4, 4) == 0  # no autocast
    assert autocast_copy_bytes(SHAPE, full, False, True, 2, 4) == 2 * linears  # trained: cached
    assert autocast_copy_bytes(SHAPE, lora, True, False, 2, 4) == 2 * linears  # frozen, kept for backward
    assert autocast_copy_bytes(SHAPE, lora, True, True, 2, 4) == 2 * linears // 2  # one layer at a time


def test_sft_peak_by_hand():
    # 1,000 trained fp32 parameters; one example of 5 tokens; no process baseline.
    peak = predict_peak(SHAPE, {"policy": RoleSize(trained=1000)}, Workload("sft", micro_batch=1, seq=5), baseline=0)
    per_layer = 5 * 1216
    split = peak["split"]
    assert (split["weights"], split["gradients"], split["optimizer"]) == (4000, 4000, 8000)
    assert split["activations"] == 3 * per_layer + 3 * 5 * 64
    assert split["logits"] == 4 * 4 * 100 * 4  # 4 positions predict the next token
    assert split["optimizer_step"] == 0  # AdamW's step comes after the backward, and needs less here
    assert peak["total"] == split["total"] == 4000 + 4000 + 8000 + 18_240 + 960 + 6400
    # A larger vocabulary: AdamW's two temporaries of the embedding's size (fp32) outgrow the backward's buffers
    # (the 2,000 x 16 embedding's 256,000 B against activations 19,200 + logits 4 x 4 x 2,000 x 4 = 147,200).
    wide = predict_peak(Shape(16, 40, 2, 4, 2, vocab=2000), {"policy": RoleSize(trained=1000)},
                        Workload("sft", micro_batch=1, seq=5), baseline=0)["split"]
    assert (wide["optimizer_step"], wide["activations"], wide["logits"]) == (2 * 2000 * 16 * 4, 0, 0)
    assert wide["total"] == 4000 + 4000 + 8000 + 256_000
    assert peak["phase"] == "update" and set(peak["phases"]) == {"update"}
    # cpu.retain_memory: the heap keeps what the backward freed, and AdamW's temporaries come beside it.
    kept = predict_peak(Shape(16, 40, 2, 4, 2, vocab=2000), {"policy": RoleSize(trained=1000)},
                        Workload("sft", micro_batch=1, seq=5, retained_heap=True), baseline=0)["split"]
    assert (kept["optimizer_step"], kept["activations"], kept["logits"]) == (256_000, 19_200, 128_000)
    assert kept["total"] == 4000 + 4000 + 8000 + 256_000 + 19_200 + 128_000


def test_rl_phases_and_the_peak():
    roles = bench_roles(SHAPE, "ppo", None)
    assert set(roles) == {"actor", "reference", "critic", "reward"}
    run = Workload("ppo", micro_batch=2, batch=4, prompt=6, response=4)
    peak = predict_peak(SHAPE, roles, run, baseline=100)
    assert set(peak["phases"]) == {"rollout", "logprobs", "update"}
    rollout, update = peak["phases"]["rollout"], peak["phases"]["update"]
    assert rollout["kv_cache"] == kv_cache_bytes(SHAPE, 4, 10, 4) and update["kv_cache"] == 0
    assert update["gradients"] == roles["actor"].trained * 4  # the larger of the two trained roles' passes
    assert peak["total"] == max(p["total"] for p in peak["phases"].values())
    assert rollout["baseline"] == 100 and rollout["weights"] == sum(
        (r.trained + r.frozen) * 4 for r in roles.values())
    # GRPO: no critic; LoRA: no reference copy, the adapters alone trained.
    grpo = bench_roles(SHAPE, "grpo", 2)
    assert set(grpo) == {"actor", "reference", "reward"} and grpo["reference"] == RoleSize()
    assert grpo["actor"].trained == SHAPE.lora_params(2)
    # The decode loop's oneDNN-packed linears (4 B a weight) while generating: none of this shape's reach
    # 2**22 multiply-accumulates at batch 4; all of them at batch 2**18 / 16 (the smallest, k and v, 16 x 8).
    packed = predict_peak(SHAPE, roles, Workload("ppo", 2, 4, prompt=6, response=4, decode_copy=4), baseline=100)
    assert packed["phases"]["rollout"]["weight_copies"] == 0
    linears = 2 * (16 * 16 + 2 * 16 * 8 + 16 * 16 + 3 * 16 * 40)
    assert decode_copy_bytes(SHAPE, 2**22 // 128, 4) == 4 * (linears + 100 * 16)
    # Batch 4 at a real shape (Qwen2.5-0.5B): gate, up and down (896 x 4864: 17.4M MACs) and the head
    # (896 x 151,936) are packed; q and o (896 x 896: 3.2M) and k, v are not.
    qwen = Shape(hidden=896, intermediate=4864, layers=24, heads=14, kv_heads=2, vocab=151_936)
    assert decode_copy_bytes(qwen, 4, 4) == 4 * (24 * 3 * 896 * 4864 + 896 * 151_936)
    assert packed["phases"]["update"] == update
    # The update's two threads (parallel_roles) beside what the main thread's rollout freed and glibc kept.
    threads = predict_peak(SHAPE, roles, Workload("ppo", 2, 4, prompt=6, response=4, parallel_roles=True,
                                                  retained_heap=True), baseline=0)["phases"]
    def transient(phase):
        return threads[phase]["total"] - threads[phase]["weights"] - threads[phase]["optimizer"]

    assert threads["update"]["retained"] == max(transient("rollout"), transient("logprobs")) > 0
    assert threads["update"]["gradients"] == (roles["actor"].trained + roles["critic"].trained) * 4
    chunked = predict_peak(SHAPE, roles, Workload("ppo", 2, 4, prompt=6, response=4, logprob_chunk=2))
    assert chunked["phases"]["update"]["logits"] == head_bytes(8, 100, True, chunk=2) == 5 * 2 * 100 * 4


def test_sft_peak_on_cuda_by_hand():
    # The caching allocator reuses what the head's backward freed: the update counts what the forward
    # kept plus the larger of the head's buffers (two fp32 [4, 100]: 3,200 B) and the trunk's backward
    # working set, not both. Same 5-token example as above: one layer keeps 5 x 1,216 B.
    layer, ends = 5 * 1216, 3 * 5 * 16 * 4
    run = Workload("sft", micro_batch=1, seq=5, device="cuda")
    split = predict_peak(SHAPE, {"policy": RoleSize(trained=1000)}, run, baseline=0)["split"]
    assert split["logits"] == 2 * 4 * 100 * 4
    assert split["activations"] + split["logits"] == (2 * layer + ends) + max(layer, 3200) == 19_200
    assert split["total"] == 4000 + 4000 + 8000 + 19_200
    # Checkpointing: each layer's input kept (2 x 5 x 16 x 4 B); working: the recomputed layer and its backward.
    ckpt = predict_peak(SHAPE, {"policy": RoleSize(trained=1000)},
                        Workload("sft", micro_batch=1, seq=5, grad_ckpt=True, device="cuda"), baseline=0)["split"]
    assert ckpt["activations"] + ckpt["logits"] == (640 + ends) + max(2 * layer, 3200) == 13_760
    cpu = predict_peak(SHAPE, {"policy": RoleSize(trained=1000)},
                       Workload("sft", micro_batch=1, seq=5, grad_ckpt=True), baseline=0)["split"]
    assert cpu["activations"] + cpu["logits"] == (640 + ends) + 2 * layer + 4 * 4 * 100 * 4  # RSS: they add up
