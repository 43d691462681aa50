"""The measurements behind `tether compare`: every method's final policy (and its trajectory) on the
held-out prompts, beside the SFT policy and its best-of-N curve, all scored the same way."""

from __future__ import annotations

from pathlib import Path

from tether.checkpoint import complete_checkpoints
from tether.metrics.logger import read_metrics

BEST_OF_N = (1, 2, 4, 8, 16)


def measure(out: Path, demo: Path, runs: dict[str, dict], seed: int, eval_repeats: int) -> dict:
    """compare.json's data: per run (``runs``: label -> its run record; the run directory is
    ``out/label``, ``method`` in the record when the label is not the method) the final policy's gold, proxy, KL to SFT, win rates over
    SFT, task accuracy, '!' rate, length, trajectory, wall time and peak RSS; SFT's own numbers;
    best-of-N of SFT; the reward model's and DPO's implicit reward's held-out pair accuracy."""
    from tether.compare import rl_methods, rl_trajectory
    from tether.demo import held_out_prompts, policy_report
    from tether.eval.best_of_n import best_of_n
    from tether.eval.policies import measured_policy, measured_reward
    from tether.eval.sampling import evaluate_policy
    from tether.eval.win_rate import policy_vs_sft
    from tether.models import load_causal_lm, load_scalar_model, load_tokenizer
    from tether.rollout import SamplingParams
    from tether.tasks.arith.judge import gold_score

    tokenizer = load_tokenizer(str(demo / "sft"))
    reward = measured_reward(load_scalar_model(str(demo / "rm"), tokenizer))
    ids, texts = held_out_prompts(demo / "task" / "eval_prompts.jsonl", tokenizer, eval_repeats)
    params = SamplingParams(max_new_tokens=24, temperature=1.0)  # the demo presets' rollout settings
    sft = measured_policy(load_causal_lm(str(demo / "sft"), tokenizer), tokenizer, 1.0)

    def evaluate(path: Path):
        policy = measured_policy(load_causal_lm(str(path), tokenizer), tokenizer, 1.0)
        return evaluate_policy(policy.sampler, policy.policy, ids, texts, params, seed, reward, sft.policy, gold_score)

    sft_samples = evaluate_policy(sft.sampler, sft.policy, ids, texts, params, seed, reward, sft.policy, gold_score)
    methods = {}
    for label, run in runs.items():  # label: the method, or a sweep's name for one setting of it
        run_dir, method = out / label, run.get("method", label)
        samples = evaluate(run_dir)
        report = {**policy_report(samples), **policy_vs_sft(samples, sft_samples), **run}
        if method in rl_methods():
            report.update(generated(run_dir))
            report["trajectory"] = rl_trajectory(run_dir)
        else:
            report["trajectory"] = [
                {"step": int(ckpt.name.split("-")[1]), **_point(evaluate(ckpt / "model"))}
                for ckpt in complete_checkpoints(run_dir) if (ckpt / "model" / "model.safetensors").is_file()]
            report.update(implicit_reward(run_dir))
            report["generated_tokens"] = 0
        report["trajectory"].append({"step": "final", **_point(samples)})
        methods[label] = report
    n_prompts = len(ids) // eval_repeats
    bon = best_of_n(sft.sampler, ids[:n_prompts], texts[:n_prompts], reward, gold_score, BEST_OF_N, params, seed)
    return {"sft": policy_report(sft_samples), "methods": methods, "best_of_n": bon,
            "rm": {"eval_accuracy": _last(demo / "rm", "eval/accuracy"), "eval_margin": _last(demo / "rm", "eval/margin")},
            "samples_per_policy": len(ids), "seed": seed}


def _point(samples) -> dict:
    s = samples.summary()
    return {"gold_score": s.get("gold_score"), "proxy_score": s.get("proxy_score"), "kl": s.get("kl")}


def _last(run_dir: Path, key: str):
    rows = [r for r in read_metrics(run_dir / "metrics.jsonl") if key in r]
    return rows[-1][key] if rows else None


def generated(run_dir: Path) -> dict:
    """Responses and tokens an RL run sampled for training (iterations x responses per iteration)."""
    import yaml

    from tether.registry.algorithms import DEFAULT_ALGORITHM
    from tether.config.rl_blocks import default_group_size

    cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
    group = (cfg.get("group") or {}).get("size") or default_group_size(cfg.get("algorithm", DEFAULT_ALGORITHM))
    per_iteration = cfg["rollout"]["batch_size"] * group
    rows = [r for r in read_metrics(run_dir / "metrics.jsonl") if "response/length_mean" in r]
    iterations = max((r["step"] for r in rows), default=0)
    mean_length = sum(r["response/length_mean"] for r in rows) / max(len(rows), 1)  # over the logged iterations
    return {"responses_generated": per_iteration * iterations,
            "generated_tokens": round(mean_length * per_iteration * iterations)}


def implicit_reward(run_dir: Path) -> dict:
    """DPO's implicit reward on held-out pairs, as its run logged it last."""
    return {"implicit_reward_accuracy": _last(run_dir, "eval/accuracy"),
            "implicit_reward_margin": _last(run_dir, "eval/margin")}
