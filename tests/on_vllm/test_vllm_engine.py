"""The vLLM engine for real (vLLM's CPU build, in the .venv-vllm environment `make test` builds):
after a weight sync the engine samples from exactly the actor's weights, full or LoRA; a run
whose sync is skipped is caught; the engine's own errors come out as one paragraph.

Tiny random Llama of the demo task (fp32, enforce_eager, 1 GiB CPU KV cache). One engine serves
the module: starting one takes ~25 s here.
"""

from __future__ import annotations

import pytest
import torch

vllm = pytest.importorskip("vllm", reason="runs in .venv-vllm (make test builds it); see README")

from tether.config import RLConfig, load_config  # noqa: E402
from tether.common.errors import ConfigError, TrainingError  # noqa: E402
from tether.rollout import SamplingParams  # noqa: E402

pytestmark = pytest.mark.slow
SYNC_ATOL = 1e-4  # fp32: the largest engine-actor log-prob difference allowed after a sync


def overrides(task, out, *extra):
    return [f"model.name_or_path={task / 'base_model'}", f"prompts={task / 'ppo_prompts.jsonl'}",
            "reward.callable=tether.tasks.arith.judge:gold_reward", "critic.init=policy", "rl.iterations=2",
            "rollout.batch_size=8", "rl.minibatch_size=4", "rl.epochs=2", "rollout.max_new_tokens=8",
            "run.progress=false", "run.threads=1", "rollout.engine=vllm", f"run.out={out}", *extra]


@pytest.fixture(scope="module")
def roles(tiny_task, tmp_path_factory):
    from tether.roles.build import build_roles

    cfg = load_config(RLConfig, None, overrides(tiny_task["dir"], tmp_path_factory.mktemp("v") / "run"))
    built = build_roles(cfg, needed=("actor",))
    yield cfg, built
    built.rollout.close()


def probe(cfg, roles, actor, params=None):
    """Sample 8 tokens for 6 prompts with the engine's log-probs; the actor's for the same tokens."""
    from tether.loops.rl_setup import load_prompt_set

    prompts = load_prompt_set(cfg.prompts, "train", roles.tokenizer, "auto", 40, limit=6)
    params = params or SamplingParams(max_new_tokens=8, temperature=1.0)
    ro = roles.rollout.generate(prompts.ids, prompts.texts, params, seed=3, logprobs=True)
    logp, _ = actor.logprobs(ro, use_captured=False)
    mask = ro.response_mask.bool()
    return float((logp - ro.sampled_logprobs).abs().masked_fill(~mask, 0).max()), int(mask.sum())


def perturb(module, scale=0.05, seed=0):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            if p.requires_grad:
                p.add_(torch.randn(p.shape, generator=g) * scale)


def test_sync_puts_the_actors_weights_in_the_engine(roles):
    cfg, built = roles
    built.rollout.sync_weights()
    synced, tokens = probe(cfg, built, built.actor)
    assert tokens > 20 and synced <= SYNC_ATOL, synced
    perturb(built.actor.engine.model)  # an update the engine has not seen
    stale, _ = probe(cfg, built, built.actor)
    assert stale > 100 * SYNC_ATOL, stale  # the comparison can fail
    mb = built.rollout.sync_weights()
    assert mb > 0
    again, _ = probe(cfg, built, built.actor)
    assert again <= SYNC_ATOL, again
    print(f"\nfull model: after sync {synced:.2e}, stale {stale:.2e}, after re-sync {again:.2e} ({mb:.2f} MiB sent)")


@pytest.fixture
def long_context_roles(tiny_task, tmp_path):
    """The roles of a run whose policy is a random Llama with a 320-position context: the CPU
    build caches prefixes in blocks of 128 tokens, longer than the tiny task's whole context."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from tether.roles.build import build_roles

    tok = AutoTokenizer.from_pretrained(tiny_task["dir"] / "base_model")
    config = LlamaConfig(vocab_size=len(tok), hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=320,
                         pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, bos_token_id=tok.bos_token_id)
    torch.manual_seed(0)
    path = tmp_path / "long"
    LlamaForCausalLM(config).save_pretrained(path)
    tok.save_pretrained(path)
    cfg = load_config(RLConfig, None, overrides(tiny_task["dir"], tmp_path / "run", f"model.name_or_path={path}"))
    built = build_roles(cfg, needed=("actor",))
    yield built
    built.rollout.close()


def test_a_sync_empties_the_prefix_cache(long_context_roles, monkeypatch):
    """Prompts longer than two cache blocks, sampled before and after an update: after the sync the
    engine's log-probs are the actor's, not partly from keys and values the old weights cached
    (which the same check shows when the cache is left as it was)."""
    built = long_context_roles
    engine = built.rollout
    long_prompts = [[(7 * i + 3 * j) % 120 + 5 for j in range(300)] for i in range(3)]
    params = SamplingParams(max_new_tokens=8, temperature=1.0)

    def distance() -> float:
        ro = engine.generate(long_prompts, [""] * 3, params, seed=5, logprobs=True)
        logp, _ = built.actor.logprobs(ro, use_captured=False)
        return float((logp - ro.sampled_logprobs).abs().masked_fill(~ro.response_mask.bool(), 0).max())

    engine.sync_weights()
    assert distance() <= SYNC_ATOL  # the prompts' blocks are cached now
    perturb(built.actor.engine.model, seed=7)
    engine.sync_weights()
    fresh = distance()
    assert fresh <= SYNC_ATOL, fresh
    perturb(built.actor.engine.model, seed=8)
    monkeypatch.setattr(engine.llm, "reset_prefix_cache", lambda *a, **k: True)  # the cache kept
    engine.sync_weights()
    stale = distance()
    assert stale > 100 * SYNC_ATOL, stale
    print(f"\nprefix cache: after sync {fresh:.2e}; with the old weights' cache kept {stale:.2e}")


def test_a_lora_actor_syncs_its_merged_weights(roles, tiny_task):
    from tether.config.common import LoRAConfig
    from tether.engines import OptimizerSpec, TrainingEngine
    from tether.models import load_causal_lm
    from tether.models.lora import trainable
    from tether.roles.policy import Actor

    cfg, built = roles
    model = load_causal_lm(str(tiny_task["dir"] / "base_model"), built.tokenizer)
    lora = trainable(model, LoRAConfig(r=4, alpha=8.0))
    perturb(lora, scale=0.2, seed=1)  # lora_B away from 0: the merged model differs from the base
    actor = Actor(TrainingEngine(lora, OptimizerSpec(lr=1e-3)), cfg.rollout.temperature)
    built.rollout.weights_source = actor.sync_weights
    try:
        built.rollout.sync_weights()
        diff, _ = probe(cfg, built, actor)
        assert diff <= SYNC_ATOL, diff
        print(f"\nLoRA actor (merged weights): after sync {diff:.2e}")
        # The adapters are unmerged again after the sync: the actor's own forward is unchanged.
        assert any(".lora_A." in name for name, _ in lora.named_parameters())
        assert probe(cfg, built, actor)[0] <= SYNC_ATOL
    finally:
        built.rollout.weights_source = built.actor.sync_weights


def test_too_short_max_model_len_is_one_paragraph(roles):
    cfg, built = roles
    with pytest.raises(ConfigError, match="rollout.vllm.max_model_len"):
        built.rollout.generate([[5] * 60], ["x"], SamplingParams(max_new_tokens=32))


def test_a_run_whose_sync_is_skipped_is_caught(tiny_task, tmp_path, monkeypatch):
    from tether.loops.rl_run import run_rl
    from tether.rollout.vllm_engine import VLLMGenerationEngine

    calls = {"n": 0}
    real = VLLMGenerationEngine.load_weights

    def first_only(self, named):  # the start-up sync happens; every later one is lost
        calls["n"] += 1
        return real(self, named) if calls["n"] == 1 else 0.0

    monkeypatch.setattr(VLLMGenerationEngine, "load_weights", first_only)
    cfg = load_config(RLConfig, None, overrides(tiny_task["dir"], tmp_path / "run", "rollout.vllm.check_sync=true",
                                                 "rl.on_invariant=error", "optim.lr=1e-3"))
    with pytest.raises(TrainingError, match="vLLM engine's log-probs differ from the actor's"):
        run_rl(cfg)
    assert calls["n"] == 2


def test_greedy_responses_and_ended_flags_match_the_lean_engine(roles):
    """The same weights, greedy: vLLM's tokens, EOS cut and ``ended`` flags are the lean loop's."""
    from tether.loops.rl_setup import load_prompt_set
    from tether.models.lora import unwrap
    from tether.rollout import LeanGenerationEngine

    cfg, built = roles
    built.rollout.sync_weights()
    prompts = load_prompt_set(cfg.prompts, "train", built.tokenizer, "auto", 40, limit=8)
    params = SamplingParams(max_new_tokens=12, greedy=True)
    ours = built.rollout.generate(prompts.ids, prompts.texts, params)
    lean = LeanGenerationEngine(unwrap(built.actor.engine.model), built.tokenizer, capture=False)
    theirs = lean.generate(prompts.ids, prompts.texts, params)
    width = max(ours.response_ids.shape[1], theirs.response_ids.shape[1])
    pad = built.tokenizer.pad_token_id

    def padded(t):
        return torch.nn.functional.pad(t, (0, width - t.shape[1]), value=pad)

    assert torch.equal(padded(ours.response_ids), padded(theirs.response_ids))
    assert torch.equal(ours.ended, theirs.ended)
    assert ours.responses == theirs.responses


def test_n_samples_per_prompt_are_consecutive_rows_with_their_own_seeds(roles):
    from tether.loops.rl_setup import load_prompt_set

    cfg, built = roles
    prompts = load_prompt_set(cfg.prompts, "train", built.tokenizer, "auto", 40, limit=3)
    params = SamplingParams(max_new_tokens=12, temperature=1.0)
    ro = built.rollout.generate(prompts.ids, prompts.texts, params, seed=7, n=4)
    assert len(ro) == 12 and ro.prompts == [t for t in prompts.texts for _ in range(4)]
    group = ro.response_ids[:4]
    assert len({tuple(row.tolist()) for row in group}) > 1  # four different draws for one prompt
    again = built.rollout.generate(prompts.ids, prompts.texts, params, seed=7, n=4)
    assert torch.equal(again.response_ids, ro.response_ids)  # per-request seeds: reproducible


def test_a_model_vllm_cannot_load_is_one_paragraph(tiny_task, tmp_path):
    import json
    import shutil

    from tether.rollout.vllm_engine import VLLMGenerationEngine

    path = tmp_path / "unknown"
    shutil.copytree(tiny_task["dir"] / "base_model", path)
    config = json.loads((path / "config.json").read_text())
    config.update(architectures=["FooBarForCausalLM"], model_type="foobar")
    (path / "config.json").write_text(json.dumps(config))
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_task["dir"] / "base_model")
    with pytest.raises(ConfigError) as err:
        VLLMGenerationEngine(path, tok)
    text = str(err.value)
    assert f"vLLM could not start on '{path}'" in text and "foobar" in text and "rollout.vllm.max_model_len" in text
    assert "errors.pydantic.dev" not in text


def test_a_run_on_the_engines_logprobs_reports_their_distance_from_the_actors(tiny_task, tmp_path):
    """rollout.use_engine_logprobs: no actor scoring pass; the first-minibatch ratio check sees
    the engine's pi_old against the actor's forward, and the run logs how far apart they are."""
    import json

    from tether.loops.rl_run import run_rl

    import psutil

    cfg = load_config(RLConfig, None, overrides(tiny_task["dir"], tmp_path / "run", "rollout.use_engine_logprobs=true",
                                                 "rl.on_invariant=error", "optim.lr=1e-3"))
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    run_rl(cfg)
    _, alive = psutil.wait_procs([p for p in psutil.Process().children(recursive=True) if p.pid not in before
                                  and p.name().startswith("VLLM")], timeout=30)
    assert not alive, "the run's vLLM engine outlived it"
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in rows if "rollout/engine_ratio_deviation" in r]
    assert len(rows) == 2
    for row in rows:
        assert 0 <= row["rollout/engine_ratio_deviation"] <= SYNC_ATOL, row
        assert row["objective/entropy"] > 0 and row["timing/logprobs"] < 0.05  # no actor forward
    print("\nengine log-probs: ratio deviation " + ", ".join(f"{r['rollout/engine_ratio_deviation']:.1e}" for r in rows))


def test_grpo_samples_its_groups_on_vllm(tiny_task, tmp_path):
    """A critic-free algorithm on the vLLM engine: groups of 4 responses per prompt, synced weights."""
    from tether.loops.rl_run import run_rl

    args = [a for a in overrides(tiny_task["dir"], tmp_path / "run", "algorithm=grpo", "group.size=4",
                                 "rollout.batch_size=2", "rl.minibatch_size=8", "rollout.vllm.check_sync=true",
                                 "rl.on_invariant=error") if a != "critic.init=policy"]  # GRPO trains no critic
    cfg = load_config(RLConfig, None, args)
    result = run_rl(cfg)
    assert len(result["trainer"].last_experience) == 8
    assert all(row["rollout/sync_logprob_diff"] <= SYNC_ATOL for row in result["history"])


def test_a_kv_cache_too_small_for_the_context_is_one_paragraph(tiny_task, tmp_path):
    """32 layers x 4 heads x 32 dims at 131072 positions need 4 GiB of KV cache per sequence; the CPU
    build holds 1 GiB (vLLM itself fails in its engine process with 'KV cache is needed')."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from tether.rollout.vllm_engine import VLLMGenerationEngine

    tok = AutoTokenizer.from_pretrained(tiny_task["dir"] / "base_model")
    config = LlamaConfig(vocab_size=len(tok), hidden_size=128, intermediate_size=64, num_hidden_layers=32,
                         num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=131072)
    LlamaForCausalLM(config).save_pretrained(tmp_path / "long")
    with pytest.raises(ConfigError) as err:
        VLLMGenerationEngine(tmp_path / "long", tok)
    text = str(err.value)
    assert "KV cache is too small" in text and "needs 4.00 GiB" in text and "rollout.vllm.cpu_kvcache_gb" in text


@pytest.mark.parametrize("mode, cap", [("tis", 1.5), ("mis", 1.0)])
def test_off_policy_correction_weighs_the_actor_against_the_engine(tiny_task, tmp_path, mode, cap):
    """rollout.is_correction with the engine's weights in bf16 and the actor's in fp32: the actor
    recomputes pi_old, the engine's sampling log-probs are the behaviour policy, and the run logs the
    weights and the share over the cap. TIS: weights near 1, not all exactly 1 (bf16 rounding); MIS
    at cap 1 drops the tokens the engine under-rates (about half, weight 0) and keeps the others at
    their ratio rho <= 1 (masked importance sampling: rho * 1[rho <= cap])."""
    from tether.loops.rl_run import run_rl

    cfg = load_config(RLConfig, None, overrides(tiny_task["dir"], tmp_path / "run", f"rollout.is_correction={mode}",
                                                 f"rollout.is_cap={cap}", "rollout.vllm.dtype=bfloat16"))
    result = run_rl(cfg)
    exp = result["trainer"].last_experience
    assert exp.is_weights is not None and exp.is_weights.shape == exp.logprobs.shape
    weights = exp.is_weights[exp.rollout.response_mask.bool()]
    if mode == "tis":
        assert not bool((weights == 1).all()), "bf16 sampling against fp32 pi_old gives weights != 1"
        assert float(weights.max()) <= cap
    else:
        kept = weights[weights > 0]
        assert bool((weights == 0).any()) and kept.numel() > 0
        assert float(kept.max()) <= cap and float(kept.min()) > 0.9, "kept tokens weigh their ratio, near 1"
    for row in result["history"]:
        assert 0.3 < row["rollout/is_weight_mean"] <= 1.5 and 0 <= row["rollout/is_clipped_frac"] <= 1, row
        assert (row["rollout/is_clipped_frac"] > 0.05) == (mode == "mis"), row
    print(f"\n{mode}: is_weight_mean " + ", ".join(f"{r['rollout/is_weight_mean']:.4f}" for r in result["history"])
          + "; is_clipped_frac " + ", ".join(f"{r['rollout/is_clipped_frac']:.3f}" for r in result["history"]))


def test_vllm_samples_ahead_from_a_thread_and_resumes_exactly(tiny_task, tmp_path):
    """rollout.max_staleness=1 on vLLM: the engine (its own processes) samples the next rollout from
    a thread while the actor trains, with the weights one update old; TIS weighs pi_old against the
    engine's log-probs; held-out evaluation waits for the sampler and uses the engine; a run
    interrupted after iteration 2 (before its checkpoint) resumes from checkpoint 1, with the rollout
    saved in flight, to the uninterrupted run."""
    from tether.loops.rl_run import run_rl

    extra = ("rollout.max_staleness=1", "rollout.is_correction=tis", "rl.iterations=3", "run.save_every=1",
             f"eval.prompts={tiny_task['dir'] / 'eval_prompts.jsonl'}", "eval.every=1", "eval.max_prompts=8")
    whole = run_rl(load_config(RLConfig, None, overrides(tiny_task["dir"], tmp_path / "whole", *extra)))
    history = whole["history"]
    assert [row["rollout/staleness_max"] for row in history] == [0.0, 1.0, 1.0]
    assert history[0]["rollout/is_weight_mean"] == pytest.approx(1.0, abs=1e-4)  # fp32 engine, same weights
    assert history[2]["rollout/is_weight_mean"] != pytest.approx(1.0, abs=1e-7)  # one update old
    assert all("eval/kl" in row for row in history)

    class Interrupt(Exception):
        pass

    def stop_after_second(it, stats, trainer):
        if it == 2:
            raise Interrupt

    cfg = load_config(RLConfig, None, overrides(tiny_task["dir"], tmp_path / "cut", *extra))
    with pytest.raises(Interrupt):
        run_rl(cfg, on_iteration=stop_after_second)
    resumed = run_rl(cfg, resume=True)  # from checkpoint 1: iteration 2's was not written
    keep = ("objective/score", "objective/kl", "rollout/is_weight_mean", "response/length_mean", "eval/kl")
    assert [{k: row[k] for k in keep} for row in resumed["history"]] == [{k: row[k] for k in keep}
                                                                         for row in history[1:]]
