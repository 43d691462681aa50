"""A composed reward end to end: GRPO on the tiny task's base model with ``reward.terms`` (a reward
model, the task's verifiable answer check, a length penalty and a regex) logs every term as
``reward/<name>``, and the raw score it trains on is the weighted sum of the terms."""

from __future__ import annotations

import re

import pytest
import yaml

from tether.cli import main
from tether.metrics.logger import read_metrics

pytestmark = pytest.mark.slow

WEIGHTS = {"rm": 0.5, "answer": 1.0, "length": 2.0, "polite": 0.1}


def grpo_args(paths: dict, out) -> list[str]:
    terms = (f"reward.terms=[{{name: rm, models: [{paths['rm']}], weight: 0.5}}, "
             "{name: answer, callable: 'tether.tasks.arith.verify:answer_reward'}, "
             "{name: length, length_penalty: 0.05, length_target: 2, weight: 2}, "
             r"{name: polite, regex: '^(sure|ok)\b', weight: 0.1}]")
    return ["grpo", f"run.out={out}", "run.progress=false", "run.log_every=1", "run.seed=0", "run.threads=1",
            f"model.name_or_path={paths['policy']}", f"prompts={paths['task'] / 'ppo_prompts.jsonl'}", terms,
            "rl.iterations=2", "rollout.batch_size=2", "group.size=2", "rl.minibatch_size=4",
            "rollout.max_new_tokens=6", "rl.epochs=1", "rl.on_invariant=error"]


def test_the_dry_run_checks_and_sizes_each_terms_models(policy_and_fresh_rm, tmp_path, capsys):
    from transformers import AutoModelForSequenceClassification

    assert main([*grpo_args(policy_and_fresh_rm, tmp_path / "run"), "--dry-run"]) == 0
    plan = capsys.readouterr().out
    assert "reward     4 terms" in plan and "rm (x 0.5): " in plan and "answer (x 1): the Python callable" in plan
    rm = AutoModelForSequenceClassification.from_pretrained(policy_and_fresh_rm["rm"]).num_parameters()
    assert re.search(rf"reward\.rm\s+{rm * 4 / 1e6:.1f} MB", plan)
    assert not (tmp_path / "run").exists()


def test_grpo_with_composed_reward_logs_each_term(policy_and_fresh_rm, tmp_path):
    out = tmp_path / "run"
    assert main(grpo_args(policy_and_fresh_rm, out)) == 0
    rows = [r for r in read_metrics(out / "metrics.jsonl") if "objective/score_raw" in r]
    assert len(rows) == 2
    for row in rows:
        assert all(f"reward/{name}" in row for name in WEIGHTS)
        assert -0.05 * 5 <= row["reward/length"] <= 0  # at most 6 tokens, 2 free
        assert 0 <= row["reward/answer"] <= 1 and 0 <= row["reward/polite"] <= 1
        # The batch mean of the weighted sum is the weighted sum of the terms' batch means.
        combined = sum(weight * row[f"reward/{name}"] for name, weight in WEIGHTS.items())
        assert row["objective/score_raw"] == pytest.approx(combined, abs=1e-5)
    saved = yaml.safe_load((out / "config.yaml").read_text())["reward"]["terms"]
    assert [t["name"] for t in saved] == list(WEIGHTS)
    assert "| `reward.terms` | `rm x 0.5`, `answer x 1`, `length x 2`, `polite x 0.1` |" in (out / "README.md").read_text()


def test_ppo_critic_starts_from_the_first_model_term(policy_and_fresh_rm, tmp_path):
    """critic.init=reward (PPO's default) with reward.terms: the critic loads the model term's checkpoint."""
    out = tmp_path / "ppo"
    args = [a for a in grpo_args(policy_and_fresh_rm, out)[1:] if not a.startswith(("group.size", "rl.iterations"))]
    assert main(["ppo", *args, "rl.iterations=1", "rollout.batch_size=4"]) == 0
    (row,) = [r for r in read_metrics(out / "metrics.jsonl") if "objective/score_raw" in r]
    assert "reward/rm" in row and "ppo/val/loss" in row
    assert yaml.safe_load((out / "config.yaml").read_text())["critic"]["init"] == "reward"
