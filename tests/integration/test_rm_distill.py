"""Reward-model distillation: `tether rm teacher=RM` learns a trained reward model's preferences on
the SFT policy's own sampled pairs (tether pairs' unlabeled rows), oriented and soft-labelled by the
teacher; its held-out agreement with the teacher is reported and rises well above chance."""

from __future__ import annotations

import pytest

from tether.cli import main
from tether.metrics.logger import read_metrics

pytestmark = pytest.mark.slow


def test_a_reward_model_distilled_from_a_teachers_scores_on_sampled_pairs(trained, tmp_path, capsys):
    task, sft, teacher = trained["task"], trained["sft"], trained["rm"]
    pairs = tmp_path / "pairs.jsonl"
    assert main(["pairs", "--policy", str(sft), "--prompts", str(task / "ppo_prompts.jsonl"), "--out", str(pairs),
                 "--max-prompts", "96", "--max-new-tokens", "12", "--seed", "0"]) == 0
    out = tmp_path / "student"
    # The student starts from the task's random base model: all it knows of preferences is the teacher's.
    assert main(["rm", f"run.out={out}", "run.progress=false", "run.log_every=5", "run.threads=1",
                 f"model.name_or_path={task / 'base_model'}", f"teacher={teacher}", f"data.train={pairs}",
                 "data.eval_size=24", "data.max_length=64", "optim.lr=0.002", "optim.batch_size=16",
                 "epochs=6", "eval_every=1000"]) == 0
    rows = [r for r in read_metrics(out / "metrics.jsonl") if "eval/teacher_margin_corr" in r]
    final = rows[-1]
    # Agreement with the teacher's ordering (the pairs are oriented by it) and with its margins.
    assert final["eval/accuracy"] > 0.7 and final["eval/teacher_margin_corr"] > 0.5, final
    counts = [r for r in read_metrics(out / "metrics.jsonl") if "data/teacher_flipped" in r]
    assert counts and 0 < counts[0]["data/teacher_flipped"] < counts[0]["data/train_pairs"]


def test_labelled_rows_only_without_a_teacher(trained, tmp_path, capsys):
    sft = trained["sft"]
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text('{"prompt": "1 plus 1", "response_a": "2", "response_b": "3"}\n' * 4)
    code = main(["rm", f"run.out={tmp_path / 'rm'}", f"model.name_or_path={sft}", f"data.train={pairs}"])
    err = capsys.readouterr().err
    assert code != 0 and "row 1" in err and "chosen" in err and "Traceback" not in err
