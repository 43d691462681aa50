"""`tether compare --demo`: every alignment method from the same SFT model and reward model on the
demo task, with the same budget of generated tokens, measured the same way, on one chart.

The SFT model, the reward model and the task come from a demo directory (``--from``, or a fresh
one built here). Each method runs from its preset in ``configs/demo/`` as its own command in a
child process (so its wall time and peak RSS are its own): ppo, grpo, rloo and reinforce_pp
generate 128 responses of at most 24 tokens per iteration for 100 iterations; dpo, simpo, orpo and
kto train on the reward model's preference pairs (kto on each pair's two responses, labelled) and
generate nothing. Every final policy (and the RL
runs' held-out evaluations during training, and the preference methods' checkpoints) is then scored on the held-out
prompts by the gold judge and the reward model, with the KL to the SFT policy, beside the
best-of-N curve of the SFT policy. ``DIR/compare.json``, ``DIR/compare.md`` and
``DIR/compare.png`` hold the results; :func:`measure` takes the measurements.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from tether.runs.checkpoint import complete_checkpoints
from tether.metrics.logger import read_metrics
from tether.registry.algorithms import ALGORITHMS, DEFAULT_ALGORITHM, load_plugins
from tether.runs import write_json

SNAPSHOTS = 4  # a preference method's checkpoints evaluated along the way (its trajectory)


def rl_methods() -> tuple[str, ...]:
    """The RL algorithms ``tether compare`` can run: every registered one that learns from a reward
    (plugins included), each from the demo's SFT and reward model. On-policy distillation learns from
    a teacher instead (benchmarks/distill_demo.py measures it)."""
    load_plugins()
    return tuple(name for name, spec in ALGORITHMS.items() if spec.needs_reward)


def preference_methods() -> tuple[str, ...]:
    """The methods trained on the demo's preference pairs instead of sampling (DPO, SimPO, ORPO, KTO)."""
    from tether.registry.stages import compared_preference_stages

    return compared_preference_stages()


def methods() -> tuple[str, ...]:
    """Every method ``tether compare`` can run: the RL algorithms, then the preference methods."""
    return (*rl_methods(), *preference_methods())


def method_preset(method: str) -> Path:
    """The demo preset a method runs from (a plugin algorithm brings its own: a clear error until it does)."""
    from tether.demo import PRESETS, preset

    if preset(method) is None:
        from tether.common.errors import ConfigError

        raise ConfigError(f"tether compare runs each method from its demo preset: write {PRESETS / method}.yaml for "
                          f"{method!r} (configs/demo/grpo.yaml is one to start from).")
    return preset(method)


def method_args(method: str, demo: Path, out: Path, seed: int, extra: list[str]) -> list[str]:
    """The command line of one method: its preset with the demo's paths (as `tether demo` runs PPO)."""
    task = demo / "task"
    config = method_preset(method)
    common = [f"run.out={out / method}", f"run.seed={seed}", "run.overwrite=true", "run.progress=false",
              f"model.name_or_path={demo / 'sft'}"]
    if method in preference_methods():
        paths = [f"data.train={task / 'prefs_train.jsonl'}", f"data.eval={task / 'prefs_eval.jsonl'}"]
    else:
        paths = [f"prompts={task / 'ppo_prompts.jsonl'}", f"reward.models=[{demo / 'rm'}]",
                 f"eval.prompts={task / 'eval_prompts.jsonl'}"]
    return [method, "--config", str(config), *common, *paths, *extra]


def run_method(argv: list[str], log_path: Path) -> dict:
    """Run one tether command in a child process; its wall time, its own peak RSS and exit code."""
    from tether.metrics.memory import run_module

    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    t0 = time.perf_counter()
    with open(log_path, "w") as log:
        code, peak = run_module("tether.cli", argv, stdout=log, stderr=subprocess.STDOUT, env=env)
    return {"time_s": time.perf_counter() - t0, "peak_rss_mb": peak, "exit_code": code}


def rl_trajectory(run_dir: Path) -> list[dict]:
    """The held-out evaluations an RL run logged during training (``eval.every``)."""
    return [{"step": r["step"], "gold_score": r.get("eval/gold_score"), "proxy_score": r.get("eval/proxy_score"),
             "kl": r.get("eval/kl")} for r in read_metrics(run_dir / "metrics.jsonl") if "eval/kl" in r]


def compare_demo(out: Path, demo: Path | None = None, methods=None, seed: int = 0,
                 overrides: dict[str, list[str]] | None = None, eval_repeats: int = 4, say=print,
                 seeds: int = 1, jobs: int = 1) -> dict:
    """Run ``methods`` from the demo's SFT and RM (``demo``, or a fresh demo under ``out/demo``),
    score them all and write compare.json / .md / .png in ``out``; returns compare.json's data.

    ``seeds`` > 1: the whole comparison once per run seed ``seed``, ``seed + 1``, ..., each complete
    in ``out/seed<S>``, all from the same demo; then ``out`` gets the aggregate over the seeds (mean,
    sd and 95% interval of each number: :func:`tether.eval.seeds.aggregate_compare`). ``jobs``: how
    many methods' child processes run at once (every run first, then the measurements)."""
    if seeds < 1 or jobs < 1:
        raise ValueError(f"compare_demo needs seeds >= 1 and jobs >= 1, got seeds={seeds}, jobs={jobs}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    methods = globals()["methods"]() if methods is None else methods
    for method in methods:  # every preset there before the first run starts
        method_preset(method)
    overrides = overrides or {}
    demo = Path(demo) if demo is not None else prepare_demo(out / "demo", seed, say)
    run_seeds = [seed + i for i in range(seeds)]
    dirs = {s: out if seeds == 1 else out / f"seed{s}" for s in run_seeds}
    extras = {method: _method_extra(method, demo, overrides) for method in methods}
    commands = {}  # (seed, method) -> (argv, log file, run directory), in run order
    for s in run_seeds:
        dirs[s].mkdir(parents=True, exist_ok=True)
        for method in methods:
            commands[s, method] = (method_args(method, demo, dirs[s], s, extras[method]), dirs[s] / f"{method}.log",
                                   dirs[s] / method)
    results = run_methods(commands, jobs, say)
    per_seed = {}
    for s in run_seeds:
        say("measuring every policy on the held-out prompts" + (f" (seed {s})" if seeds > 1 else ""))
        per_seed[s] = score_runs(dirs[s], demo, {method: results[s, method] for method in methods}, s, eval_repeats)
    if seeds == 1:
        return per_seed[seed]
    from tether.eval.seeds import aggregate_compare
    from tether.plots.compare_seeds import compare_seeds_plot, compare_seeds_table

    data = {**aggregate_compare(per_seed), "runs": [dirs[s].name for s in run_seeds]}
    write_json(out / "compare.json", data)
    compare_seeds_plot(data, out / "compare.png")
    (out / "compare.md").write_text(compare_seeds_table(data) + "\n", encoding="utf-8")
    return data


def _method_extra(method: str, demo: Path, overrides: dict[str, list[str]]) -> list[str]:
    """A method's settings beyond its preset: a preference method's snapshots, then ``--set``'s."""
    extra = list(overrides.get(method, []))
    if method in preference_methods():
        extra = [f"run.save_every={_snapshot_every(demo, method)}", f"run.keep_checkpoints={SNAPSHOTS + 1}", *extra]
    return extra


def run_methods(commands: dict, jobs: int = 1, say=print) -> dict:
    """Run every command (key -> (argv, log file, run directory)) in its own child process, up to
    ``jobs`` at once, started in the given order; key -> :func:`run_method`'s record, in that order.
    After a failure none starts; those running finish, then a TrainingError names each failure."""
    from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

    jobs = max(1, jobs)
    pending, running, results, failed = list(commands), {}, {}, []
    with ThreadPoolExecutor(max_workers=jobs) as pool:  # threads only wait on the children
        while running or (pending and not failed):
            while pending and not failed and len(running) < jobs:
                key = pending.pop(0)
                argv, log, run_dir = commands[key]
                say(f"[{len(commands) - len(pending)}/{len(commands)}] {argv[0]}: {run_dir}")
                running[pool.submit(run_method, argv, log)] = key
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                key = running.pop(future)
                results[key] = future.result()
                if results[key]["exit_code"] != 0:
                    failed.append(key)
    if failed:
        from tether.common.errors import TrainingError

        raise TrainingError("; ".join(f"`tether {commands[k][0][0]}` failed (exit {results[k]['exit_code']}); its "
                                      f"output is in {commands[k][1]}" for k in failed) + ".")
    return {key: results[key] for key in commands}


def score_runs(out: Path, demo: Path, runs: dict[str, dict], seed: int, eval_repeats: int) -> dict:
    """Measure the finished runs in ``out`` (label -> run record) and write compare.json / .md /
    .png there (and the PPO run's report when there is one); returns compare.json's data."""
    data = measure(out, demo, runs, seed, eval_repeats)
    write_json(out / "compare.json", data)
    from tether.plots.compare import compare_plot, compare_table

    compare_plot(data, out / "compare.png")
    (out / "compare.md").write_text(compare_table(data) + "\n", encoding="utf-8")
    from tether.plots.report import build_report

    if (out / DEFAULT_ALGORITHM / "metrics.jsonl").is_file():
        build_report(out)  # the PPO run's report, with the comparison's chart and table
    return data


def _snapshot_every(demo: Path, method: str) -> int:
    """Steps between a preference method's checkpoints: SNAPSHOTS along its demo preset's run."""
    from tether.config import load_config
    from tether.registry.stages import stage_spec

    spec = stage_spec(method)
    cfg = load_config(spec.config_class(), method_preset(method), [])
    pairs = sum(1 for line in (demo / "task" / "prefs_train.jsonl").read_text().splitlines() if line.strip())
    rows = pairs * spec.rows_per_pair  # KTO trains on each pair's two responses as two rows
    steps = max(1, int(rows * cfg.epochs) // cfg.optim.batch_size)
    return max(1, steps // SNAPSHOTS)


def prepare_demo(demo: Path, seed: int, say) -> Path:
    """The demo task, its SFT model and reward model in ``demo`` (reused when already there)."""
    from tether.demo import stage_configs
    from tether.objectives.reward_model import run_reward_model
    from tether.objectives.sft import run_sft
    from tether.tasks.arith import build_task

    if all((demo / part / "model.safetensors").is_file() for part in ("sft", "rm")):
        say(f"reusing the SFT and reward models in {demo}")
        return demo
    demo.mkdir(parents=True, exist_ok=True)
    build_task(demo / "task", seed=seed)
    sft_cfg, rm_cfg, _ = stage_configs(demo, seed, None, {}, False)
    say(f"SFT: {sft_cfg.run.out}")
    run_sft(sft_cfg)
    say(f"reward model: {rm_cfg.run.out}")
    run_reward_model(rm_cfg)
    return demo


# The measurements: every method's final policy (and its trajectory) on the held-out prompts,
# beside the SFT policy and its best-of-N curve, all scored the same way.
BEST_OF_N = (1, 2, 4, 8, 16)


def measure(out: Path, demo: Path, runs: dict[str, dict], seed: int, eval_repeats: int) -> dict:
    """compare.json's data: per run (``runs``: label -> its run record; the run directory is
    ``out/label``, ``method`` in the record when the label is not the method) the final policy's gold, proxy, KL to SFT, win rates over
    SFT, task accuracy, '!' rate, length, trajectory, wall time and peak RSS; SFT's own numbers;
    best-of-N of SFT; the reward model's and DPO's implicit reward's held-out pair accuracy."""
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
