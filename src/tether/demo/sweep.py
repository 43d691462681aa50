"""The β frontier: PPO at several fixed β on the demo task, proxy and gold against √KL.

Each run starts from the demo's SFT and reward model (``DIR/sft``, ``DIR/rm``) and is
evaluated on the held-out prompts every ``eval_every`` iterations, so every run contributes a
trajectory of (KL, proxy, gold) points as well as its end point: with β = 0 the trajectory
itself traces Gao et al.'s over-optimisation curve. Best-of-N of the SFT policy goes on the
same axes. Writes ``DIR/sweep/beta-*/`` runs, ``DIR/frontier.json`` and ``DIR/frontier.png``.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from tether.registry.algorithms import DEFAULT_ALGORITHM
from tether.config import RLConfig, load_config
from tether.common.errors import ConfigError
from tether.loops.rl_run import run_rl
from tether.metrics import read_metrics
from tether.runs import write_json


def sweep_config(demo_dir: Path, beta: float, iterations: int | None, eval_every: int, seed: int, extra: list[str]):
    from tether.demo import preset

    task = demo_dir / "task"
    over = [
        f"run.out={demo_dir / 'sweep' / f'beta-{beta:g}'}", f"model.name_or_path={demo_dir / 'sft'}",
        f"prompts={task / 'ppo_prompts.jsonl'}", f"reward.models=[{demo_dir / 'rm'}]",
        f"eval.prompts={task / 'eval_prompts.jsonl'}", f"eval.every={eval_every}",
        "kl.controller=fixed", f"kl.coef={beta}", f"run.seed={seed}", "run.overwrite=true",
    ]
    if iterations:
        over.append(f"rl.iterations={iterations}")
    return load_config(RLConfig, preset(DEFAULT_ALGORITHM), over + list(extra))


def trajectory(run_dir: Path, beta: float) -> list[dict]:
    """Every held-out evaluation of one run as a frontier point."""
    points = []
    for row in read_metrics(run_dir / "metrics.jsonl", DEFAULT_ALGORITHM):
        if "eval/kl" in row:
            points.append({"label": f"beta={beta:g} @{row['step']}", "beta": beta, "iteration": row["step"],
                           "kl": row["eval/kl"], "proxy_score": row.get("eval/proxy_score"),
                           "gold_score": row.get("eval/gold_score")})
    return points


def run_sweep(demo_dir: str | Path, betas: list[float], iterations: int | None = None, eval_every: int = 10,
              seed: int = 0, extra: list[str] = ()) -> dict:
    from tether.plots.curves import frontier_plot

    demo_dir = Path(demo_dir)
    for name in ("sft", "rm", "task"):
        if not (demo_dir / name).is_dir():
            raise ConfigError(f"'{demo_dir}' has no {name}/: run `tether demo --out {demo_dir}` first.")
    runs = []
    for beta in betas:
        cfg = sweep_config(demo_dir, beta, iterations, eval_every, seed, list(extra))
        print(f"[sweep] beta={beta:g}: {cfg.run.out}", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        run_rl(cfg)
        points = trajectory(Path(cfg.run.out), beta)
        final = dict(points[-1], label=f"beta={beta:g}") if points else None
        runs.append({"beta": beta, "run": cfg.run.out, "final": final, "trajectory": points,
                     "time_s": time.perf_counter() - t0})
    bon_path = demo_dir / "best_of_n.json"
    bon = json.loads(bon_path.read_text())["rows"] if bon_path.exists() else []
    frontier = {"points": [r["final"] for r in runs if r["final"]], "runs": runs, "best_of_n": bon}
    write_json(demo_dir / "frontier.json", frontier)
    all_points = [dict(p, annotate=False) for r in runs for p in r["trajectory"][:-1]]
    frontier_plot(frontier["points"] + all_points, demo_dir / "frontier.png", best_of_n=bon,
                  title="Reward vs KL: PPO at fixed beta (end points and trajectories) and best-of-N")
    return frontier


def format_frontier(frontier: dict) -> str:
    lines = [f"{'run':<14}{'KL':>8}{'sqrt KL':>9}{'proxy':>9}{'gold':>9}"]
    rows = [(p["label"], p) for p in frontier["points"]]
    rows += [(f"best-of-{b['n']}", {**b, "kl": b["kl_analytic"]}) for b in frontier["best_of_n"]]
    for label, p in rows:
        gold = p.get("gold_score")
        lines.append(f"{label:<14}{p['kl']:>8.2f}{max(p['kl'], 0) ** 0.5:>9.2f}{p['proxy_score']:>+9.3f}"
                     f"{'' if gold is None else f'{gold:+9.3f}'}")
    return "\n".join(lines)
