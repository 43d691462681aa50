"""Do bf16 autocast and a shared actor/critic trunk learn the same as the defaults?

PPO on the demo task from one SFT + reward model: runs the demo preset (configs/demo/ppo.yaml)
in each variant for a few seeds from an existing demo run directory (its task/, sft/ and rm/),
then scores every final policy on the held-out prompts the way `tether demo` does (4 samples
per prompt, gold judge). Prints one JSON report: gold score per run, mean and spread per
variant, PPO seconds. Variants (``--precisions``, a flag that also takes non-precision variants):

    none          the preset (fp32)
    bf16          run.precision=bf16
    shared_trunk  critic.shared_trunk=true (a different model: value head on the actor)

    python benchmarks/bf16_learning.py --demo runs/demo --out runs/bf16 --seeds 0 1 --iterations 100
    python benchmarks/bf16_learning.py --demo runs/demo --out runs/st --precisions none shared_trunk
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))


VARIANTS = {
    "none": ["run.precision=fp32"],
    "bf16": ["run.precision=bf16"],
    "shared_trunk": ["run.precision=fp32", "critic.shared_trunk=true"],
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--demo", required=True, help="A `tether demo` output directory (task/, sft/, rm/).")
    ap.add_argument("--out", required=True, help="Where the PPO runs go.")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--iterations", type=int, default=100)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--precisions", nargs="+", default=["none", "bf16"], choices=list(VARIANTS))
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                    help="Extra PPO config overrides for every run (e.g. critic.optim.lr=1e-3).")
    args = ap.parse_args()

    import torch

    from tether.config import RLConfig, load_config
    from tether.demo import EVAL_REPEATS, held_out_prompts, preset
    from tether.eval.sampling import evaluate_policy
    from tether.loops.rl_run import run_rl
    from tether.models import load_causal_lm, load_scalar_model, load_tokenizer
    from tether.eval.policies import measured_policy, measured_reward
    from tether.rollout import SamplingParams
    from tether.tasks.arith import judge as arith_judge

    torch.set_num_threads(args.threads)
    demo, out = Path(args.demo), Path(args.out)
    task = demo / "task"
    tokenizer = load_tokenizer(str(demo / "sft"))
    sft = load_causal_lm(str(demo / "sft"), tokenizer)
    reward = measured_reward(load_scalar_model(str(demo / "rm"), tokenizer))
    ids, texts = held_out_prompts(task / "eval_prompts.jsonl", tokenizer, EVAL_REPEATS)
    runs = []
    for precision in args.precisions:
        for seed in args.seeds:
            run_dir = out / f"{precision}_seed{seed}"
            cfg = load_config(RLConfig, preset("ppo"), [
                f"run.out={run_dir}", "run.overwrite=true", "run.progress=false", f"run.seed={seed}",
                f"run.threads={args.threads}", f"model.name_or_path={demo / 'sft'}",
                f"prompts={task / 'ppo_prompts.jsonl'}", f"reward.models=[{demo / 'rm'}]",
                f"eval.prompts={task / 'eval_prompts.jsonl'}", f"rl.iterations={args.iterations}",
                *VARIANTS[precision], *args.set,
            ])
            t0 = time.perf_counter()
            result = run_rl(cfg)
            seconds = time.perf_counter() - t0
            policy = measured_policy(load_causal_lm(str(run_dir), tokenizer), tokenizer, cfg.rollout.temperature)
            reference = measured_policy(sft, tokenizer, cfg.rollout.temperature)
            params = SamplingParams(max_new_tokens=cfg.rollout.max_new_tokens, temperature=cfg.rollout.temperature)
            summary = evaluate_policy(policy.sampler, policy.policy, ids, texts, params, 0, reward, reference.policy,
                                      arith_judge.gold_score).summary()
            last = result["history"][-1]
            runs.append({"precision": precision, "seed": seed, "gold_score": summary["gold_score"],
                         "proxy_score": summary["proxy_score"], "kl": summary["kl"], "ppo_s": seconds,
                         "train_score_last": last["objective/score"], "train_kl_last": last["objective/kl"]})
            print(json.dumps(runs[-1]), file=sys.stderr, flush=True)
    report = {"runs": runs, "iterations": args.iterations, "threads": args.threads, "overrides": args.set,
              "by_precision": {}}
    for precision in args.precisions:
        golds = [r["gold_score"] for r in runs if r["precision"] == precision]
        report["by_precision"][precision] = {
            "gold_mean": statistics.fmean(golds),
            "gold_spread": (max(golds) - min(golds)) if len(golds) > 1 else None,
            "ppo_s_mean": statistics.fmean(r["ppo_s"] for r in runs if r["precision"] == precision),
        }
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
