"""GRPO, RLOO and REINFORCE++ end to end on the tiny task: each runs through its command, trains no
critic, passes the first-minibatch ratio check, and learns an easy reward (short answers)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from card_checks import assert_model_card
from stage_helpers import without_reward
from tether.algorithms import ALGORITHMS as REGISTERED
from tether.cli import main
from tether.metrics.logger import read_metrics

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
ALGORITHMS = ("grpo", "rloo", "reinforce_pp")


def args(trained, out, *extra):
    task = trained["task"]
    return [f"run.out={out}", "run.progress=false", "run.log_every=1", "run.seed=3", "run.threads=1",
            f"model.name_or_path={trained['sft']}", f"prompts={task / 'ppo_prompts.jsonl'}",
            "reward.callable=reward_fns:brief", "rl.iterations=6", "rollout.batch_size=8", "rl.minibatch_size=16",
            "rollout.max_new_tokens=12", "rl.epochs=2", "optim.lr=2e-3", "rl.on_invariant=error",
            "kl.coef=0.01", *extra]


@pytest.fixture(autouse=True)
def reward_module(monkeypatch):
    monkeypatch.syspath_prepend(str(HERE))


@pytest.mark.parametrize("name", ALGORITHMS)
def test_each_algorithm_runs_without_a_critic_and_learns(name, trained, tmp_path, capsys):
    out = tmp_path / name
    group = ["group.size=4"] if name != "reinforce_pp" else ["group.size=2"]
    assert main([name, *args(trained, out, *group)]) == 0
    rows = [r for r in read_metrics(out / "metrics.jsonl") if "objective/score" in r]
    assert len(rows) == 6
    assert not any(key.startswith("ppo/val/") for row in rows for key in row)
    assert not (out / "critic").exists() and (out / "model.safetensors").exists()
    assert yaml.safe_load((out / "config.yaml").read_text())["stage"] == name
    card = assert_model_card(out, name, metric="objective/score")
    assert "rlhf" in card.data.tags and f"| `algorithm` | `{name}` |" in card.text
    first, last = rows[0]["objective/score"], rows[-1]["objective/score"]
    result = json.loads(capsys.readouterr().out)
    assert result["objective/score"] == pytest.approx(last)
    print(f"\n{name}: score {first:+.3f} -> {last:+.3f}")
    assert last > first + 0.1, (first, last)


@pytest.mark.parametrize("name", list(REGISTERED))
def test_every_registered_algorithm_runs_one_iteration(name, trained, tmp_path):
    """Each registry entry, built in or added later, runs one tiny iteration through its command
    with the roles its entry declares (a critic exactly when it says it needs one)."""
    spec = REGISTERED[name]
    out = tmp_path / name
    extra = ["rl.iterations=1", "rollout.batch_size=2", "rl.minibatch_size=4", "rollout.max_new_tokens=4",
             "rl.epochs=1", f"group.size={max(2, spec.min_group_size)}"]
    if spec.needs_critic:
        extra.append("critic.init=policy")
    assert main([name, *without_reward(spec, trained, args(trained, out, *extra))]) == 0
    rows = [r for r in read_metrics(out / "metrics.jsonl") if "objective/score" in r]
    assert len(rows) == 1 and (out / "critic").is_dir() is spec.needs_critic



def test_grpo_options_sequence_mean_dr_grpo_and_clip_higher(trained, tmp_path):
    out = tmp_path / "opts"
    assert main(["grpo", *args(trained, out, "rl.iterations=2", "group.scale_by_std=false",
                                "policy_loss.aggregation=fixed_normalizer", "policy_loss.clip_high=0.28",
                                "kl.placement=loss", "kl.estimator=k3")]) == 0
    rows = [r for r in read_metrics(out / "metrics.jsonl") if "objective/score" in r]
    assert all("ppo/policy/kl_loss" in r for r in rows)


@pytest.mark.parametrize("name, level", [("grpo", "sequence"), ("rloo", "sequence_product")])
def test_sequence_level_ratios_run_and_pass_the_ratio_check(name, level, trained, tmp_path):
    """One clipped ratio per response (GSPO's; TRL's RLOO's) through the command, two epochs so the
    ratios move; the first-minibatch check still sees every token's ratio at 1."""
    out = tmp_path / level
    assert main([name, *args(trained, out, "rl.iterations=2", f"policy_loss.ratio_level={level}",
                                "policy_loss.aggregation=sequence_mean")]) == 0
    rows = [r for r in read_metrics(out / "metrics.jsonl") if "objective/score" in r]
    assert len(rows) == 2 and all("ppo/policy/clipfrac" in r for r in rows)
    assert yaml.safe_load((out / "config.yaml").read_text())["policy_loss"]["ratio_level"] == level


@pytest.mark.parametrize("argv, needle", [
    (["grpo", "kl.placement=loss", "kl.estimator=k1"], "zero expected gradient"),
    (["ppo", "algorithm=grpo"], "run `tether grpo`"),
    (["grpo", "group.size=1"], "'group.size' = 1"),
    (["reinforce_pp", "critic.shared_trunk=true", "rl.minibatch_size=8"], "trains no critic"),
    (["ppo", "policy_loss.clip_high=0.3"], "policy_loss"),
    (["grpo", "rl.minibatch_size=12"], "rollout.batch_size x group.size = 8 x 4 = 32"),
])
def test_algorithm_config_errors(argv, needle, trained, tmp_path, capsys):
    assert main([argv[0], *args(trained, tmp_path / "bad", *argv[1:])]) == 2
    assert needle in capsys.readouterr().err


def test_grpo_with_a_lora_actor(trained, tmp_path):
    """LoRA: the reference is the actor's base with the adapters off; the final model is merged."""
    out = tmp_path / "lora"
    assert main(["grpo", *args(trained, out, "rl.iterations=2", "lora.r=4", "lora.alpha=8")]) == 0
    assert (out / "adapter").is_dir() and (out / "model.safetensors").exists()
