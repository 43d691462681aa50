"""`tether compare --demo --seeds N --jobs J`'s orchestration with the child runs and the
measurement faked (the real single-seed path is tests/integration/test_compare.py): one complete
comparison per seed in DIR/seed<S>/, the aggregate in DIR, J children at once in a fixed order."""

from __future__ import annotations

import json
import threading
import time

import pytest

import tether.demo.compare
from tether.cli import main


class FakeRuns:
    """Stands in for :func:`tether.demo.compare.run_method`: records each command, how many ran at
    once, and fails the commands whose ``(method, seed)`` is in ``fail``."""

    def __init__(self, fail=()):
        self.argvs, self.fail, self.running, self.most = [], set(fail), 0, 0
        self.lock = threading.Lock()

    def __call__(self, argv, log_path):
        seed = int(next(a for a in argv if a.startswith("run.seed=")).split("=")[1])
        with self.lock:
            self.argvs.append(argv)
            self.running += 1
            self.most = max(self.most, self.running)
        time.sleep(0.05 if len(self.argvs) % 2 else 0.01)  # finish out of order
        with self.lock:
            self.running -= 1
        return {"time_s": 10.0 + seed, "peak_rss_mb": 500.0 + seed,
                "exit_code": 1 if (argv[0], seed) in self.fail else 0}


def fake_measure(out, demo, runs, seed, eval_repeats):
    """A single-seed compare.json's data (compare.py's ``measure`` schema, fewer keys)."""
    methods = {m: {"gold_score": 0.1 * (seed + 1), "proxy_score": 1.0, "kl": 1.0 + seed / 10, "win_rate_gold": 0.6,
                   "generated_tokens": 0 if m == "dpo" else 1000,
                   **run, "trajectory": [{"step": "final", "gold_score": 0.1 * (seed + 1), "proxy_score": 1.0,
                                          "kl": 1.0 + seed / 10}]} for m, run in runs.items()}
    return {"sft": {"gold_score": -0.4, "proxy_score": -0.3, "kl": 0.0}, "methods": methods,
            "best_of_n": [{"n": 1, "kl_analytic": 0.0, "gold_score": -0.4, "proxy_score": -0.4 + seed}],
            "rm": {"eval_accuracy": 0.8}, "samples_per_policy": 16 * eval_repeats, "seed": seed}


@pytest.fixture
def demo(tmp_path):
    """A `tether demo`-shaped directory: nothing in it is read but the pair count."""
    demo = tmp_path / "demo"
    for part in ("task", "sft", "rm"):
        (demo / part).mkdir(parents=True)
    (demo / "task" / "prefs_train.jsonl").write_text("{}\n" * 64)
    return demo


def run(demo, out, *flags):
    return main(["compare", "--demo", "--from", str(demo), "--out", str(out), "--methods", "ppo,grpo,dpo", *flags])


def test_seeds_run_complete_comparisons_and_write_the_aggregate(demo, tmp_path, monkeypatch, capsys):
    fake = FakeRuns()
    monkeypatch.setattr(tether.demo.compare, "run_method", fake)
    monkeypatch.setattr(tether.demo.compare, "measure", fake_measure)
    out = tmp_path / "cmp"
    assert run(demo, out, "--seed", "3", "--seeds", "2", "--jobs", "2") == 0
    printed = capsys.readouterr().out
    starts = [line.split("]")[0] + "]" + line.split("]")[1].split(":")[0] for line in printed.splitlines()
              if line.startswith("[")]
    assert starts == ["[1/6] ppo", "[2/6] grpo", "[3/6] dpo", "[4/6] ppo", "[5/6] grpo", "[6/6] dpo"]
    assert fake.most == 2  # two children at once
    assert [(a[0], a[a.index("--config") + 2]) for a in fake.argvs][:2] == [("ppo", f"run.out={out / 'seed3' / 'ppo'}"),
                                                                          ("grpo", f"run.out={out / 'seed3' / 'grpo'}")]
    for seed in (3, 4):  # each seed: a complete single-seed comparison
        single = json.loads((out / f"seed{seed}" / "compare.json").read_text())
        assert single["seed"] == seed and list(single["methods"]) == ["ppo", "grpo", "dpo"]
        assert single["methods"]["grpo"]["time_s"] == 10.0 + seed
        assert (out / f"seed{seed}" / "compare.png").is_file() and (out / f"seed{seed}" / "compare.md").is_file()
    data = json.loads((out / "compare.json").read_text())
    assert data["seeds"] == [3, 4] and data["runs"] == ["seed3", "seed4"] and list(data["methods"]) == ["ppo", "grpo", "dpo"]
    gold = data["methods"]["ppo"]["gold_score"]
    assert gold["values"] == pytest.approx([0.4, 0.5]) and gold["mean"] == pytest.approx(0.45) and gold["n"] == 2
    assert gold["sd"] == pytest.approx(0.0707107) and gold["ci95"] == pytest.approx([0.45 - 0.6353102, 0.45 + 0.6353102])
    assert data["methods"]["dpo"]["peak_rss_mb"]["values"] == [503.0, 504.0]
    assert data["best_of_n"][0]["proxy_score"]["values"] == [2.6, 3.6]
    table = (out / "compare.md").read_text().strip()
    assert "| PPO | 2 | +0.450 ± 0.071 | [-0.185, +1.085] |" in table and table in printed
    assert (out / "compare.png").stat().st_size > 10_000
    assert any("run.save_every=" in a for a in fake.argvs[2])  # dpo's snapshots, as in one comparison


def test_one_seed_is_one_comparison_in_dir(demo, tmp_path, monkeypatch, capsys):
    fake = FakeRuns()
    monkeypatch.setattr(tether.demo.compare, "run_method", fake)
    monkeypatch.setattr(tether.demo.compare, "measure", fake_measure)
    out = tmp_path / "cmp"
    assert run(demo, out) == 0
    assert fake.most == 1 and not list(out.glob("seed*"))
    assert json.loads((out / "compare.json").read_text())["methods"]["ppo"]["trajectory"][-1]["step"] == "final"
    assert "[1/3] ppo: " in capsys.readouterr().out


def test_a_failed_run_stops_new_starts_and_names_its_log(demo, tmp_path, monkeypatch, capsys):
    fake = FakeRuns(fail={("grpo", 0)})
    monkeypatch.setattr(tether.demo.compare, "run_method", fake)
    monkeypatch.setattr(tether.demo.compare, "measure", fake_measure)
    assert run(demo, tmp_path / "cmp", "--seeds", "2", "--jobs", "2") == 2
    err = capsys.readouterr().err
    assert "`tether grpo` failed (exit 1)" in err and "seed0/grpo.log" in err
    assert len(fake.argvs) <= 3  # ppo and grpo ran; at most one more had started before grpo ended
    assert not (tmp_path / "cmp" / "compare.json").exists()


def test_bad_seeds_and_jobs_are_refused(tmp_path, capsys):
    for flag in ("--seeds", "--jobs"):
        assert main(["compare", "--demo", "--out", str(tmp_path), flag, "0"]) == 2
        assert f"{flag} must be at least 1" in capsys.readouterr().err
