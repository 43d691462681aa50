"""`tether prm`: a process reward model trained on step-labelled solutions of the tiny task's prompts
learns which steps are wrong (here: a step that says "sorry"), read at each step's end; its dry
run, its checkpoint (a scalar-head model with its step separator) and a bad row."""

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


def test_a_prm_learns_which_steps_are_wrong(tiny_task, tmp_path, capsys):
    task, out = tiny_task["dir"], tmp_path / "prm"
    solutions(task, tmp_path / "train.jsonl", 400, 0)
    solutions(task, tmp_path / "eval.jsonl", 64, 1)
    args = ["prm", f"model.name_or_path={task / 'base_model'}", f"data.train={tmp_path / 'train.jsonl'}",
            f"data.eval={tmp_path / 'eval.jsonl'}", "step_separator=,", "max_steps=60", "optim.batch_size=16",
            "optim.lr=2e-3", "eval_every=60", f"run.out={out}", "run.progress=false", "run.threads=1",
            "data.max_length=64"]
    assert main([*args, "--dry-run"]) == 0
    plan = capsys.readouterr().out
    assert "400 solutions" in plan and "held out: 64 solutions" in plan
    assert main(args) == 0
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
