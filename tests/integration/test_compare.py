"""`tether compare --demo` end to end at toy size: every method from the same SFT and reward model,
each in its own process, scored together; compare.json, the table and the chart are written."""

from __future__ import annotations

import json

import pytest

from tether.cli import main

pytestmark = pytest.mark.slow

TINY = {  # a few iterations at a small batch: the preset's shape, a toy budget
    "ppo": ["rl.iterations=2", "rollout.batch_size=16", "rl.minibatch_size=16", "rollout.max_new_tokens=8",
            "eval.every=1", "run.threads=1"],
    "grpo": ["rl.iterations=2", "rollout.batch_size=4", "rl.minibatch_size=16", "rollout.max_new_tokens=8",
             "eval.every=1", "run.threads=1"],
    "dpo": ["max_steps=4", "optim.batch_size=16", "eval_every=2", "run.threads=1"],
    "simpo": ["max_steps=4", "optim.batch_size=16", "eval_every=2", "run.threads=1"],
    "orpo": ["max_steps=4", "optim.batch_size=16", "eval_every=2", "run.threads=1"],
}


@pytest.fixture
def demo_dir(trained, tmp_path):
    """A `tether demo`-shaped directory over the tiny task's SFT and reward model."""
    demo = tmp_path / "demo"
    demo.mkdir()
    for name, target in (("task", trained["task"]), ("sft", trained["sft"]), ("rm", trained["rm"])):
        (demo / name).symlink_to(target)
    return demo


def test_compare_runs_every_method_and_writes_the_chart(demo_dir, tmp_path, capsys):
    out = tmp_path / "compare"
    sets = [f"--set={m}:{kv}" for m, kvs in TINY.items() for kv in kvs]
    assert main(["compare", "--demo", "--from", str(demo_dir), "--out", str(out), "--methods", "ppo,grpo,dpo,simpo,orpo",
                 "--eval-repeats", "1", *sets]) == 0
    data = json.loads((out / "compare.json").read_text())
    assert set(data["methods"]) == {"ppo", "grpo", "dpo", "simpo", "orpo"}
    for method, report in data["methods"].items():
        for key in ("gold_score", "proxy_score", "kl", "win_rate_gold", "time_s", "peak_rss_mb"):
            assert isinstance(report[key], float), (method, key)
        assert report["peak_rss_mb"] > 100 and report["trajectory"][-1]["step"] == "final"
    assert len(data["methods"]["ppo"]["trajectory"]) == 3  # two held-out evaluations, then the final policy
    assert data["methods"]["ppo"]["generated_tokens"] > 0 and data["methods"]["dpo"]["generated_tokens"] == 0
    assert data["methods"]["dpo"]["implicit_reward_accuracy"] is not None
    for method in ("dpo", "simpo", "orpo"):  # trained on the pairs: checkpoints, then the final policy
        assert len(data["methods"][method]["trajectory"]) >= 2, method
        assert data["methods"][method]["generated_tokens"] == 0
    assert [row["n"] for row in data["best_of_n"]] == [1, 2, 4, 8, 16]
    assert (out / "compare.png").stat().st_size > 10_000
    table = capsys.readouterr().out
    assert "| GRPO |" in table and "| SimPO |" in table and "| ORPO |" in table
    assert "best-of-8 of SFT" in table and "implicit reward" in table
    assert (out / "compare.md").read_text().strip() in table
    assert "Methods compared" in (out / "report.html").read_text()


def test_compare_refuses_unknown_methods_and_a_bad_source(tmp_path, capsys):
    assert main(["compare", "--demo", "--methods", "ppo,a2c", "--out", str(tmp_path)]) == 2
    assert "--methods" in capsys.readouterr().err
    assert main(["compare", "--demo", "--from", str(tmp_path), "--out", str(tmp_path / "o")]) == 2
    assert "task/, sft/ and rm/" in capsys.readouterr().err
