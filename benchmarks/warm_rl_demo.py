"""WARM in RL on the demo: RLOO rewarded by one reward model, by the weight average of three (WARM),
and by the mean and mean − std ensembles of the same three, over seeds.

    python benchmarks/warm_rl_demo.py --demo runs/demo --out benchmarks/results/warm-rl --jobs 2

``--demo``: a finished `tether demo`. The script

1. trains three reward models from the demo's SFT model with one head initialisation
   (``head_seed=0``) and ``run.seed`` 0, 1, 2, one epoch each (``configs/demo/rm.yaml``), and
   averages them with ``tether warm`` (scored on the held-out pairs: ``warm.json``);
2. runs ``tether rloo --config configs/demo/rloo.yaml`` from the demo's SFT model for each reward
   (``single``: the seed-0 member; ``warm``; ``mean`` and ``mean_minus_std`` (k = 1) ensembles of the
   three) and each ``--seeds``, the reward written as ``reward.terms`` with a second, weight-0 term
   that logs the training samples' '!' rate every iteration;
3. measures every final policy as ``tether compare`` does (gold, KL to SFT, '!' rate, accuracy on
   the held-out prompts), and per seed the gold at the KL every run reached (the held-out
   evaluations along training, from SFT's point) and the training '!' rate at that KL;

and writes ``results.json`` and ``results.md`` (means and 95% intervals over the seeds).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REWARDS = ("single", "warm", "mean", "mean_minus_std")


def tether(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "tether.cli", *args], check=True)


def reward_terms(kind: str, members: list[Path], warm: Path) -> str:
    if kind == "single":
        rm = f"{{name: rm, models: [{members[0]}]}}"
    elif kind == "warm":
        rm = f"{{name: rm, models: [{warm}]}}"
    else:
        extra = ", std_coef: 1.0" if kind == "mean_minus_std" else ""
        rm = f"{{name: rm, models: [{', '.join(map(str, members))}], combine: {kind}{extra}}}"
    return f"reward.terms=[{rm}, {{name: bang, regex: '!', weight: 0}}]"


def training_curve(run_dir: Path, key: str) -> list[tuple[float, float]]:
    """(objective/kl, ``key``) of every iteration, in order."""
    from tether.metrics.logger import read_metrics

    return [(r["objective/kl"], r[key]) for r in read_metrics(run_dir / "metrics.jsonl")
            if "objective/kl" in r and key in r]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--demo", type=Path, default=Path("runs/demo"))
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/warm-rl"))
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--jobs", type=int, default=1)
    args = ap.parse_args()
    demo, out = args.demo.resolve(), args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    task = demo / "task"
    members = [demo / f"warm_member_s{s}" for s in (0, 1, 2)]
    for seed, member in enumerate(members):
        if not (member / "config.json").exists():
            tether("rm", "--config", str(ROOT / "configs/demo/rm.yaml"), f"model.name_or_path={demo / 'sft'}",
                   f"data.train={task / 'prefs_train.jsonl'}", f"data.eval={task / 'prefs_eval.jsonl'}",
                   "head_seed=0", "epochs=1", f"run.seed={seed}", f"run.out={member}", "run.progress=false")
    warm = demo / "warm_average"
    if not (warm / "warm.json").exists():
        tether("warm", "--models", ",".join(map(str, members)), "--out", str(warm), "--eval",
               str(task / "prefs_eval.jsonl"), "--threads", "1")

    from tether.demo.compare import measure, run_methods
    from tether.eval.pareto import gold_at_kl, matched_kl
    from tether.eval.seeds import over_seeds

    seeds = [int(s) for s in args.seeds.split(",")]
    commands = {}
    for seed in seeds:
        for kind in REWARDS:
            run_dir = out / f"seed{seed}" / kind
            run_dir.parent.mkdir(parents=True, exist_ok=True)
            if (run_dir / "config.json").exists():
                continue
            argv = ["rloo", "--config", str(ROOT / "configs/demo/rloo.yaml"), f"run.out={run_dir}",
                    f"run.seed={seed}", "run.overwrite=true", "run.progress=false",
                    f"model.name_or_path={demo / 'sft'}", f"prompts={task / 'ppo_prompts.jsonl'}",
                    f"eval.prompts={task / 'eval_prompts.jsonl'}", "reward.models=[]",
                    reward_terms(kind, members, warm)]
            commands[seed, kind] = (argv, run_dir.parent / f"{kind}.log", run_dir)
    run_methods(commands, args.jobs)

    per_seed = {}
    for seed in seeds:
        runs = {kind: {"method": "rloo"} for kind in REWARDS}
        data = measure(out / f"seed{seed}", demo, runs, seed, 4)
        curves = {k: [(0.0, data["sft"]["gold_score"]),
                      *[(p["kl"], p["gold_score"]) for p in data["methods"][k]["trajectory"][:-1]]]
                  for k in REWARDS}
        target, golds = matched_kl(curves)
        row = {"matched_kl": target, "sft": data["sft"],
               # The stretch mark: best-of-8 of SFT by the demo's reward model, gold at its analytic KL.
               "best_of_8": next(({"gold_score": b["gold_score"], "kl_analytic": b["kl_analytic"]}
                                  for b in data["best_of_n"] if b["n"] == 8), None)}
        bo8 = row["best_of_8"]
        for kind in REWARDS:
            if bo8 is not None:
                row.setdefault("gold_at_best_of_8_kl", {})[kind] = gold_at_kl(curves[kind], bo8["kl_analytic"])
        for kind in REWARDS:
            final = data["methods"][kind]
            bang = training_curve(out / f"seed{seed}" / kind, "reward/bang")
            row[kind] = {"gold_at_matched_kl": golds[kind],
                         "bang_at_matched_kl": gold_at_kl(bang, target) if bang and bang[0][0] <= target else None,
                         **{k: final[k] for k in ("gold_score", "kl", "spurious_rate", "accuracy") if k in final}}
        per_seed[seed] = row
        (out / f"seed{seed}" / "warm_rl.json").write_text(json.dumps(row, indent=2, default=float) + "\n")
    keys = ("gold_at_matched_kl", "bang_at_matched_kl", "gold_score", "kl", "spurious_rate", "accuracy")
    summary = {"seeds": seeds, "matched_kl": over_seeds([per_seed[s]["matched_kl"] for s in seeds]),
               "sft": {k: over_seeds([per_seed[s]["sft"].get(k) for s in seeds]) for k in ("gold_score", "spurious_rate")},
               "rewards": {kind: {k: over_seeds([per_seed[s][kind].get(k) for s in seeds]) for k in keys}
                           for kind in REWARDS},
               "warm": json.loads((warm / "warm.json").read_text()).get("eval"),
               "best_of_8": {k: over_seeds([(per_seed[s]["best_of_8"] or {}).get(k) for s in seeds])
                             for k in ("gold_score", "kl_analytic")},
               "gold_at_best_of_8_kl": {kind: over_seeds([per_seed[s].get("gold_at_best_of_8_kl", {}).get(kind)
                                                          for s in seeds]) for kind in REWARDS}}
    (out / "results.json").write_text(json.dumps(summary, indent=2, default=float) + "\n")

    def cell(stat: dict) -> str:
        if stat.get("mean") is None:
            return "—"
        ci = stat.get("ci95")
        return f"{stat['mean']:+.3f}" + (f" [{ci[0]:+.3f}, {ci[1]:+.3f}]" if ci else "")

    lines = ["| reward | gold at matched KL | training '!' rate at matched KL | final gold | final KL | final '!' rate "
             "| accuracy |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for kind in REWARDS:
        r = summary["rewards"][kind]
        lines.append(f"| {kind} | {cell(r['gold_at_matched_kl'])} | {cell(r['bang_at_matched_kl'])} | "
                     f"{cell(r['gold_score'])} | {cell(r['kl'])} | {cell(r['spurious_rate'])} | {cell(r['accuracy'])} |")
    b = summary["best_of_8"]
    lines.append(f"\nBest-of-8 of SFT by the demo's reward model: gold {cell(b['gold_score'])} at analytic KL "
                 f"{cell(b['kl_analytic'])}; each run's held-out gold at that KL: " + ", ".join(
                     f"{kind} {cell(summary['gold_at_best_of_8_kl'][kind])}" for kind in REWARDS) + ".")
    lines.append(f"\nMatched KL per seed: {summary['matched_kl']['values']}; SFT gold "
                 f"{cell(summary['sft']['gold_score'])}, '!' rate {cell(summary['sft']['spurious_rate'])}.")
    (out / "results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
