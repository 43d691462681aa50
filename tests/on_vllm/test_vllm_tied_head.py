"""A policy whose output head is its embedding (Gemma-2's ``tie_word_embeddings``) syncs into
vLLM (its CPU build, .venv-vllm): vLLM's Gemma-2 has no ``lm_head``, so the worker does not load
that name (the embedding carries the head), and the engine then samples from exactly the actor's
weights. Before, the whole reload failed with "no module or parameter named 'lm_head'". A tied
Llama (the tiny task's, tests/on_vllm/test_vllm_engine.py) keeps loading its ``lm_head``."""

from __future__ import annotations

import pytest
import torch

vllm = pytest.importorskip("vllm", reason="runs in .venv-vllm (make test builds it); see README")

from tether.config import RLConfig, load_config  # noqa: E402
from tether.rollout import SamplingParams  # noqa: E402

pytestmark = pytest.mark.slow
SYNC_ATOL = 1e-4  # fp32, as test_vllm_engine.py


@pytest.fixture(scope="module")
def gemma2_tied(tiny_task, tmp_path_factory):
    """The tiny task's tokenizer with a 2-layer random Gemma-2, head tied to the embedding."""
    from transformers import AutoTokenizer, Gemma2Config, Gemma2ForCausalLM

    tok = AutoTokenizer.from_pretrained(tiny_task["dir"] / "base_model")
    config = Gemma2Config(vocab_size=len(tok), hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=64,
                          tie_word_embeddings=True, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id,
                          bos_token_id=tok.bos_token_id)
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("gemma2") / "model"
    Gemma2ForCausalLM(config).save_pretrained(path)
    tok.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def roles(tiny_task, gemma2_tied, tmp_path_factory):
    from tether.roles.build import build_roles

    task = tiny_task["dir"]
    cfg = load_config(RLConfig, None, [
        f"model.name_or_path={gemma2_tied}", f"prompts={task / 'ppo_prompts.jsonl'}",
        "reward.callable=tether.tasks.arith.judge:gold_reward", "critic.init=policy", "rollout.batch_size=8",
        "rl.minibatch_size=4", "rollout.max_new_tokens=8", "run.progress=false", "run.threads=1",
        "rollout.engine=vllm", f"run.out={tmp_path_factory.mktemp('run') / 'run'}"])
    built = build_roles(cfg, needed=("actor",))
    yield cfg, built
    built.rollout.close()


def distance(cfg, built) -> float:
    """The largest engine-actor log-prob difference over 8 sampled tokens of 6 prompts."""
    from tether.loops.rl_setup import load_prompt_set

    prompts = load_prompt_set(cfg.prompts, "train", built.tokenizer, "auto", 40, limit=6)
    ro = built.rollout.generate(prompts.ids, prompts.texts, SamplingParams(max_new_tokens=8, temperature=1.0),
                                seed=3, logprobs=True)
    logp, _ = built.actor.logprobs(ro, use_captured=False)
    mask = ro.response_mask.bool()
    assert int(mask.sum()) > 20
    return float((logp - ro.sampled_logprobs).abs().masked_fill(~mask, 0).max())


def test_a_tied_models_sync_puts_the_actors_weights_in_the_engine(roles):
    cfg, built = roles
    model = built.actor.engine.model
    assert model.config.tie_word_embeddings and "lm_head.weight" in model.state_dict()  # what the actor sends
    built.rollout.sync_weights()
    assert distance(cfg, built) <= SYNC_ATOL
    embedding = model.get_input_embeddings().weight
    g = torch.Generator().manual_seed(0)
    # An update of the embedding, and so of the tied head, the size of a few training steps (Gemma's
    # embedding scale, sqrt(hidden), makes a far larger one differ by float rounding alone).
    with torch.no_grad():
        embedding.add_(0.005 * torch.randn(embedding.shape, generator=g))
    assert distance(cfg, built) > 100 * SYNC_ATOL  # the engine has not seen it: the comparison can fail
    built.rollout.sync_weights()
    after = distance(cfg, built)
    assert after <= SYNC_ATOL, after
