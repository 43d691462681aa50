"""Plots: PNGs are written from synthetic rows, including sparse, missing and non-finite values."""

from __future__ import annotations

import math
import subprocess
import sys

from tether.plots import best_of_n_plot, frontier_plot, metric_panels, training_curves
from tether.plots.curves import moving_average, series

PNG = b"\x89PNG\r\n\x1a\n"


def rows(n: int = 30) -> list[dict]:
    out = [{"stage": "ppo", "step": 0, "data/prompts": 100}]
    for it in range(1, n + 1):
        out.append({"stage": "ppo", "step": it, "objective/score": math.log(it), "objective/score_raw": 1 + math.log(it),
                    "objective/kl": 0.2 * it, "objective/kl_coef": 0.1, "objective/entropy": 1 - 0.01 * it,
                    "response/length_mean": 10.0, "response/repetition": 0.01, "response/eos_rate": 0.99,
                    "ppo/val/loss": "nan" if it == 3 else 0.2, "ppo/policy/clipfrac": 0.05, "ppo/val/clipfrac": 0.1,
                    "ppo/policy/approxkl": 0.01, "optim/grad_norm": 0.5, "ppo/val/explained_var": 0.3})
        if it % 10 == 0:
            out[-1].update({"eval/gold_score": 0.1 * it / 10, "eval/proxy_score": 0.5})
    return out


def is_png(path) -> bool:
    data = path.read_bytes()
    return len(data) > 5000 and data[:8] == PNG


def test_training_curves(tmp_path) -> None:
    from tether.eval.health import Alarm

    alarms = [{"name": "kl_drifting", "level": "warning", "iteration": 12},
              Alarm("entropy_collapse", "alarm", 25, "entropy 0.01", "fix")]  # dicts or Alarm objects
    out = training_curves(rows(), tmp_path / "sub" / "curves.png", alarms=alarms, kl_band=(1, 6), title="t")
    assert out == tmp_path / "sub" / "curves.png" and is_png(out)


def test_training_curves_without_data(tmp_path) -> None:
    assert is_png(training_curves([], tmp_path / "empty.png"))


def test_frontier_and_best_of_n(tmp_path) -> None:
    points = [{"label": "beta=0.2", "beta": 0.2, "kl": 1.4, "proxy_score": 0.8, "gold_score": 0.45},
              {"label": "beta=0.05", "beta": 0.05, "kl": 5.4, "proxy_score": 1.3, "gold_score": 0.36},
              {"label": "beta=0", "beta": 0.0, "kl": 118.0, "proxy_score": 4.0, "gold_score": None}]
    bon = [{"n": n, "kl_analytic": math.log(n) - (n - 1) / n, "proxy_score": 0.1 * n, "gold_score": 0.01 * n}
           for n in (1, 2, 4, 8)]
    assert is_png(frontier_plot(points, tmp_path / "f.png", best_of_n=bon))
    assert is_png(frontier_plot(points + [{**bon[0], "kind": "best_of_n"}], tmp_path / "f2.png"))
    assert is_png(frontier_plot([], tmp_path / "f3.png"))
    assert is_png(best_of_n_plot(bon, tmp_path / "b.png"))
    assert is_png(best_of_n_plot([{**r, "gold_score": None} for r in bon], tmp_path / "b2.png"))


def test_metric_panels(tmp_path) -> None:
    sft = [{"stage": "sft", "step": s, "train/loss": 1 / s, "eval/loss": 1.1 / s} for s in range(1, 40)]
    assert is_png(metric_panels(sft, [("loss", ["train/loss", "eval/loss"]), ("nothing", ["x/y"])], tmp_path / "s.png"))


def test_helpers() -> None:
    xs, ys = series(rows(5), "ppo/val/loss")
    assert xs == [1, 2, 4, 5] and ys == [0.2] * 4  # 'nan' strings and the data row are skipped
    assert moving_average([0, 0, 3, 0, 0], 3) == [0, 1, 1, 1, 0]


def test_plots_and_monitors_import_no_training_code() -> None:
    code = ("import sys, tether.plots, tether.plots.report, tether.eval.health, tether.eval.win_rate; "
            "print(sorted(m for m in ('torch', 'transformers', 'tether.loops', 'tether.models') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
