"""Padding-free packing: the layout's pure functions on hand-worked values, the grouped attention
against per-row attention, and the once-per-model decision (config reasons, the packed-vs-padded
check, the setting)."""

from __future__ import annotations

import logging

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM

from tether.models import packing
from tether.models.forward import check_packing, hidden_states, packs


def test_pack_rows_left_and_right_padding():
    mask = torch.tensor([[0, 1, 1], [1, 1, 0], [1, 1, 1]])
    rows = packing.pack_rows(mask)
    assert rows.index.tolist() == [1, 2, 3, 4, 6, 7, 8]
    assert rows.position_ids.tolist() == [[0, 1, 0, 1, 0, 1, 2]]
    assert rows.slot.tolist() == [-1, 0, 1, 2, 3, -1, 4, 5, 6]
    assert rows.lengths == [2, 2, 3]
    assert rows.tokens == 7
    ids = torch.tensor([[9, 10, 11], [12, 13, 14], [15, 16, 17]])
    assert rows.gather(ids).tolist() == [[10, 11, 12, 13, 15, 16, 17]]


def test_pack_rows_skips_holes_and_counts_positions_over_real_tokens():
    rows = packing.pack_rows(torch.tensor([[1, 0, 1, 1]]))
    assert rows.index.tolist() == [0, 2, 3]
    assert rows.position_ids.tolist() == [[0, 1, 2]]  # as the padded pass's position_ids


def test_unpack_puts_zeros_on_padding_and_keeps_gradients():
    rows = packing.pack_rows(torch.tensor([[0, 1], [1, 1]]))
    packed = torch.tensor([[1.0], [2.0], [3.0]], requires_grad=True)
    out = rows.unpack(packed)
    assert out.tolist() == [[[0.0], [1.0]], [[2.0], [3.0]]]
    out.sum().backward()
    assert packed.grad.tolist() == [[1.0], [1.0], [1.0]]


def test_kept_maps_a_slice_and_per_row_positions():
    rows = packing.pack_rows(torch.tensor([[0, 1, 1, 1], [1, 1, 1, 0]]))  # packed: row 0 -> 0..2, row 1 -> 3..5
    packed, where = rows.kept(slice(1, 4))  # (B, K=3) positions 1, 2, 3 of each row
    assert packed.tolist() == [0, 1, 2, 4, 5]
    assert where.tolist() == [0, 1, 2, 3, 4]  # row 1's position 3 is padding: slot 5 stays empty
    last = torch.tensor([[3], [2]])
    packed, where = rows.kept(last)
    assert packed.tolist() == [2, 5] and where.tolist() == [0, 1]
    values = torch.tensor([[7.0], [8.0]])
    assert rows.scatter_kept(values, where, 1).tolist() == [[[7.0]], [[8.0]]]
    out = rows.scatter_kept(torch.arange(5.0)[:, None], rows.kept(slice(1, 4))[1], 3)
    assert out[:, :, 0].tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 0.0]]


def test_attention_groups_hand_worked():
    lengths, starts = [4, 10, 9, 5], [0, 4, 14, 23]
    groups, restore = packing.attention_groups(lengths, starts)
    assert [(g.rows, g.width) for g in groups] == [(2, 10), (2, 5)]
    first, second = groups
    assert first.gather.tolist() == list(range(4, 14)) + list(range(14, 23)) + [22]
    assert first.real.tolist() == [True] * 19 + [False]
    # Row 3 (5 tokens at 23..27), then row 0 (4 tokens at 0..3, its padding slot repeating token 3).
    assert second.gather.tolist() == [23, 24, 25, 26, 27, 0, 1, 2, 3, 3]
    assert second.real.tolist() == [True] * 9 + [False]
    read = torch.cat([g.gather[g.real] for g in groups])
    assert read[restore].tolist() == list(range(28))


def test_attention_groups_start_a_new_group_below_the_fill():
    groups, _ = packing.attention_groups([3, 4], [0, 3], fill=0.8)  # 3 < 0.8 * 4
    assert [(g.rows, g.width) for g in groups] == [(1, 4), (1, 3)]
    groups, _ = packing.attention_groups([3, 4], [0, 3], fill=0.75)
    assert [(g.rows, g.width) for g in groups] == [(2, 4)]


@pytest.mark.parametrize("fill", [0.0, 0.8, 1.0])
def test_grouped_attention_equals_each_row_alone(fill):
    torch.manual_seed(0)
    mask = torch.tensor([[0, 0, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1], [0, 1, 1, 0, 0, 0], [0, 0, 0, 1, 1, 1]])
    rows = packing.pack_rows(mask, fill=fill)
    q, k, v = (torch.randn(1, 2, rows.tokens, 8) for _ in range(3))
    out = packing._grouped_attention(q, k, v, rows, 0.0, None)  # (1, N, H, d)
    start = 0
    for n in rows.lengths:
        part = slice(start, start + n)
        alone = torch.nn.functional.scaled_dot_product_attention(q[:, :, part], k[:, :, part], v[:, :, part],
                                                                 is_causal=True)
        torch.testing.assert_close(out[:, part], alone.transpose(1, 2), atol=1e-6, rtol=1e-5)
        start += n


def test_packed_sdpa_repeats_grouped_query_heads():
    torch.manual_seed(0)
    rows = packing.pack_rows(torch.tensor([[1, 1, 1], [0, 1, 1]]))
    q, k, v = torch.randn(1, 4, 5, 8), torch.randn(1, 2, 5, 8), torch.randn(1, 2, 5, 8)
    out, _ = packing.packed_sdpa(None, q, k, v, None, tether_packing=rows)
    first = torch.nn.functional.scaled_dot_product_attention(q[:, :, :3], k[:, :, :3].repeat_interleave(2, 1),
                                                             v[:, :, :3].repeat_interleave(2, 1), is_causal=True)
    torch.testing.assert_close(out[:, :3], first.transpose(1, 2))


def _llama(**extra):
    values = dict(num_hidden_layers=2, hidden_size=32, num_attention_heads=4, num_key_value_heads=2,
                  intermediate_size=64, vocab_size=50) | extra
    config = LlamaConfig(**values)
    config._attn_implementation = "sdpa"
    return LlamaForCausalLM(config).eval()


MASK = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1], [0, 1, 1, 1, 0]])


def test_setting_defaults_on_and_follows_the_wrapped_model():
    from tether.roles.policy import PolicyWithValueHead

    model = _llama()
    assert packing.padding_free(model)
    wrapper = PolicyWithValueHead(model, torch.nn.Linear(32, 1))
    packing.set_padding_free(wrapper, False)
    assert not packing.padding_free(model)
    assert not packs(model, MASK)


def test_a_batch_without_padding_is_not_packed_but_the_check_runs_at_the_first_pass():
    """The check runs at a model's first pass whatever its batch (on its own rows), so every
    data-parallel rank checks at the same pass; a batch without padding then runs padded."""
    model = _llama()
    assert not packs(model, torch.ones(2, 4, dtype=torch.long))
    assert packing.verdict(model) == (True, "")
    assert packs(model, MASK)


def test_the_check_keeps_the_training_mode_and_draws_nothing_from_the_run():
    model = _llama(attention_dropout=0.5).train()
    torch.manual_seed(3)
    expected = torch.rand(3)
    torch.manual_seed(3)
    assert check_packing(model)  # in eval mode: dropout off, so padded and packed compare
    assert model.training
    assert torch.equal(torch.rand(3), expected)


def test_sliding_window_attention_pads_and_says_why(caplog):
    config = MistralConfig(num_hidden_layers=1, hidden_size=32, num_attention_heads=4, num_key_value_heads=2,
                           intermediate_size=64, vocab_size=50, sliding_window=4)
    config._attn_implementation = "sdpa"
    model = MistralForCausalLM(config).eval()
    with caplog.at_level(logging.WARNING):
        assert not packs(model, MASK)
    assert "sliding-window" in caplog.text and "padded" in caplog.text
    assert not packs(model, MASK)
    assert caplog.text.count("padding-free batches are off") == 1  # said once


def test_an_unknown_attention_implementation_pads():
    model = _llama()
    model.config._attn_implementation = "paged|sdpa"
    assert packing.static_reason(model) == "its attention implementation 'paged|sdpa' has no packed-sequence support"


def test_a_model_whose_attention_mixes_rows_fails_the_check(monkeypatch, caplog):
    """An attention that lets rows see each other (here: the packed layout ignored) is caught by
    the check against the padded forward, and the model pads."""
    def across_rows(query, key, value, rows, dropout, scaling):
        return torch.nn.functional.scaled_dot_product_attention(query, key, value, is_causal=True).transpose(1, 2)

    monkeypatch.setattr(packing, "_grouped_attention", across_rows)
    model = _llama(num_key_value_heads=4)
    with caplog.at_level(logging.WARNING):
        assert not check_packing(model, MASK)
    assert "did not match its padded forward" in caplog.text
    ids = torch.randint(0, 50, MASK.shape)
    out = hidden_states(model, ids, MASK)  # padded, as before: padding positions have values
    assert out.shape == (3, 5, 32) and bool(out[0, 0].abs().sum() > 0)


def test_gpt2_reordered_attention_packs_through_transformers_mask():
    """GPT-2's reordered-and-upcast attention is its own code: under eager, transformers' packed
    block mask keeps its rows apart, and the check passes."""
    config = GPT2Config(n_layer=1, n_embd=32, n_head=4, vocab_size=50, reorder_and_upcast_attn=True,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0)
    config._attn_implementation = "eager"
    assert check_packing(GPT2LMHeadModel(config).eval(), MASK)


def test_packed_hidden_states_match_padded_and_read_zero_on_padding():
    torch.manual_seed(0)
    model = _llama()
    ids = torch.randint(0, 50, MASK.shape)
    packing.set_padding_free(model, False)
    padded = hidden_states(model, ids, MASK)
    packing.set_padding_free(model, True)
    packed = hidden_states(model, ids, MASK)
    real = MASK.bool()
    torch.testing.assert_close(packed[real], padded[real], atol=1e-5, rtol=1e-5)
    assert bool((packed[~real] == 0).all())
    assert model.config._attn_implementation == packing.PACKED_SDPA  # SDPA for passes that do not pack


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_weights_pass_the_check(dtype):
    """The check's tolerance follows the weights' dtype: a bf16 or fp16 model's own rounding is
    not mistaken for rows seeing each other (which the fp32 test above catches)."""
    model = _llama(num_hidden_layers=4, hidden_size=128, intermediate_size=256).to(dtype)
    assert check_packing(model, torch.tensor([[0, 0, 1, 1, 1, 1, 1, 1], [1] * 8, [0, 1, 1, 1, 1, 1, 0, 0]]))
