"""FLOP accounting checked by hand on a toy model, and against the bench sizes' parameter counts
(docs/performance.md)."""

from __future__ import annotations

import pytest

from tether.bench.flops import ModelDims, generate, iteration_flops, policy_forward, scalar_forward
from tether.bench.setup import SIZES

TOY = ModelDims(hidden=4, layers=1, heads=2, ffn=8, vocab=10)


def test_toy_parameter_counts_by_hand():
    # q, o: 4x4 each; k, v: 4x(2 heads x 2 dims) each; gate, up, down: 4x8 each.
    assert TOY.trunk_params == 16 + 16 + 16 + 16 + 3 * 32 == 160
    assert TOY.lm_head_params == 40
    # + input embedding 40 + norms (2 per layer + final) x 4.
    assert TOY.total_params == 160 + 40 + 40 + 3 * 4


def test_grouped_query_attention_shrinks_k_and_v():
    gqa = ModelDims(hidden=8, layers=1, heads=4, ffn=8, vocab=10, kv_heads=2)
    # q, o: 8x8; k, v: 8 x (2 kv heads x 2 dims); MLP 3 x 8 x 8.
    assert gqa.trunk_params == 64 + 64 + 2 * 8 * 4 + 3 * 64


def test_toy_phase_flops_by_hand():
    # One episode: 3 prompt tokens, 2 response tokens, 2 epochs.
    assert generate(TOY, 3, 2) == 2 * (160 * 4 + 40 * 2) == 1440  # last sampled token never re-enters
    assert policy_forward(TOY, 5, 2) == 2 * (160 * 5 + 40 * 2) == 1760
    assert scalar_forward(TOY, 5, 2) == 2 * (160 * 5 + 4 * 2) == 1616
    out = iteration_flops(TOY, TOY, [3], [2], epochs=2)
    assert out == {
        "generate": 1440,
        "logprobs": 1760,
        "ref_logprobs": 1760,
        "values": 1616,
        "reward": 2 * (160 * 5 + 4 * 1),
        "update": 2 * 3 * (1760 + 1616),  # epochs x (forward + backward = 3 forwards) x (actor + critic)
        "total": 1440 + 1760 + 1760 + 1616 + 1608 + 20256,
    }


def test_shared_trunk_phase_flops_by_hand():
    # The critic is a value head on the actor: its values cost a policy-trunk pass with a
    # hidden x 1 head, and the update trains one trunk (LM head at 2 positions, value head at 2).
    out = iteration_flops(TOY, TOY, [3], [2], epochs=2, shared_trunk=True)
    assert out["values"] == 2 * (160 * 5 + 4 * 2) == 1616
    assert out["update"] == 2 * 3 * (1760 + 2 * 4 * 2) == 10656
    assert out["reward"] == 2 * (160 * 5 + 4 * 1)


def test_flops_add_over_episodes():
    one = iteration_flops(TOY, TOY, [3], [2], 2)
    two = iteration_flops(TOY, TOY, [3, 3], [2, 2], 2)
    assert two == {k: 2 * v for k, v in one.items()}
    with pytest.raises(ValueError):
        iteration_flops(TOY, TOY, [3], [2, 2], 2)


def test_bench_sizes_match_the_stated_parameter_counts():
    assert SIZES["tiny"].total_params == pytest.approx(1.05e6, rel=0.01)
    assert SIZES["small"].total_params == pytest.approx(9.4e6, rel=0.01)
    assert SIZES["medium"].total_params == pytest.approx(21e6, rel=0.01)


def test_small_update_is_about_330_gflop():
    # 16 episodes of 16-24 words + BOS (mean 21 tokens; 25 when padded), 32 new tokens, 4 epochs.
    real = iteration_flops(SIZES["small"], SIZES["small"], [21] * 16, [32] * 16, 4)["update"]
    padded = iteration_flops(SIZES["small"], SIZES["small"], [25] * 16, [32] * 16, 4)["update"]
    assert 300e9 < real < padded < 345e9


def test_counts_match_the_built_model():
    from tether.bench.setup import build_models, word_tokenizer

    dims = SIZES["micro"]
    models = build_models(dims, word_tokenizer(dims.vocab))
    assert sum(p.numel() for p in models["policy"].parameters()) == dims.total_params
    layers = models["policy"].model.layers
    matmul = sum(m.weight.numel() for m in layers.modules() if m.__class__.__name__ == "Linear")
    assert matmul == dims.trunk_params
