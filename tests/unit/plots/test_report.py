"""report.html from a synthetic run directory (no models), and `tether report`."""

from __future__ import annotations

import argparse
import json
import math
import random
from pathlib import Path

import pytest

from tether.common.errors import TetherError
from tether.plots.report import build_report, locate

ALARM = {"name": "kl_drifting", "level": "warning", "iteration": 31,
         "message": "KL to the reference is 11.20 nats/sequence (mean of the last 5 iterations)",
         "fix": "Raise kl.coef or lower optim.lr.", "values": {"kl": 11.2}}


def ppo_rows(n: int = 40, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    rows = [{"stage": "ppo", "step": 0, "time": 0.0, "data/prompts": 255, "data/dropped_long": 0}]
    for it in range(1, n + 1):
        rows.append({
            "stage": "ppo", "step": it, "time": float(it),
            "objective/score": 1 - math.exp(-it / 10) + rng.gauss(0, 0.1),
            "objective/score_raw": 2 - math.exp(-it / 10),
            "objective/kl": 0.35 * it + rng.gauss(0, 0.2), "objective/kl_k3": 0.3 * it,
            "objective/kl_coef": 0.05, "objective/entropy": 0.9 - 0.005 * it,
            "objective/non_score_reward": -0.01 * it,
            "response/length_mean": 12 + rng.gauss(0, 0.5), "response/eos_rate": 0.98,
            "response/repetition": 0.02, "ppo/returns_mean": 0.1, "ppo/val/explained_var": 0.4,
            "ppo/policy/loss": -0.01, "ppo/policy/clipfrac": 0.08, "ppo/policy/approxkl": 0.004,
            "ppo/policy/ratio_mean": 1.0, "ppo/val/loss": 0.3 if it != 7 else "nan", "ppo/val/clipfrac": 0.1,
            "optim/grad_norm": 0.6, "optim/critic_grad_norm": 0.8, "optim/lr": 1e-4, "ppo/early_stop": 0.0,
            "timing/iteration": 2.1, "perf/generated_tokens_per_s": 1500.0,
        })
    return rows


def write_jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def make_run(root: Path, demo: bool = False) -> Path:
    """A run directory (or, with ``demo``, a demo directory with sft/ rm/ ppo/ and summary.json)."""
    ppo = root / "ppo" if demo else root
    ppo.mkdir(parents=True, exist_ok=True)
    write_jsonl(ppo / "metrics.jsonl", ppo_rows())
    (ppo / "config.yaml").write_text("stage: ppo\nkl:\n  controller: fixed\n  coef: 0.05\n"
                                     "health:\n  kl_low: 1.0\n  kl_healthy_high: 6.0\n")
    write_jsonl(ppo / "alarms.jsonl", [ALARM, {**ALARM, "name": "entropy_collapse", "level": "alarm",
                                                "iteration": 38, "message": "Policy entropy is 0.0100 nats/token",
                                                "fix": "Set rl.entropy_coef > 0."}])
    samples = []
    for it in (1, 10, 20, 30, 40):
        for k in range(3):
            samples.append({"iteration": it, "prompt": f"what is {k} + 2 ?",
                            "response": f"sure . {k + 2} . <b>iter{it}</b>", "score": 0.1 * it})
    write_jsonl(ppo / "samples.jsonl", samples)
    if demo:
        for stage, rows in (("sft", [{"stage": "sft", "step": s, "train/loss": 3 / s, "eval/loss": 3.2 / s}
                                     for s in range(1, 30)]),
                            ("rm", [{"stage": "rm", "step": s, "train/loss": 0.7 - 0.01 * s, "train/accuracy": 0.5 + 0.01 * s,
                                     "eval/accuracy": 0.5 + 0.009 * s, "eval/margin": 0.05 * s, "eval/loss": 0.69}
                                    for s in range(1, 30)])):
            (root / stage).mkdir()
            write_jsonl(root / stage / "metrics.jsonl", rows)
        summary = {
            "base": {"gold_score": -1.9},
            "sft": {"gold_score": -0.31, "proxy_score": 0.0, "kl": 0.0, "accuracy": 0.52, "spurious_rate": 0.3,
                    "entropy": 0.4, "length_mean": 9.5, "eos_rate": 1.0, "greedy_accuracy": 1.0},
            "rm": {"accuracy": 0.78, "accuracy_ceiling": 0.845, "margin": 1.1, "correct_margin": 0.9,
                   "spurious_bias": 0.6},
            "ppo": {"gold_score": 0.41, "proxy_score": 1.2, "kl": 1.5, "accuracy": 0.74, "spurious_rate": 0.6,
                    "entropy": 0.3, "length_mean": 10.1, "eos_rate": 1.0, "beta": 0.2, "controller": "fixed",
                    "iterations": 40},
            "samples": [{"prompt": "what is 1 + 2 ?", "sft": "ok . 4 .", "ppo": "sure ! 3 ."}],
            "timing": {"sft_s": 60.0, "rm_s": 150.0, "ppo_s": 90.0, "total_s": 320.0},
            "seed": 0,
        }
        (root / "summary.json").write_text(json.dumps(summary))
        (root / "frontier.json").write_text(json.dumps({"points": [
            {"label": "beta=0.2", "beta": 0.2, "kl": 1.4, "proxy_score": 0.8, "gold_score": 0.45},
            {"label": "beta=0.05", "beta": 0.05, "kl": 5.4, "proxy_score": 1.3, "gold_score": 0.36},
            {"label": "beta=0", "beta": 0.0, "kl": 118.0, "proxy_score": 4.0, "gold_score": -9.1}]}))
        (root / "best_of_n.json").write_text(json.dumps([
            {"n": n, "kl_analytic": math.log(n) - (n - 1) / n, "proxy_score": 0.2 * math.log2(n),
             "gold_score": -0.3 + 0.08 * math.log2(n)} for n in (1, 2, 4, 8, 16)]))
    return root


@pytest.fixture(scope="module")
def run_report(tmp_path_factory):
    run = make_run(tmp_path_factory.mktemp("run"))
    return run, build_report(run)


@pytest.fixture(scope="module")
def demo_report(tmp_path_factory):
    demo = make_run(tmp_path_factory.mktemp("demo"), demo=True)
    return demo, build_report(demo)


def test_report_from_a_run_dir(run_report) -> None:
    run, path = run_report
    assert path == run / "report.html"
    text = path.read_text(encoding="utf-8")
    assert text.count("data:image/png;base64,") == 1  # training curves
    assert "KL to the reference is 11.20 nats/sequence" in text and "Raise kl.coef or lower optim.lr." in text
    assert "entropy_collapse" in text and 'class="badge alarm"' in text
    assert "Start: iteration 1" in text and "Middle: iteration 20" in text and "End: iteration 40" in text
    assert "&lt;b&gt;iter40&lt;/b&gt;" in text and "<b>iter40</b>" not in text  # response text is escaped
    assert "Headline" in text and "healthy looks like" in text
    assert "fixed, beta 0.05" in text
    assert 'src="http' not in text and "<script" not in text  # self-contained, static


def test_report_from_a_demo_dir(demo_report) -> None:
    demo, path = demo_report
    files = locate(demo)
    assert files["demo"] and files["metrics"] == demo / "ppo" / "metrics.jsonl"
    assert files["summary"] == demo / "summary.json" and files["alarms"] == demo / "ppo" / "alarms.jsonl"
    assert path == demo / "report.html"
    text = path.read_text(encoding="utf-8")
    # curves, frontier, best-of-N, SFT, RM
    assert text.count("data:image/png;base64,") == 5
    assert "gold score (judge)" in text and "0.410" in text and "0.845" in text  # eval table and RM numbers
    assert "Reward vs KL frontier" in text and "Best-of-N" in text and "Earlier stages" in text
    assert "gold score (held-out, judge): SFT → PPO" in text


def test_report_needs_metrics(tmp_path) -> None:
    with pytest.raises(TetherError, match="no metrics.jsonl"):
        build_report(tmp_path)
    with pytest.raises(TetherError, match="not a directory"):
        build_report(tmp_path / "missing")


def test_report_command(tmp_path, capsys, monkeypatch) -> None:
    from tether.commands import report

    parser = argparse.ArgumentParser(prog="tether")
    sub = parser.add_subparsers(dest="command")
    report.register(sub)
    bare = tmp_path / "bare"  # a run directory holding nothing but metrics.jsonl
    bare.mkdir()
    write_jsonl(bare / "metrics.jsonl", ppo_rows(12))
    out = tmp_path / "elsewhere" / "r.html"
    out.parent.mkdir()  # an output file's directory must exist (tether.common.outputs)
    assert report.run(parser.parse_args(["report", str(bare), "--out", str(out)])) == 0
    assert str(out) in capsys.readouterr().out and not (bare / "report.html").exists()
    text = out.read_text(encoding="utf-8")
    assert text.count("data:image/png;base64,") == 1
    assert "did not record health alarms" in text and "No <code>samples.jsonl</code>" in text
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(TetherError):
        report.run(parser.parse_args(["report", str(empty)]))
    # through the real CLI: a clear message and exit code 2
    import tether.cli as cli

    monkeypatch.setattr(cli, "quiet_libraries", lambda verbose: None)  # skip importing transformers
    assert cli.main(["report", str(empty)]) == 2
    err = capsys.readouterr().err
    assert "tether report: error:" in err and "no metrics.jsonl" in err
