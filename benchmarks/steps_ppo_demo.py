"""RL on the multi-step demo task: the process reward model's step rewards against the outcome
reward model's one score per response, over seeds; PPO (the PRM's two forms, the logit and log
sigmoid of it, as dense rewards) or GRPO (process supervision, and the PRM's sum as one score).

    python benchmarks/steps_ppo_demo.py --steps runs/steps --out benchmarks/results/steps-ppo --jobs 2
    python benchmarks/steps_ppo_demo.py --algorithm grpo --steps runs/steps --out benchmarks/results/steps-grpo --jobs 2

``--steps``: a directory holding the task (``task/``, `python -m tether.tasks.steps.build`), its SFT
model (``sft/``), a PRM (``prm/``, `tether prm --config configs/demo/steps_prm.yaml`) and an outcome
reward model (``rm/``, `tether rm --config configs/demo/steps_rm.yaml`). For each seed the script
runs ``tether ppo`` with ``configs/demo/steps_ppo.yaml`` (the PRM: ``prm`` with ``prm_reward: logit``,
``prm_log_prob`` with ``log_prob``) and ``configs/demo/steps_ppo_rm.yaml`` (``outcome_rm``); with
``--algorithm grpo``, ``tether grpo`` with ``configs/demo/steps_grpo.yaml`` (``prm_process``:
group.advantage=process; ``prm_sum``: the PRM's sum as the score, group.advantage=outcome;
``outcome_rm``), then

- evaluates each final policy on the 256 held-out problems (4 samples each) with ``tether eval``:
  process gold (share of correct steps, ``tether.tasks.steps.judge:gold_score``) and final-answer
  accuracy (``answer_score``), and KL to the SFT model;
- per seed, compares each PRM run with the outcome RM's at the KL both reached: held-out gold from the evaluations along
  training (every ``eval.every`` iterations, from SFT's point), and the training samples'
  final-answer accuracy (the weight-0 ``answer`` term) along ``objective/kl``;

and writes ``results.json`` and ``results.md`` (means, sd and 95% intervals over the seeds).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: algorithm -> run -> (preset, reward: prm_reward or "outcome_rm", extra overrides). Every run but
#: outcome_rm is compared with outcome_rm.
RUNS = {
    "ppo": {"prm": ("configs/demo/steps_ppo.yaml", "logit", ()),
            "prm_log_prob": ("configs/demo/steps_ppo.yaml", "log_prob", ()),
            "outcome_rm": ("configs/demo/steps_ppo_rm.yaml", "outcome_rm", ())},
    "grpo": {"prm_process": ("configs/demo/steps_grpo.yaml", "log_prob", ()),
             "prm_sum": ("configs/demo/steps_grpo.yaml", "log_prob", ("group.advantage=outcome",)),
             "outcome_rm": ("configs/demo/steps_grpo.yaml", "outcome_rm", ("group.advantage=outcome",))},
}


def reward_terms(reward: str, steps: Path) -> str:
    if reward == "outcome_rm":
        main = f"{{name: outcome, models: [{steps / 'rm'}]}}"
    else:
        main = f"{{name: steps, prm: {steps / 'prm'}, prm_reward: {reward}}}"
    return f"reward.terms=[{main}, {{name: answer, callable: 'tether.tasks.steps.judge:gold_reward', weight: 0}}]"


def curve(run_dir: Path, key: str, kl_key: str, start: float | None) -> list[tuple[float, float]]:
    """(KL, ``key``) at every record that has both, in order; from (0, ``start``) when given."""
    from tether.metrics.logger import read_metrics

    points = [(r[kl_key], r[key]) for r in read_metrics(run_dir / "metrics.jsonl") if kl_key in r and key in r]
    return ([(0.0, start)] if start is not None else []) + points


def evaluate(policy: Path, sft: Path, prompts: Path, judge: str, out: Path) -> dict:
    if not out.exists():
        subprocess.run([sys.executable, "-m", "tether.cli", "eval", "--policy", str(policy), "--reference", str(sft),
                        "--prompts", str(prompts), "--judge", judge, "--max-prompts", "256", "--samples-per-prompt",
                        "4", "--threads", "1", "--out", str(out)], check=True, stdout=subprocess.DEVNULL)
    return json.loads(out.read_text())["policy"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=Path, default=Path("runs/steps"))
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/steps-ppo"))
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--algorithm", choices=sorted(RUNS), default="ppo")
    ap.add_argument("overrides", nargs="*", help="config overrides for every run, e.g. rl.iterations=100")
    args = ap.parse_args()
    steps, out = args.steps.resolve(), args.out.resolve()
    task, sft = steps / "task", steps / "sft"
    out.mkdir(parents=True, exist_ok=True)

    from tether.demo.compare import run_methods
    from tether.eval.pareto import gold_at_kl, matched_kl
    from tether.eval.seeds import over_seeds

    seeds = [int(s) for s in args.seeds.split(",")]
    runs = RUNS[args.algorithm]
    compared = [kind for kind in runs if kind != "outcome_rm"]
    commands = {}
    for seed in seeds:
        for kind, (preset, reward, extra) in runs.items():
            run_dir = out / f"seed{seed}" / kind
            run_dir.parent.mkdir(parents=True, exist_ok=True)
            if (run_dir / "config.json").exists():
                continue
            argv = [args.algorithm, "--config", str(ROOT / preset), f"run.out={run_dir}", f"run.seed={seed}",
                    "run.overwrite=true", "run.progress=false", f"model.name_or_path={sft}",
                    f"prompts={task / 'rl_prompts.jsonl'}", f"eval.prompts={task / 'eval_prompts.jsonl'}",
                    reward_terms(reward, steps), *extra, *args.overrides]
            commands[seed, kind] = (argv, run_dir.parent / f"{kind}.log", run_dir)
    run_methods(commands, args.jobs)

    prompts = task / "eval_prompts.jsonl"
    sft_gold = evaluate(sft, sft, prompts, "tether.tasks.steps.judge:gold_score", out / "sft_gold.json")
    sft_answer = evaluate(sft, sft, prompts, "tether.tasks.steps.judge:answer_score", out / "sft_answer.json")
    per_seed = {}
    for seed in seeds:
        gold_curves, answer_curves, row = {}, {}, {}
        for kind in runs:
            run_dir = out / f"seed{seed}" / kind
            gold_curves[kind] = curve(run_dir, "eval/gold_score", "eval/kl", sft_gold["gold_score"])
            answer_curves[kind] = curve(run_dir, "reward/answer", "objective/kl", None)
            gold = evaluate(run_dir, sft, prompts, "tether.tasks.steps.judge:gold_score", run_dir.parent / f"{kind}_gold.json")
            answer = evaluate(run_dir, sft, prompts, "tether.tasks.steps.judge:answer_score",
                              run_dir.parent / f"{kind}_answer.json")
            row[kind] = {"gold_score": gold["gold_score"], "answer_accuracy": answer["gold_score"], "kl": gold["kl"],
                         "length": gold["length_mean"]}
        for kind in compared:  # each PRM run against the outcome RM's, at the KL both reached
            pair = ("outcome_rm", kind)
            target, golds = matched_kl({k: gold_curves[k] for k in pair})
            answer_target = min(answer_curves[k][-1][0] for k in pair)
            row[kind]["vs_outcome_rm"] = {
                "matched_kl": target, "gold": golds[kind], "outcome_rm_gold": golds["outcome_rm"],
                "train_matched_kl": answer_target, "train_answer": gold_at_kl(answer_curves[kind], answer_target),
                "outcome_rm_train_answer": gold_at_kl(answer_curves["outcome_rm"], answer_target)}
        per_seed[seed] = row
        (out / f"seed{seed}" / "steps_ppo.json").write_text(json.dumps(row, indent=2, default=float) + "\n")

    def diff(a, b):
        return None if a is None or b is None else a - b

    keys = ("gold_score", "answer_accuracy", "kl", "length")
    summary = {"algorithm": args.algorithm, "seeds": seeds, "overrides": args.overrides,
               "sft": {"gold_score": sft_gold["gold_score"], "answer_accuracy": sft_answer["gold_score"]},
               "final": {kind: {k: over_seeds([per_seed[s][kind][k] for s in seeds]) for k in keys} for kind in runs},
               "matched": {}}
    for kind in compared:
        v = [per_seed[s][kind]["vs_outcome_rm"] for s in seeds]
        summary["matched"][kind] = {
            "matched_kl": over_seeds([x["matched_kl"] for x in v]),
            "gold": over_seeds([x["gold"] for x in v]), "outcome_rm_gold": over_seeds([x["outcome_rm_gold"] for x in v]),
            "gold_difference": over_seeds([diff(x["gold"], x["outcome_rm_gold"]) for x in v]),
            "train_answer": over_seeds([x["train_answer"] for x in v]),
            "outcome_rm_train_answer": over_seeds([x["outcome_rm_train_answer"] for x in v]),
            "train_answer_difference": over_seeds([diff(x["train_answer"], x["outcome_rm_train_answer"]) for x in v])}
    (out / "results.json").write_text(json.dumps(summary, indent=2, default=float) + "\n")

    def cell(stat: dict) -> str:
        if stat.get("mean") is None:
            return "—"
        ci = stat.get("ci95")
        return f"{stat['mean']:.3f}" + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "")

    lines = ["| run | matched KL | PRM gold | outcome RM gold | PRM − RM (paired) | training answer accuracy, PRM "
             "/ RM |", "| --- | --- | --- | --- | --- | --- |"]
    for kind in compared:
        m = summary["matched"][kind]
        lines.append(f"| {kind} | {cell(m['matched_kl'])} | {cell(m['gold'])} | {cell(m['outcome_rm_gold'])} | "
                     f"{cell(m['gold_difference'])} {[round(x, 3) for x in m['gold_difference']['values']]} | "
                     f"{cell(m['train_answer'])} / {cell(m['outcome_rm_train_answer'])} |")
    lines += ["", "| reward | final held-out gold | final answer accuracy | final KL | length |",
              "| --- | --- | --- | --- | --- |"]
    for kind in runs:
        f = summary["final"][kind]
        lines.append(f"| {kind} | {cell(f['gold_score'])} | {cell(f['answer_accuracy'])} | {cell(f['kl'])} "
                     f"{[round(x, 2) for x in f['kl']['values']]} | {cell(f['length'])} |")
    lines.append(f"\nSFT: held-out gold {sft_gold['gold_score']:.3f}, answer accuracy {sft_answer['gold_score']:.3f}.")
    (out / "results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
