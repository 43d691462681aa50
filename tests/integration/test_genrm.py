"""`tether genrm`: a generative judge trained on the tiny task's preference pairs, both orders of each
pair rendered with a rubric in the task's own words; its held-out verdict accuracy is logged, and the
saved judge rewards a GRPO run in process (pairwise, its verdicts read by the run's pattern)."""

from __future__ import annotations

import pytest

from tether.cli import main
from tether.metrics.logger import read_metrics

pytestmark = pytest.mark.slow

RUBRIC = "{prompt} 1 : {response_a} 2 : {response_b}"  # the tiny task's vocabulary has no letters A, B


def test_a_judge_trained_on_pairs_then_used_as_a_reward(tiny_task, tmp_path, capsys):
    task, judge = tiny_task["dir"], tmp_path / "judge"
    rubric = tmp_path / "rubric.txt"
    rubric.write_text(RUBRIC)
    args = ["genrm", f"model.name_or_path={task / 'base_model'}", f"data.train={task / 'prefs_train.jsonl'}",
            f"data.eval={task / 'prefs_eval.jsonl'}", f"rubric={rubric}", "verdicts=[answer 1, answer 2]",
            "max_steps=30", "optim.batch_size=16", "optim.lr=3e-4", "eval_every=30", f"run.out={judge}",
            "run.progress=false", "run.threads=1", "data.max_length=96"]
    assert main([*args, "--dry-run"]) == 0
    assert "judge examples" in capsys.readouterr().out
    assert main(args) == 0
    rows = [r for r in read_metrics(judge / "metrics.jsonl") if "eval/verdict_accuracy" in r]
    assert rows and 0.0 <= rows[-1]["eval/verdict_accuracy"] <= 1.0 and 0.0 <= rows[-1]["eval/pair_accuracy"] <= 1.0
    # The task's eval pairs carry the gold judge's scores: the judge's and the labels' agreement with it.
    assert 0.0 <= rows[-1]["eval/gold_agreement"] <= 1.0 and 0.0 <= rows[-1]["eval/position_bias"] <= 1.0
    assert 0.5 < rows[-1]["eval/labels_gold_agreement"] <= 1.0 and 0 < rows[-1]["eval/gold_pairs"] <= 100
    first = [r for r in read_metrics(judge / "metrics.jsonl") if r.get("step") == 0][0]
    pairs = sum(1 for line in (task / "prefs_train.jsonl").read_text().splitlines() if line.strip())
    assert first["data/train_examples"] == 2 * pairs  # both orders of every pair
    assert (judge / "model.safetensors").is_file() and (judge / "chat_template.jinja").is_file()
    assert "a generative judge" in (judge / "README.md").read_text()

    out = tmp_path / "grpo"
    spec = (f"{{path: '{judge}', mode: pairwise, rubric: '{rubric}', pattern: 'answer (1|2)', max_tokens: 3, "
            "max_failure_rate: 1.0}")
    assert main(["grpo", f"run.out={out}", "run.progress=false", "run.log_every=1", "run.seed=0", "run.threads=1",
                 f"model.name_or_path={task / 'base_model'}", f"prompts={task / 'ppo_prompts.jsonl'}",
                 f"reward.terms=[{{name: judged, judge: {spec}}}]", "rl.iterations=1", "rollout.batch_size=2",
                 "group.size=2", "rl.minibatch_size=4", "rollout.max_new_tokens=6", "rl.epochs=1"]) == 0
    (row,) = [r for r in read_metrics(out / "metrics.jsonl") if "objective/score_raw" in r]
    assert row["judge/judged/judged"] == 2 and row["judge/judged/requests"] >= 1  # 2 groups of 2: one pair each
