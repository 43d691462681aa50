"""The speed work does not change the maths: a fixed-seed PPO run gives the same metrics with
every optimisation on as on the straightforward path (HF ``generate``, a second actor forward
for the rollout log-probs, the for-loop AdamW, padded batches), and with each optimisation on
alone (``padding_free``: every pass of the run packed, model.padding_free=true vs false).

The runs use the benchmark's random-init tiny Llamas (built in memory, no disk) with an EOS
bias on the policy head so that responses end at different lengths and padding is exercised.
"""

from __future__ import annotations

import dataclasses
import os

import pytest
import torch

from tether.bench.runner import bench_overrides
from tether.bench.setup import SIZES, build_setup
from tether.config import RLConfig, load_config
from tether.loops.rl_run import rl_trainer
from tether.loops.rl import RLTrainer
from tether.roles.build import make_roles

pytestmark = pytest.mark.slow

ITERATIONS = 3
STRAIGHTFORWARD = ["rollout.engine=hf", "rollout.capture_logprobs=false", "rl.fused_optimizer=false",
                   "cpu.parallel_roles=false", "rl.trim_last_layer=false", "cpu.linear_backend=aten",
                   "model.padding_free=false"]
NONE_BUT = ["rollout.engine=hf", "rollout.capture_logprobs=false", "rl.fused_optimizer=false",
            "rl.trim_last_layer=false", "cpu.linear_backend=aten", "model.padding_free=false"]
OPTIMISATIONS = {
    "padding_free": [*NONE_BUT, "model.padding_free=true"],
    "lean_engine": [*NONE_BUT, "rollout.engine=lean"],
    "captured_logprobs": [*NONE_BUT, "rollout.capture_logprobs=true"],
    "fused_optimizer": [*NONE_BUT, "rl.fused_optimizer=true"],
    "trim_last_layer": [*NONE_BUT, "rl.trim_last_layer=true"],
    "onednn_linears": [*NONE_BUT, "cpu.linear_backend=onednn"],
    "all": [],  # the defaults
}
REL, ABS = 1e-5, 1e-6
RESPONSE_LENGTH = 12
# Sums over a response's tokens of per-token log-prob differences: their rounding error is the
# per-token one (~1e-7 on log-probs of ~-5) times the response length, so ABS is per token.
SUMMED_OVER_TOKENS = ("objective/kl", "objective/kl_k3", "objective/non_score_reward")
# 1 − Var(returns − values) / Var(returns): a difference of near-equal variances magnifies the
# values' rounding (which differs between oneDNN and MKL kernels, e.g. on AMD's default backend), so
# it is held to the absolute tolerance of the values it is made of (~1e-5), not 1e-5 of itself.
RATIOS_OF_VARIANCES = ("ppo/val/explained_var",)


def eos_biased(model, eos_id: int, bias: float):
    """Give the policy's head a bias towards EOS so that some responses end early."""
    head = model.lm_head
    new = torch.nn.Linear(head.in_features, head.out_features, bias=True)
    with torch.no_grad():
        new.weight.copy_(head.weight)
        new.bias.zero_()
        new.bias[eos_id] = bias
    model.lm_head = new
    return model


def run(overrides: list[str], *extra: str):
    torch.manual_seed(0)
    cfg = load_config(RLConfig, None, bench_overrides(8, RESPONSE_LENGTH, 2, ITERATIONS, "fp32") + [
        "rollout.min_new_tokens=2", "rollout.temperature=1.3", "ppo.actor_lr=0.001", "critic.lr=0.001",
        "rl.on_invariant=error", "rl.ratio_tolerance=1e-4", *extra, *overrides])
    setup = build_setup(SIZES["tiny"], n_prompts=8 * ITERATIONS, seed=3)
    m = setup.models
    for name in ("policy", "reference"):
        eos_biased(m[name], setup.tokenizer.eos_token_id, 5.0)
    trainer = rl_trainer(cfg, make_roles(cfg, m["policy"], m["reference"], m["critic"], m["reward"], setup.tokenizer),
                          setup.prompts)
    initial = {k: v.clone() for k, v in m["policy"].state_dict().items()}
    history, responses = [], []
    for _ in range(ITERATIONS):
        stats = trainer.step()
        history.append({k: v for k, v in stats.items() if not k.startswith(("timing/", "perf/"))})
        responses.append(trainer.last_experience.rollout.response_ids.clone())
    return {"history": history, "responses": responses, "trainer": trainer, "models": m,
            "updates": {k: v - initial[k] for k, v in m["policy"].state_dict().items()}}


def assert_same_run(got: dict, want: dict) -> None:
    for it, (a, b) in enumerate(zip(got["responses"], want["responses"])):
        assert torch.equal(a, b), f"iteration {it + 1}: different sampled tokens"
    for it, (a, b) in enumerate(zip(got["history"], want["history"])):
        assert a.keys() == b.keys()
        for key in b:
            tol = ABS * RESPONSE_LENGTH if key in SUMMED_OVER_TOKENS else 10 * ABS if key in RATIOS_OF_VARIANCES else ABS
            assert a[key] == pytest.approx(b[key], rel=REL, abs=tol), (it + 1, key, a[key], b[key])
    # What the actor learned: Adam turns rounding-level differences in near-zero gradients into
    # steps of up to lr on single weights, so compare the whole update, not each weight.
    diff = torch.cat([(got["updates"][k] - v).flatten() for k, v in want["updates"].items()])
    total = torch.cat([v.flatten() for v in want["updates"].values()])
    assert float(diff.norm() / total.norm()) < 1e-3


@pytest.fixture(scope="module")
def reference():
    return run(STRAIGHTFORWARD)


def test_reference_run_exercises_early_eos(reference):
    lengths = [h["response/length_mean"] for h in reference["history"]]
    assert any(0 < h["response/eos_rate"] < 1 for h in reference["history"]), lengths
    assert all(2 <= n < 12 for n in lengths)


def packed_roles(res: dict) -> dict:
    """Whether each role's model ran its passes packed (None: never asked, padding_free off)."""
    from tether.models.packing import verdict

    return {name: (verdict(model) or (None,))[0] for name, model in res["models"].items()}


@pytest.mark.parametrize("name", list(OPTIMISATIONS))
def test_optimisation_gives_the_same_run(reference, name):
    got = run(OPTIMISATIONS[name])
    assert_same_run(got, reference)
    if name in ("padding_free", "all"):  # every role packed its passes; the reference run none
        assert packed_roles(got) == dict.fromkeys(got["models"], True), packed_roles(got)
        assert packed_roles(reference) == dict.fromkeys(reference["models"], None), packed_roles(reference)


def test_captured_logprobs_are_used_and_agree_with_a_fresh_forward():
    res = run([])
    trainer = res["trainer"]
    actor, reference = trainer.placement.roles["actor"], trainer.placement.roles["reference"]
    ro = trainer.last_experience.rollout
    assert ro.sampled_logprobs is not None
    assert torch.equal(actor.logprobs(ro)[0], ro.sampled_logprobs)  # the actor uses them: no second forward
    fresh, _ = actor.logprobs(ro, use_captured=False)  # the model has moved: compare the reference instead
    ref_fresh, _ = reference.logprobs(ro)
    # The reference never reuses them: it gives the same log-probs from a rollout without them.
    blank = dataclasses.replace(ro, sampled_logprobs=None, sampled_entropy=None)
    assert torch.equal(ref_fresh, reference.logprobs(blank)[0])
    assert torch.equal(ref_fresh, reference.logprobs(ro, use_captured=True)[0])
    assert fresh.shape == ref_fresh.shape == ro.sampled_logprobs.shape
    assert trainer.last_ratio_deviation < 1e-4


def test_top_k_top_p_and_min_tokens_sample_the_same_tokens_in_both_engines():
    a = run(STRAIGHTFORWARD, "rollout.top_k=20", "rollout.top_p=0.9", "rollout.min_new_tokens=4")
    b = run(OPTIMISATIONS["all"], "rollout.top_k=20", "rollout.top_p=0.9", "rollout.min_new_tokens=4")
    assert_same_run(b, a)


def test_parallel_roles_give_the_same_run(reference):
    # The suite runs on one torch thread; the role threads need two to run side by side.
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        got = run(["cpu.parallel_roles=true", "rl.trim_last_layer=false", "cpu.linear_backend=aten"])
        assert got["trainer"].placement.parallel()
    finally:
        torch.set_num_threads(before)
    assert_same_run(got, reference)


def test_a_compiled_update_runs_its_roles_one_after_the_other(caplog):
    # Two threads compiling their trunks at once deadlocked in dynamo: with rl.compile the
    # trainer keeps a single update stream even where it could run two. (Nothing compiles here.)
    setup = build_setup(SIZES["micro"], n_prompts=8, seed=3)
    m = setup.models

    def trainer(*extra: str) -> RLTrainer:
        cfg = load_config(RLConfig, None, bench_overrides(4, 6, 1, 2, "fp32") + list(extra))
        roles = make_roles(cfg, m["policy"], m["reference"], m["critic"], m["reward"], setup.tokenizer)
        return rl_trainer(cfg, roles, setup.prompts)

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with caplog.at_level("WARNING", logger="tether.placement"):
            compiled = trainer("rl.compile=true")
        assert compiled.update_streams() == 1 and not compiled.placement.parallel()
        assert "cpu.parallel_roles ignored" in caplog.text
        assert trainer().update_streams() == 2  # the same machine without rl.compile: side by side
    finally:
        torch.set_num_threads(before)


@pytest.mark.skipif(not os.environ.get("TETHER_TEST_COMPILE"),
                    reason="torch.compile takes minutes on a CPU; set TETHER_TEST_COMPILE=1 to run")
@pytest.mark.parametrize("mode", ["default", "max-autotune"])
def test_compiled_update_gives_the_same_run(reference, mode):
    assert_same_run(run(["rl.compile=true", f"rl.compile_mode={mode}"]), reference)
