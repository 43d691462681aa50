"""Reward-model distillation on the demo: the demo's reward model taught to one a quarter its size.

    python benchmarks/rm_distill_demo.py --demo runs/demo --out benchmarks/results/rm-distill-demo

``--demo``: a finished `tether demo` and `benchmarks/distill_demo.py` (which leaves the small
student's SFT model in ``DEMO/student_sft``). The script

1. samples pairs of responses of the demo's SFT policy with ``tether pairs`` on the prompts of the
   demo's preference file (``--prompts`` of them, unlabeled);
2. for each ``--seeds``: ``tether rm teacher=DEMO/rm`` from the small SFT model on those pairs (the
   teacher orients and soft-labels them), and, as the baseline, ``tether rm`` from the same small
   model on as many of the annotators' labelled pairs;
3. scores the teacher, every distilled student and every baseline on the demo's 2,000 held-out
   labelled pairs: accuracy against the annotators, agreement with gold, and agreement with the
   teacher (the sign of the margin, and the correlation of margins);

and writes ``results.json`` and ``results.md``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]


def tether(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "tether.cli", *args], check=True)


def scores(model_dir: Path, held, tokenizer) -> tuple[torch.Tensor, torch.Tensor]:
    from tether.commands.warm import pair_scores_all
    from tether.models import load_scalar_model

    model = load_scalar_model(str(model_dir), tokenizer).eval()
    return pair_scores_all(model, held, tokenizer.pad_token_id, 64)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--demo", type=Path, default=Path("runs/demo"))
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/rm-distill-demo"))
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--prompts", type=int, default=4000, help="prompts sampled into pairs")
    ap.add_argument("--epochs", default="6")
    args = ap.parse_args()
    demo, out = args.demo.resolve(), args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    task, student, teacher = demo / "task", demo / "student_sft", demo / "rm"
    pairs = demo / "rm_distill_pairs.jsonl"
    if not pairs.exists():
        tether("pairs", "--policy", str(demo / "sft"), "--prompts", str(task / "prefs_train.jsonl"), "--out",
               str(pairs), "--max-prompts", str(args.prompts), "--max-new-tokens", "24", "--seed", "0")
    n_pairs = sum(1 for _ in pairs.open())
    labelled = demo / f"rm_distill_labelled_{n_pairs}.jsonl"
    if not labelled.exists():
        labelled.write_text("".join(line for _, line in zip(range(n_pairs), (task / "prefs_train.jsonl").open())))
    common = ["--config", str(ROOT / "configs/demo/rm.yaml"), f"model.name_or_path={student}", "run.progress=false",
              f"epochs={args.epochs}", f"data.eval={task / 'prefs_eval.jsonl'}"]
    runs = {}
    for seed in [int(s) for s in args.seeds.split(",")]:
        distilled, direct = demo / f"rm_distilled_s{seed}", demo / f"rm_small_s{seed}"
        if not (distilled / "config.json").exists():
            # Held-out pairs of the teacher's own kind: a slice of the sampled pairs (eval_size).
            tether("rm", *common[:-1], f"teacher={teacher}", f"data.train={pairs}", "data.eval=null", "data.eval_size=200",
                   f"run.seed={seed}", f"run.out={distilled}")
        if not (direct / "config.json").exists():
            tether("rm", *common, f"data.train={labelled}", f"run.seed={seed}", f"run.out={direct}")
        runs[seed] = {"distilled": distilled, "labels": direct}

    from tether.algos.judge_format import gold_agreement
    from tether.commands.warm import held_out_pairs
    from tether.models import load_tokenizer

    tokenizer = load_tokenizer(str(teacher))
    held, gold = held_out_pairs(str(task / "prefs_eval.jsonl"), tokenizer, teacher)
    tc, tr = scores(teacher, held, tokenizer)

    def entry(c, r) -> dict:
        agreement, _ = gold_agreement([float(x) for x in (c > r)], gold)
        return {"accuracy": float((c > r).float().mean()), "gold_agreement": agreement,
                "teacher_agreement": float(((c > r) == (tc > tr)).float().mean()),
                "teacher_margin_corr": float(torch.corrcoef(torch.stack([c - r, tc - tr]))[0, 1])}

    measured = {"teacher (the demo's reward model)": entry(tc, tr)}
    for seed, pair in runs.items():
        for kind, path in pair.items():
            measured[f"small, {kind}, seed {seed}"] = entry(*scores(path, held, tokenizer))
    from tether.models import load_scalar_model

    params = {name: sum(p.numel() for p in load_scalar_model(str(path), tokenizer).parameters())
              for name, path in (("teacher", teacher), ("small", runs[min(runs)]["distilled"]))}

    def mean(kind: str, key: str) -> float:
        return statistics.mean(v[key] for k, v in measured.items() if f", {kind}, " in k)

    summary = {"measured": measured, "pairs": n_pairs, "held_out_pairs": len(held), "parameters": params,
               "means": {kind: {key: mean(kind, key) for key in ("accuracy", "gold_agreement", "teacher_agreement",
                                                                   "teacher_margin_corr")}
                         for kind in ("distilled", "labels")}}
    (out / "results.json").write_text(json.dumps(summary, indent=2) + "\n")
    lines = ["| reward model | accuracy (annotators) | gold agreement | agreement with the teacher | margin corr. |",
             "| --- | --- | --- | --- | --- |"]
    for name, m in measured.items():
        lines.append(f"| {name} | {m['accuracy']:.3f} | {m['gold_agreement']:.3f} | {m['teacher_agreement']:.3f} | "
                     f"{m['teacher_margin_corr']:.3f} |")
    lines.append(f"\n{n_pairs} sampled pairs (distilled) or the first {n_pairs} labelled pairs (labels); "
                 f"{len(held)} held-out pairs; parameters {params}.")
    (out / "results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
