"""On-policy distillation on the demo: the demo's PPO policy taught to a student a quarter of its size.

    python benchmarks/distill_demo.py --demo runs/demo --out benchmarks/results/distill-demo

``--demo``: a finished `tether demo` (its task, SFT and PPO policies). The script

1. builds the student's base model (``size="small"`` of :mod:`tether.tasks.arith.model`, the
   task's tokenizer) and fine-tunes it on the demo's demonstrations with the demo's SFT preset;
2. runs ``tether distill --config configs/demo/distill.yaml`` (teacher: the demo's PPO policy)
   for each ``--seeds``;
3. measures the student's SFT, the teacher, the teacher's own SFT and every distilled student with
   ``tether eval`` on the held-out prompts (the same seed for all: the same prompts and sampling
   draws), gold by the task's gold judge;

and writes ``results.json`` and ``results.md``: gold, KL, length and EOS rate of each, and the
share of the gold gap (teacher − student SFT) each distilled student closes. Paths in the presets
are rewritten from ``runs/demo`` to ``--demo``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def tether(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "tether.cli", *args], check=True)


def at(demo: Path, *keys: str) -> list[str]:
    """Overrides that point a preset's runs/demo paths at ``demo``."""
    return [f"{key}={demo / value}" for key, value in (k.split("=", 1) for k in keys)]


def build_student(demo: Path, seed: int) -> Path:
    from tether.models import load_tokenizer
    from tether.tasks.arith.build import write_models
    from tether.tasks.arith.model import build_base_model

    out = demo / "student_task"
    out.mkdir(parents=True, exist_ok=True)
    tok = load_tokenizer(str(demo / "task" / "base_model"))
    _, params = write_models(out, tok, build_base_model(tok, seed, size="small"))
    print(f"student base: {params:,} parameters", flush=True)
    return out / "base_model"


def evaluate(demo: Path, policy: Path, reference: Path, out: Path, seed: int) -> dict:
    tether("eval", "--policy", str(policy), "--reference", str(reference), "--prompts",
           str(demo / "task" / "eval_prompts.jsonl"), "--judge", "tether.tasks.arith.judge:gold_score",
           "--seed", str(seed), "--out", str(out), "--threads", "1")
    return json.loads(out.read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--demo", type=Path, default=Path("runs/demo"))
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/distill-demo"))
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--eval-seed", type=int, default=0)
    ap.add_argument("--tag", default="", help="name the distill runs distill_TAG_sSEED (settings side by side)")
    ap.add_argument("overrides", nargs="*", help="extra dotted overrides for every distill run")
    args = ap.parse_args()
    demo, out = args.demo.resolve(), args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    student_sft = demo / "student_sft"
    if not (student_sft / "config.json").exists():
        base = build_student(demo, seed=0)
        tether("sft", "--config", str(ROOT / "configs/demo/sft.yaml"), f"model.name_or_path={base}",
               f"run.out={student_sft}", *at(demo, "data.train=task/sft_train.jsonl", "data.eval=task/sft_eval.jsonl"))
    teacher = demo / "ppo"
    runs = {}
    for seed in [int(s) for s in args.seeds.split(",")]:
        run = demo / (f"distill_{args.tag}_s{seed}" if args.tag else f"distill_s{seed}")
        if not (run / "config.json").exists():
            tether("distill", "--config", str(ROOT / "configs/demo/distill.yaml"), f"run.seed={seed}",
                   f"run.out={run}", f"model.name_or_path={student_sft}", f"reference={teacher}",
                   *at(demo, "prompts=task/ppo_prompts.jsonl", "eval.prompts=task/eval_prompts.jsonl"),
                   *args.overrides)
        runs[f"distilled, seed {seed}"] = run
    policies = {"student SFT": student_sft, "teacher (demo PPO)": teacher, "teacher's SFT": demo / "sft", **runs}
    measured = {}
    for name, policy in policies.items():
        report = evaluate(demo, policy, student_sft, out / f"eval_{policy.name}.json", args.eval_seed)
        measured[name] = {k: report["policy"][k] for k in ("gold_score", "kl", "length_mean", "eos_rate")
                          if k in report["policy"]}
    low, high = measured["student SFT"]["gold_score"], measured["teacher (demo PPO)"]["gold_score"]
    closed = {name: (m["gold_score"] - low) / (high - low) for name, m in measured.items() if name in runs}
    summary = {"measured": measured, "gap_closed": closed,
               "gap_closed_mean": statistics.mean(closed.values()),
               "gap_closed_std": statistics.stdev(closed.values()) if len(closed) > 1 else 0.0,
               "overrides": args.overrides}
    (out / "results.json").write_text(json.dumps(summary, indent=2) + "\n")
    lines = ["| policy | gold | KL to the student's SFT | length | EOS rate | gold gap closed |",
             "| --- | --- | --- | --- | --- | --- |"]
    for name, m in measured.items():
        share = f"{closed[name]:.2f}" if name in closed else ""
        lines.append(f"| {name} | {m['gold_score']:+.3f} | {m.get('kl', float('nan')):.3f} | "
                     f"{m.get('length_mean', float('nan')):.1f} | {m.get('eos_rate', float('nan')):.3f} | {share} |")
    lines.append(f"\nGold gap closed: mean {summary['gap_closed_mean']:.2f} (std {summary['gap_closed_std']:.2f}) "
                 f"over {len(closed)} seeds.")
    (out / "results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
