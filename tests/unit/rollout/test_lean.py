"""The lean decode loop: HF ``generate``'s tokens, with the prefill's last layer at one position."""

from __future__ import annotations

import copy

import pytest
import torch

from tether.models.state import state_of
from tether.bench.setup import SIZES, build_setup
from tether.models import last_layer
from tether.models.forward import response_logprobs
from tether.engines.cpu.onednn import onednn_available
from tether.rollout import HFGenerationEngine, LeanGenerationEngine, SamplingParams

PARAMS = SamplingParams(max_new_tokens=6, temperature=0.9)


def sample(engine, setup, seed=0):
    torch.manual_seed(seed)
    return engine.generate(setup.prompts.ids[:4], setup.prompts.texts[:4], PARAMS)


def test_lean_matches_generate_with_a_trimmed_prefill():
    setup = build_setup(SIZES["micro"], 4, seed=5)
    model = setup.models["policy"]
    full = copy.deepcopy(model)
    last_layer.run_in_full(full)
    want = sample(HFGenerationEngine(full, setup.tokenizer), setup)

    rows = []
    model.base_model.layers[-1].mlp.register_forward_hook(lambda m, args, out: rows.append(args[0].shape[1]))
    got = sample(LeanGenerationEngine(model, setup.tokenizer), setup)

    # The prefill checks the model once (a full and a trimmed pass), then runs trimmed.
    assert state_of(model).last_layer is True
    assert rows[:3] == [want.num_prompt_tokens, 1, 1], "the prefill ran the last layer's MLP at every prompt position"
    assert torch.equal(got.response_ids, want.response_ids)
    fresh, _ = response_logprobs(full, want.sequences, want.attention_mask, want.num_prompt_tokens,
                                 PARAMS.temperature)
    real = want.response_mask.bool()
    torch.testing.assert_close(got.sampled_logprobs[real], fresh[real], rtol=1e-4, atol=1e-5)


@pytest.mark.skipif(not onednn_available(), reason="this torch build has no oneDNN: nothing is packed")
def test_bf16_decode_with_packed_weights_samples_what_autocast_samples(monkeypatch):
    from tether.engines.cpu import onednn

    monkeypatch.setattr(onednn, "MIN_MACS", 0)  # the micro model's products are all tiny
    setup = build_setup(SIZES["micro"], 4, seed=5)
    model = setup.models["policy"]
    plain = copy.deepcopy(model)
    want = sample(LeanGenerationEngine(plain, setup.tokenizer, autocast="bf16"), setup)

    onednn.use_onednn_linears(model)
    trunk, head = [], []
    model.base_model.layers[0].mlp.down_proj.register_forward_hook(
        lambda m, args, out: trunk.append(m._packed.dtype) if m._packed is not None else None)
    model.lm_head.register_forward_hook(lambda m, args, out: head.append(m._packed.dtype))
    got = sample(LeanGenerationEngine(model, setup.tokenizer, autocast="bf16",
                                      decode_context=onednn.packed_linears), setup)

    if onednn.bf16_packing_available():
        assert trunk and set(trunk) == {torch.bfloat16}, "the decode steps did not use bf16 packed weights"
    else:  # a CPU without AVX-512 (some AMD EPYC): the trunk runs as autocast does, nothing bf16 packed
        assert not trunk, "a bf16 weight was packed where oneDNN cannot"
    assert head and set(head) == {torch.float32}, "the LM head did not use an fp32 packed weight"
    assert torch.equal(got.response_ids, want.response_ids)
    real = want.response_mask.bool()
    torch.testing.assert_close(got.sampled_logprobs[real], want.sampled_logprobs[real], rtol=0, atol=2e-3)


def largest_gap_to_a_fresh_pass(engine, setup) -> float:
    """max |captured - fresh| log-prob over a sampled batch's real tokens, the fresh pass being the
    update's (bf16 trunk, fp32 head)."""
    got = sample(engine, setup)
    with torch.no_grad():
        fresh, _ = response_logprobs(engine.model, got.sequences, got.attention_mask, got.num_prompt_tokens,
                                     PARAMS.temperature, autocast="bf16")
    real = got.response_mask.bool()
    return float((got.sampled_logprobs - fresh)[real].abs().max())


def test_bf16_captured_logprobs_match_the_updates_fp32_head():
    """Under bf16 autocast the decode loop's LM head runs in fp32, like the update's log-prob pass:
    the captured log-probs match a fresh pass even where a bf16 head would round large logits."""
    setup = build_setup(SIZES["micro"], 4, seed=5)
    model = setup.models["policy"]
    with torch.no_grad():
        model.lm_head.weight.mul_(40.0)  # logits of tens of nats: bf16 keeps ~0.1 of them
    engine = LeanGenerationEngine(model, setup.tokenizer, autocast="bf16")
    assert largest_gap_to_a_fresh_pass(engine, setup) <= 2e-3

    # The check can fail: with the head inside autocast (bf16 logits) the captured log-probs move.
    engine._fp32_head = lambda: False
    assert largest_gap_to_a_fresh_pass(engine, setup) > 2e-2


@pytest.mark.parametrize("engine_cls", [LeanGenerationEngine, HFGenerationEngine])
def test_seeded_chunks_are_one_stream_and_leave_the_rng_alone(engine_cls):
    """generate(seed=, chunk_size=) samples in chunks one after the other in a private stream:
    the same tokens as the chunks generated back to back after manual_seed(seed)."""
    setup = build_setup(SIZES["micro"], 6, seed=5)
    engine = engine_cls(setup.models["policy"], setup.tokenizer)
    ids, texts = setup.prompts.ids[:6], setup.prompts.texts[:6]
    torch.manual_seed(123)
    before = torch.get_rng_state()
    got = engine.generate(ids, texts, PARAMS, seed=7, chunk_size=4)
    assert torch.equal(torch.get_rng_state(), before)
    torch.manual_seed(7)
    first = engine.generate(ids[:4], texts[:4], PARAMS)
    second = engine.generate(ids[4:], texts[4:], PARAMS)
    assert got.responses == first.responses + second.responses


@pytest.mark.parametrize("engine_cls", [LeanGenerationEngine, HFGenerationEngine])
def test_on_step_stops_rows(engine_cls):
    """A row the per-step hook reports finished stops generating (tether serve's stop sequences)."""
    setup = build_setup(SIZES["micro"], 4, seed=5)
    engine = engine_cls(setup.models["policy"], setup.tokenizer)
    steps = []

    def stop_row_0_after_two(tokens):
        steps.append(tokens.clone())
        done = torch.zeros(len(tokens), dtype=torch.bool)
        done[0] = len(steps) >= 2
        return done

    params = SamplingParams(max_new_tokens=6, min_new_tokens=6, temperature=0.9)
    torch.manual_seed(0)
    engine.generate(setup.prompts.ids[:4], setup.prompts.texts[:4], params, on_step=stop_row_0_after_two)
    assert len(steps) == 6
    pad = setup.tokenizer.pad_token_id
    if engine_cls is LeanGenerationEngine:  # rows that are done get padding from then on
        assert all(int(s[0]) == pad for s in steps[2:])
