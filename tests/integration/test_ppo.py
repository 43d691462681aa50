"""PPO on the tiny task after a tiny SFT + reward model (built once, see conftest.py)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

from card_checks import assert_model_card
from tether.config import RLConfig, load_config
from tether.loops.rl_run import run_rl
from tether.metrics.logger import read_metrics
from tether.roles import CallableReward, EnsembleReward, ModelReward
from tether.roles.build import build_roles
from tether.runs import MANIFEST

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
BATCH = 16
ITERATIONS = 3


def ppo_config(trained, out, *extra) -> RLConfig:
    task = trained["task"]
    return load_config(RLConfig, None, [
        f"run.out={out}", "run.progress=false", "run.log_every=1", "run.seed=1",
        f"model.name_or_path={trained['sft']}", f"prompts={task / 'ppo_prompts.jsonl'}",
        f"reward.models=[{trained['rm']}]",
        f"rl.iterations={ITERATIONS}", f"rollout.batch_size={BATCH}", "rl.minibatch_size=8",
        "rollout.max_new_tokens=12", "rl.epochs=2", "optim.lr=0.001", "critic.optim.lr=0.001",
        "rl.on_invariant=error", *extra,
    ])


def run(trained, tmp_path_factory, name, *extra, on_iteration=None):
    out = tmp_path_factory.mktemp(name) / "ppo"
    cfg = ppo_config(trained, out, *extra)
    seen = []

    def callback(it, stats, trainer):
        seen.append(getattr(trainer, "last_ratio_deviation", None))
        if on_iteration is not None:
            on_iteration(it, stats, trainer)

    result = run_rl(cfg, on_iteration=callback)
    return {"cfg": cfg, "out": out, "history": result["history"], "trainer": result["trainer"],
            "ratio_dev": seen, "rows": read_metrics(out / "metrics.jsonl")}


@pytest.fixture(scope="module")
def base(trained, tmp_path_factory):
    return run(trained, tmp_path_factory, "base")


def comparable(row: dict) -> dict:
    return {k: v for k, v in row.items() if k != "time" and not k.startswith(("timing/", "perf/"))}


def assert_all_finite(rows):
    for row in rows:
        for key, value in row.items():
            if key == "stage":
                continue
            assert isinstance(value, (int, float)) and not isinstance(value, bool), (key, value)
            assert math.isfinite(value), (key, value)


def _sft_weights(trained) -> dict:
    return load_file(str(trained["sft"] / "model.safetensors"))


def role(trainer, name: str):
    """The role object the trainer's placement runs (the trainer itself holds proxies)."""
    return trainer.placement.roles[name]


def _same_as(model, weights: dict) -> bool:
    state = model.state_dict()
    return all(torch.equal(state[k], v) for k, v in weights.items() if k in state)


# -- the base run -------------------------------------------------------------------------
def test_every_logged_metric_is_a_finite_number(base):
    rows = base["rows"]
    assert [r["step"] for r in rows if r["step"] > 0] == list(range(1, ITERATIONS + 1))
    assert all(r["stage"] == "ppo" for r in rows)
    assert_all_finite(rows)
    assert len(base["history"]) == ITERATIONS
    for key in ("objective/score", "objective/kl", "objective/kl_k3", "ppo/policy/loss", "ppo/val/loss",
                "response/length_mean", "optim/grad_norm"):
        assert key in base["history"][0], key


def test_first_minibatch_ratio_is_one_every_iteration(base):
    assert len(base["ratio_dev"]) == ITERATIONS
    assert all(dev is not None and dev < 1e-4 for dev in base["ratio_dev"]), base["ratio_dev"]


def test_k3_kl_is_non_negative_and_shaping_uses_beta(base):
    for stats in base["history"]:
        assert stats["objective/kl_k3"] >= 0
        assert stats["objective/kl_coef"] == pytest.approx(0.05)
        # k1 estimator, KL in the reward: the non-score reward is -beta * KL per sequence.
        assert stats["objective/non_score_reward"] == pytest.approx(
            -stats["objective/kl_coef"] * stats["objective/kl"], abs=1e-6)
    assert base["history"][0]["objective/kl"] == pytest.approx(0.0, abs=1e-5)  # actor == reference
    assert base["history"][-1]["objective/kl_k3"] > 0  # the actor moved


def test_minibatch_count_and_actor_training(base):
    for stats in base["history"]:
        assert stats["ppo/minibatches"] == 2 * (BATCH // 8)
        assert stats["ppo/actor_trained"] == 1.0
        assert 1 <= stats["response/length_mean"] <= 12
        assert 0 <= stats["response/eos_rate"] <= 1


def test_final_checkpoints_load_with_plain_transformers(base, trained):
    out = base["out"]
    assert (out / MANIFEST).is_file() and (out / "critic" / MANIFEST).is_file()
    policy = AutoModelForCausalLM.from_pretrained(out)
    critic = AutoModelForSequenceClassification.from_pretrained(out / "critic")
    assert critic.config.num_labels == 1
    assert_model_card(out, "ppo", metric="objective/kl")
    assert_model_card(out / "critic", "ppo", role="critic")
    trainer = base["trainer"]
    for (k, a), (_, b) in zip(policy.state_dict().items(), role(trainer, "actor").engine.model.state_dict().items()):
        assert torch.equal(a, b), k
    for (k, a), (_, b) in zip(critic.state_dict().items(), role(trainer, "critic").engine.model.state_dict().items()):
        assert torch.equal(a, b), k
    assert not _same_as(policy, _sft_weights(trained))  # PPO changed the policy


def test_same_seed_reproduces_metrics_exactly(base, trained, tmp_path_factory):
    again = run(trained, tmp_path_factory, "again")
    assert [comparable(r) for r in again["rows"]] == [comparable(r) for r in base["rows"]]
    assert [comparable(s) for s in again["history"]] == [comparable(s) for s in base["history"]]


# -- variants -----------------------------------------------------------------------------
def test_adaptive_kl_controller_follows_the_rule(trained, tmp_path_factory):
    target, horizon = 0.5, 32
    res = run(trained, tmp_path_factory, "adaptive", "kl.controller=adaptive", "kl.coef=0.1",
              f"kl.target={target}", f"kl.horizon={horizon}")
    hist = res["history"]
    assert hist[0]["objective/kl_coef"] == pytest.approx(0.1)
    for prev, cur in zip(hist, hist[1:]):
        error = min(max(prev["objective/kl"] / target - 1.0, -0.2), 0.2)
        expected = prev["objective/kl_coef"] * (1.0 + error * BATCH / horizon)
        assert cur["objective/kl_coef"] == pytest.approx(expected, rel=1e-9)
        assert cur["objective/kl_coef"] != prev["objective/kl_coef"]
    for stats in hist:  # the current beta is the one used in the reward
        assert stats["objective/non_score_reward"] == pytest.approx(
            -stats["objective/kl_coef"] * stats["objective/kl"], abs=1e-6)


def test_callable_reward_source(trained, tmp_path_factory, monkeypatch):
    monkeypatch.syspath_prepend(str(HERE))
    import reward_fns

    reward_fns.CALLS.clear()
    res = run(trained, tmp_path_factory, "callable", "reward.models=[]", "reward.callable=reward_fns:gold",
              "critic.init=policy",
              "rl.iterations=2")
    assert isinstance(role(res["trainer"], "reward"), CallableReward)
    assert len(reward_fns.CALLS) == 2
    for (prompts, responses, scores), stats in zip(reward_fns.CALLS, res["history"]):
        assert len(prompts) == len(responses) == BATCH
        assert all(p.startswith("what is") for p in prompts)
        assert stats["objective/score_raw"] == pytest.approx(sum(scores) / len(scores), abs=1e-5)
    assert_all_finite(res["rows"])


def test_ensemble_min_of_the_same_model_equals_the_model(base, trained, tmp_path_factory):
    res = run(trained, tmp_path_factory, "ensemble", f"reward.models=[{trained['rm']},{trained['rm']}]",
              "reward.combine=min")
    reward = role(res["trainer"], "reward")
    assert isinstance(reward, EnsembleReward) and len(reward.members) == 2 and reward.combine == "min"
    assert all(isinstance(m, ModelReward) for m in reward.members)
    # min(r, r) == r: the whole run is identical to the single-model run.
    assert [comparable(s) for s in res["history"]] == [comparable(s) for s in base["history"]]


def test_kl_in_the_loss(trained, tmp_path_factory):
    res = run(trained, tmp_path_factory, "klloss", "kl.placement=loss", "kl.estimator=k3", "rl.iterations=2")
    assert_all_finite(res["rows"])
    for stats in res["history"]:
        assert stats["objective/non_score_reward"] == 0.0  # no KL in the reward
        assert stats["objective/kl_k3"] >= 0
    assert all(dev < 1e-4 for dev in res["ratio_dev"])


def test_critic_initialised_from_the_policy(trained, tmp_path):
    cfg = ppo_config(trained, tmp_path / "ppo", "critic.init=policy")
    roles = build_roles(cfg)
    critic = roles.critic.engine.model
    sft = _sft_weights(trained)
    backbone = {k: v for k, v in sft.items() if k.startswith("model.")}
    assert backbone and _same_as(critic, backbone)
    rm = load_file(str(trained["rm"] / "model.safetensors"))
    assert not torch.equal(critic.score.weight, rm["score.weight"])
    assert critic.score.weight.std() < 0.1  # fresh small head


def test_critic_init_policy_run(trained, tmp_path_factory):
    res = run(trained, tmp_path_factory, "criticpolicy", "critic.init=policy", "rl.iterations=2")
    assert_all_finite(res["rows"])
    assert all(dev < 1e-4 for dev in res["ratio_dev"])


def test_critic_warmup_leaves_the_actor_unchanged(trained, tmp_path_factory):
    sft = _sft_weights(trained)
    rm = load_file(str(trained["rm"] / "model.safetensors"))
    checks = {}

    def on_iteration(it, stats, trainer):
        checks[it] = {
            "actor_is_sft": _same_as(role(trainer, "actor").engine.model, sft),
            "critic_is_rm": _same_as(role(trainer, "critic").engine.model, rm),
            "actor_trained": stats["ppo/actor_trained"],
        }

    run(trained, tmp_path_factory, "warmup", "ppo.critic_warmup_iters=1", "rl.iterations=2",
        on_iteration=on_iteration)
    assert checks[1] == {"actor_is_sft": True, "critic_is_rm": False, "actor_trained": 0.0}
    assert checks[2]["actor_is_sft"] is False and checks[2]["actor_trained"] == 1.0


# -- config keys that must have an effect -------------------------------------------------
@pytest.fixture(scope="module")
def short_run(trained, tmp_path_factory):
    """4 cheap iterations with run.log_every=3 and a held-out evaluation configured."""
    task = trained["task"]
    return run(trained, tmp_path_factory, "short", "rl.iterations=4", "run.log_every=3",
               "rollout.batch_size=8", "rl.epochs=1", "rollout.max_new_tokens=4",
               f"eval.prompts={task / 'eval_prompts.jsonl'}", "eval.every=0", "eval.max_prompts=8",
               "eval.judge=tether.tasks.arith.judge:gold_score")


def test_ppo_respects_log_every(short_run):
    steps = [r["step"] for r in short_run["rows"] if r["step"] > 0]
    assert steps == [1, 3, 4]


def test_ppo_runs_the_configured_evaluation(short_run):
    assert any(k.startswith("eval/") for r in short_run["rows"] for k in r)
