"""`tether prm`: a process reward model trained on step-labelled solutions of the tiny task's prompts
learns which steps are wrong (here: a step that says "sorry"), read at each step's end; its dry
run, its checkpoint (a scalar-head model with its step separator) and a bad row. Then the PRM as a
reward term: PPO takes its step rewards at their tokens (the sequence score leaves it out), RLOO
its sum as the term's score."""

from __future__ import annotations

import json
import random

import pytest

from tether.cli import main
from tether.metrics.logger import read_metrics

pytestmark = pytest.mark.slow

STEPS = ("ok {a}", "the answer is {b}", "hope this helps")


def solutions(task, path, n: int, seed: int) -> None:
    """``n`` solutions of three steps to the task's prompts, each step "sorry" (wrong) half the time."""
    rng = random.Random(seed)
    prompts = [json.loads(line)["prompt"] for line in (task / "ppo_prompts.jsonl").read_text().splitlines()]
    with open(path, "w") as f:
        for i in range(n):
            steps, labels = [], []
            for step in STEPS:
                text = step.format(a=rng.randint(0, 9), b=rng.randint(0, 20))
                wrong = rng.random() < 0.5
                steps.append(f"sorry {text}" if wrong else text)
                labels.append(not wrong)
            f.write(json.dumps({"prompt": prompts[i % len(prompts)], "completions": steps, "labels": labels}) + "\n")


@pytest.fixture(scope="module")
def trained_prm(tiny_task, tmp_path_factory):
    """A PRM trained on 400 solutions (60 steps), with its dry run's plan."""
    task, tmp = tiny_task["dir"], tmp_path_factory.mktemp("prm")
    out = tmp / "prm"
    solutions(task, tmp / "train.jsonl", 400, 0)
    solutions(task, tmp / "eval.jsonl", 64, 1)
    args = ["prm", f"model.name_or_path={task / 'base_model'}", f"data.train={tmp / 'train.jsonl'}",
            f"data.eval={tmp / 'eval.jsonl'}", "step_separator=,", "max_steps=60", "optim.batch_size=16",
            "optim.lr=2e-3", "eval_every=60", f"run.out={out}", "run.progress=false", "run.threads=1",
            "data.max_length=64"]
    import contextlib
    import io

    plan = io.StringIO()
    with contextlib.redirect_stdout(plan):
        assert main([*args, "--dry-run"]) == 0
    assert main(args) == 0
    return {"out": out, "plan": plan.getvalue(), "task": task}


def test_a_prm_learns_which_steps_are_wrong(trained_prm):
    out, plan = trained_prm["out"], trained_prm["plan"]
    assert "400 solutions" in plan and "held out: 64 solutions" in plan
    final = [r for r in read_metrics(out / "metrics.jsonl") if "eval/step_accuracy" in r][-1]
    assert final["eval/step_accuracy"] > 0.9 and final["eval/solution_accuracy"] > 0.6  # chance: 0.5 and 0.125
    config = json.loads((out / "config.json").read_text())
    assert config["step_separator"] == "," and config["architectures"] == ["LlamaForSequenceClassification"]
    assert "process reward model" in (out / "README.md").read_text()


def test_a_step_holding_the_separator_is_named(tiny_task, tmp_path, capsys):
    task = tiny_task["dir"]
    (tmp_path / "bad.jsonl").write_text(json.dumps({"prompt": "what is 1 + 1 ?", "completions": ["ok , 2"],
                                                    "labels": [True]}) + "\n")
    assert main(["prm", f"model.name_or_path={task / 'base_model'}", f"data.train={tmp_path / 'bad.jsonl'}",
                 "step_separator=,", f"run.out={tmp_path / 'x'}", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "bad.jsonl (data.train), row 1: field 'completions': step 1 contains the step separator ','" in err


def ppo_with_prm(trained_prm, out, algorithm: str, *extra: str) -> list[str]:
    task = trained_prm["task"]
    group = ["group.size=2"] if algorithm != "ppo" else ["critic.init=reward"]
    return [algorithm, f"model.name_or_path={task / 'base_model'}", f"prompts={task / 'ppo_prompts.jsonl'}",
            f"reward.terms=[{{name: steps, prm: {trained_prm['out']}}}]", *group, "rl.iterations=2",
            "rollout.batch_size=4", "rl.minibatch_size=4", "rl.epochs=1", "rollout.max_new_tokens=6",
            "run.progress=false", "run.threads=1", "run.log_every=1", f"run.out={out}", *extra]


def test_ppo_takes_the_prm_step_rewards_where_they_fall_and_rloo_their_sum(trained_prm, tmp_path, capsys):
    assert main([*ppo_with_prm(trained_prm, tmp_path / "dry", "ppo"), "--dry-run"]) == 0
    assert "a process reward model, steps ending at ','" in capsys.readouterr().out
    assert main(ppo_with_prm(trained_prm, tmp_path / "ppo", "ppo")) == 0
    rows = [r for r in read_metrics(tmp_path / "ppo" / "metrics.jsonl") if "reward/steps" in r]
    assert len(rows) == 2
    for r in rows:  # the PRM's rewards went to the tokens: the sequence score holds none of them
        assert r["objective/score_raw"] == 0.0 and r["reward/steps"] != 0.0
    assert main(ppo_with_prm(trained_prm, tmp_path / "rloo", "rloo")) == 0
    rows = [r for r in read_metrics(tmp_path / "rloo" / "metrics.jsonl") if "reward/steps" in r]
    assert rows and all(r["objective/score_raw"] == pytest.approx(r["reward/steps"], abs=1e-5) for r in rows)


def test_a_prm_term_setting_that_would_miss_the_step_rewards_is_refused(trained_prm, tmp_path, capsys):
    assert main([*ppo_with_prm(trained_prm, tmp_path / "x", "ppo", "reward.normalize=running"), "--dry-run"]) == 2
    assert "reward term(s) 'steps' give rewards per token" in capsys.readouterr().err
