"""The last decoder layer at the read positions only: same outputs and gradients as the full trunk."""

from __future__ import annotations

import copy
import logging

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, LlamaForSequenceClassification

from tether.models.state import state_of
from tether.engines.cpu.attention import use_fp32_attention
from tether.models import last_layer
from tether.models.forward import hidden_states, last_token_scores, response_logprobs, response_values
from tether.models.packing import set_padding_free


def llama_config(attn="sdpa", kv_heads=2, layers=2):
    config = LlamaConfig(vocab_size=64, hidden_size=32, num_hidden_layers=layers, num_attention_heads=4,
                         num_key_value_heads=kv_heads, intermediate_size=48, max_position_embeddings=64,
                         tie_word_embeddings=False, pad_token_id=0, num_labels=1)
    config._attn_implementation = attn
    return config


def pair(cls=LlamaForCausalLM, padding_free=True, **kw):
    """(trimmed, full): the same weights; the second always runs its full forward. Both pack
    their rows (the default) or both pad."""
    torch.manual_seed(0)
    model = cls(llama_config(**kw)).eval()
    full = copy.deepcopy(model)
    last_layer.run_in_full(full)
    for m in (model, full):
        set_padding_free(m, padding_free)
    return model, full


def batch():
    """Rows 0-1 left-padded prompts (P=5), row 2 with right padding after an early EOS."""
    torch.manual_seed(1)
    ids = torch.randint(1, 64, (3, 9))
    mask = torch.ones_like(ids)
    mask[0, :2] = 0
    mask[1, :1] = 0
    mask[2, -2:] = 0
    return ids, mask


def mlp_rows(model):
    """Records how many positions the last layer's MLP runs at (rows x sequence length)."""
    seen = []
    model.base_model.layers[-1].mlp.register_forward_hook(
        lambda m, args, out: seen.append(args[0].shape[0] * args[0].shape[1]))
    return seen


def test_take_positions_slice_and_per_row():
    x = torch.arange(2 * 4 * 3).reshape(2, 4, 3)
    assert torch.equal(last_layer.take_positions(x, slice(1, 3)), x[:, 1:3])
    picked = last_layer.take_positions(x, torch.tensor([[3], [0]]))
    assert picked.tolist() == [[[9, 10, 11]], [[12, 13, 14]]]


def test_mask_rows_builds_causal_rows_when_the_model_passed_none():
    rows = last_layer._mask_rows(None, slice(2, 4), batch=1, length=4, device="cpu")
    assert rows.shape == (1, 1, 2, 4)
    assert rows[0, 0].tolist() == [[True, True, True, False], [True, True, True, True]]
    per_row = last_layer._mask_rows(None, torch.tensor([[0], [2]]), batch=2, length=3, device="cpu")
    assert per_row[:, 0, 0].tolist() == [[True, False, False], [True, True, True]]


@pytest.mark.parametrize("padding_free", [False, True], ids=["padded", "packed"])
@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_trimmed_hidden_states_and_grads_match_the_full_trunk(attn, padding_free):
    model, full = pair(attn=attn, padding_free=padding_free)
    ids, mask = batch()
    seen = mlp_rows(model)
    keep = slice(4, 8)
    out = hidden_states(model, ids, mask, keep=keep)
    ref = hidden_states(full, ids, mask, keep=keep)
    assert out.shape == (3, 4, 32)
    # 3 rows x 4 kept positions; packed, only the 11 of them that are real (row 2 ends 1 early).
    assert seen[-1] == (11 if padding_free else 12), "the last layer's MLP ran at every position"
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    (out.square().sum()).backward()
    (ref.square().sum()).backward()
    for (name, p), q in zip(model.named_parameters(), full.parameters()):
        if q.grad is None:  # the LM head: not part of the trunk
            assert p.grad is None, name
            continue
        # Float summation order differs: compare against the gradient's own scale.
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-4 * float(q.grad.abs().max()), msg=name)


def test_no_padding_mask_none_path_matches():
    """Without padding SDPA gets no mask (is_causal): the kept rows need their own causal mask."""
    model, full = pair()
    ids = torch.randint(1, 64, (2, 7))
    mask = torch.ones_like(ids)
    keep = slice(3, 6)
    torch.testing.assert_close(hidden_states(model, ids, mask, keep=keep),
                               hidden_states(full, ids, mask, keep=keep), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("padding_free", [False, True], ids=["padded", "packed"])
def test_rlhf_passes_match_full_forward(padding_free):
    model, full = pair(padding_free=padding_free)
    ids, mask = batch()
    a = response_logprobs(model, ids, mask, 5, temperature=0.7, with_entropy=True)
    b = response_logprobs(full, ids, mask, 5, temperature=0.7, with_entropy=True)
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    critic, critic_full = pair(LlamaForSequenceClassification, padding_free=padding_free)
    torch.testing.assert_close(response_values(critic, ids, mask, 5), response_values(critic_full, ids, mask, 5),
                               rtol=1e-5, atol=1e-5)
    seen = mlp_rows(critic)
    torch.testing.assert_close(last_token_scores(critic, ids, mask), last_token_scores(critic_full, ids, mask),
                               rtol=1e-5, atol=1e-5)
    assert seen[-1] == 3, "the reward read one position per row but the last MLP ran at more"


def test_fp32_attention_under_bf16_autocast_matches_loosely():
    model, full = pair()
    for m in (model, full):
        use_fp32_attention(m)
    ids, mask = batch()
    out = hidden_states(model, ids, mask, autocast="bf16", keep=slice(4, 8))
    ref = hidden_states(full, ids, mask, autocast="bf16", keep=slice(4, 8))
    assert last_layer.supported(model)
    torch.testing.assert_close(out, ref, rtol=0.05, atol=0.05)


def test_other_architectures_run_in_full():
    torch.manual_seed(0)
    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=64, n_embd=32, n_layer=1, n_head=2, n_positions=32)).eval()
    assert not last_layer.supported(gpt2)
    ids, mask = batch()
    out = hidden_states(gpt2, ids, mask, keep=slice(4, 8))
    full = gpt2.base_model(input_ids=ids, attention_mask=mask).last_hidden_state
    assert out.shape == (3, 4, 32)
    assert torch.isfinite(out).all()
    assert out.shape[1] < full.shape[1]


def test_a_failed_check_turns_trimming_off(monkeypatch, caplog):
    model, full = pair()
    real = last_layer._forward_at
    monkeypatch.setattr(last_layer, "_forward_at", lambda *a, **kw: real(*a, **kw) + 1.0)
    ids, mask = batch()
    with caplog.at_level(logging.WARNING, logger="tether.models.last_layer"):
        out = hidden_states(model, ids, mask, keep=slice(4, 8))
    assert "did not match" in caplog.text
    assert state_of(model).last_layer is False
    torch.testing.assert_close(out, hidden_states(full, ids, mask, keep=slice(4, 8)), rtol=1e-5, atol=1e-5)


def test_layer_forward_is_restored_after_use():
    model, _ = pair()
    ids, mask = batch()
    hidden_states(model, ids, mask, keep=slice(4, 8))
    layer = model.base_model.layers[-1]
    assert "forward" not in vars(layer)
    assert hidden_states(model, ids, mask).shape == (3, 9, 32)
