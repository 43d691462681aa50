"""`tether compare --pareto` end to end at toy size: PPO from its objectives preset at two settings
of the '!' term (logged only; held at a limit by a multiplier) over two seeds, every final policy
measured; pareto.json, the table and the chart are written, the front named per objective."""

from __future__ import annotations

import json

import pytest
from test_compare import demo_dir  # noqa: F401 - the fixture

from tether.cli import main

pytestmark = pytest.mark.slow

TINY = ["rl.iterations=2", "rollout.batch_size=8", "rl.minibatch_size=8", "rollout.max_new_tokens=8",
        "eval.every=0", "run.threads=1"]


def test_pareto_runs_each_setting_over_seeds_and_draws_the_front(demo_dir, tmp_path, capsys):  # noqa: F811
    out = tmp_path / "pareto"
    args = ["compare", "--pareto", "--from", str(demo_dir), "--out", str(out), "--seeds", "2", "--eval-repeats", "1",
            "--vary", "reward.terms[1].limit=null,0.1", "--vary", "reward.terms[1].weight=0,1",
            *[f"--set=ppo:{kv}" for kv in TINY]]
    assert main(args) == 0
    data = json.loads((out / "pareto.json").read_text())
    assert list(data["methods"]) == ["limit=null,weight=0", "limit=0.1,weight=1"]
    assert data["seeds"] == [0, 1] and data["method"] == "ppo"
    free, held = data["methods"]["limit=null,weight=0"], data["methods"]["limit=0.1,weight=1"]
    assert held["setting"] == {"reward.terms[1].limit": 0.1, "reward.terms[1].weight": 1}
    for report in (free, held):
        assert len(report["gold_score"]["values"]) == 2 and report["spurious_rate"]["ci95"] is not None
    assert "constraint/bang/multiplier" in held["training"] and "constraint/bang/multiplier" not in free["training"]
    assert set(data["front"]) == {"proxy_score", "spurious_rate"} and all(data["front"].values())
    # Gold at matched KL: each run's evaluations from SFT's point, at the smallest KL every run of a seed reached
    # (at test size the KLs are sampling noise, possibly below 0: a run that never reached it has none).
    assert len(data["matched_kl"]["values"]) == 2
    per_seed = [json.loads((out / f"seed{s}" / "pareto.json").read_text()) for s in (0, 1)]
    for seed_data in per_seed:
        golds = [m["gold_at_matched_kl"] for m in seed_data["methods"].values()]
        assert any(g is not None for g in golds)  # the run whose last KL it is reaches it
    for s in (0, 1):
        config = (out / f"seed{s}" / "limit=0.1,weight=1" / "config.yaml").read_text()
        assert "limit: 0.1" in config and f"seed: {s}" in config
    assert (out / "pareto.png").stat().st_size > 10_000
    table = capsys.readouterr().out
    assert "| limit=0.1,weight=1 |" in table and "bang " in table and (out / "pareto.md").read_text().strip() in table
    assert "gold at matched KL" in table


def test_pareto_refuses_bad_settings(demo_dir, tmp_path, capsys):  # noqa: F811
    base = ["compare", "--pareto", "--from", str(demo_dir), "--out", str(tmp_path / "o")]
    assert main([*base, "--vary", "reward.terms[1].limit=0.1,0.2", "--vary", "reward.terms[1].weight=1"]) == 2
    assert "need the same length" in capsys.readouterr().err
    assert main(base) == 2
    assert "at least one --vary" in capsys.readouterr().err
    assert main([*base, "--methods", "dpo", "--vary", "x=1,2"]) == 2
    assert "expected one RL algorithm" in capsys.readouterr().err
    assert main([*base, "--methods", "grpo", "--vary", "x=1,2"]) == 2
    assert "grpo_objectives.yaml, which does not exist" in capsys.readouterr().err
