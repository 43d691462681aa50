"""truncate_after_eos on hand-written tensors, and the HF engine on the tiny base model."""

from __future__ import annotations

import pytest
import torch
from transformers.utils import logging as hf_logging

from tether.data import collate_left, encode_prompt
from tether.models import load_causal_lm, load_tokenizer
from tether.rollout import HFGenerationEngine, SamplingParams, truncate_after_eos

hf_logging.disable_progress_bar()

EOS, PAD = 3, 0


def test_truncate_eos_in_the_middle():
    ids, mask, ended = truncate_after_eos(torch.tensor([[5, 6, EOS, 7, 8]]), EOS, PAD)
    assert ids.tolist() == [[5, 6, EOS, PAD, PAD]]
    assert mask.tolist() == [[1, 1, 1, 0, 0]]
    assert ended.tolist() == [True]


def test_truncate_eos_at_the_end_and_none():
    resp = torch.tensor([[5, 6, 7, EOS], [5, 6, 7, 8]])
    ids, mask, ended = truncate_after_eos(resp, EOS, PAD)
    assert ids.tolist() == resp.tolist()
    assert mask.tolist() == [[1, 1, 1, 1], [1, 1, 1, 1]]
    assert ended.tolist() == [True, False]


def test_truncate_eos_at_position_zero_and_repeated():
    resp = torch.tensor([[EOS, 6, EOS, 8], [5, EOS, EOS, EOS], [EOS, EOS, EOS, EOS]])
    ids, mask, ended = truncate_after_eos(resp, EOS, PAD)
    assert ids.tolist() == [[EOS, PAD, PAD, PAD], [5, EOS, PAD, PAD], [EOS, PAD, PAD, PAD]]
    assert mask.tolist() == [[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 0, 0]]
    assert ended.tolist() == [True, True, True]
    assert mask.dtype == torch.long and ended.dtype == torch.bool


def test_truncate_keeps_pad_tokens_before_eos_as_real():
    # A pad id sampled before EOS is a real token (mask 1); only what follows EOS is cut.
    ids, mask, _ = truncate_after_eos(torch.tensor([[5, PAD, EOS, 9]]), EOS, PAD)
    assert mask.tolist() == [[1, 1, 1, 0]]
    assert ids.tolist() == [[5, PAD, EOS, PAD]]


# -- the engine ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def engine_setup(tiny_task):
    d = tiny_task["dir"]
    tok = load_tokenizer(str(d / "tokenizer"))
    model = load_causal_lm(str(d / "base_model"), tok)
    # The random-init model almost never says EOS; scaling the EOS output row makes it
    # likely on some positions so both ended and cut-off rows appear.
    with torch.no_grad():
        model.get_output_embeddings().weight[tok.eos_token_id] *= 30
    texts = [f"what is {a} + {b} ?" for a, b in [(1, 2), (3, 4), (10, 1), (7, 7), (2, 9), (5, 5), (0, 1), (8, 3)]]
    full = [encode_prompt(t, tok) for t in texts]
    # Vary prompt lengths so the batch is really left-padded.
    ids = [p[: len(p) - (i % 3)] for i, p in enumerate(full)]
    return model, tok, ids, texts


def generate(setup, seed=0, **params):
    model, tok, ids, texts = setup
    torch.manual_seed(seed)
    params.setdefault("max_new_tokens", 10)
    return HFGenerationEngine(model, tok).generate(ids, texts, SamplingParams(**params))


def test_engine_rollout_shapes_and_masks(engine_setup):
    model, tok, ids, texts = engine_setup
    ro = generate(engine_setup)
    B = len(ids)
    exp_ids, exp_mask = collate_left(ids, tok.pad_token_id)
    assert torch.equal(ro.prompt_ids, exp_ids) and torch.equal(ro.prompt_mask, exp_mask)
    assert ro.response_ids.shape[0] == B and ro.response_ids.shape[1] <= 10
    assert ro.prompts == texts
    mask = ro.response_mask
    assert set(mask.unique().tolist()) <= {0, 1}
    # The mask is a prefix of ones.
    lengths = mask.sum(1)
    prefix = (torch.arange(mask.shape[1])[None] < lengths[:, None]).long()
    assert torch.equal(mask, prefix)
    assert (lengths >= 1).all()
    eos, pad = tok.eos_token_id, tok.pad_token_id
    assert ro.ended.any() and not ro.ended.all()  # both kinds of rows are exercised
    for i in range(B):
        row, n = ro.response_ids[i], int(lengths[i])
        has_eos = bool((row[:n] == eos).any())
        assert bool(ro.ended[i]) == has_eos
        if has_eos:
            assert int(row[n - 1]) == eos and (row[: n - 1] != eos).all()
        else:
            assert n == ro.response_ids.shape[1] == 10  # cut at the length cap
        assert (row[n:] == pad).all()
        assert ro.responses[i] == tok.decode(row[:n], skip_special_tokens=True).strip()
        assert "<eos>" not in ro.responses[i] and "<pad>" not in ro.responses[i]
    assert torch.equal(ro.lengths, lengths)
    assert torch.equal(ro.sequences, torch.cat([ro.prompt_ids, ro.response_ids], 1))
    assert ro.num_prompt_tokens == exp_ids.shape[1]


def test_engine_same_seed_same_rollout(engine_setup):
    a, b = generate(engine_setup, seed=3), generate(engine_setup, seed=3)
    assert torch.equal(a.response_ids, b.response_ids)
    assert torch.equal(a.response_mask, b.response_mask)
    assert a.responses == b.responses
    c = generate(engine_setup, seed=4)
    assert not torch.equal(a.response_ids, c.response_ids) or a.responses != c.responses


def test_engine_min_new_tokens_forbids_early_eos(engine_setup):
    ro = generate(engine_setup, min_new_tokens=4)
    assert (ro.lengths >= 4).all()


def test_engine_greedy_is_deterministic_across_seeds(engine_setup):
    a, b = generate(engine_setup, seed=1, greedy=True), generate(engine_setup, seed=2, greedy=True)
    assert torch.equal(a.response_ids, b.response_ids)


def test_engine_restores_training_mode(engine_setup):
    model = engine_setup[0]
    model.train()
    try:
        generate(engine_setup, max_new_tokens=2)
        assert model.training
    finally:
        model.eval()
    generate(engine_setup, max_new_tokens=2)
    assert not model.training
