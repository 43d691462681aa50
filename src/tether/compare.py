"""`tether compare --demo`: every alignment method from the same SFT model and reward model on the
demo task, with the same budget of generated tokens, measured the same way, on one chart.

The SFT model, the reward model and the task come from a demo directory (``--from``, or a fresh
one built here). Each method runs from its preset in ``configs/demo/`` as its own command in a
child process (so its wall time and peak RSS are its own): ppo, grpo, rloo and reinforce_pp
generate 128 responses of at most 24 tokens per iteration for 100 iterations; dpo, simpo and orpo
train on the reward model's preference pairs and generate nothing. Every final policy (and the RL
runs' held-out evaluations during training, and the preference methods' checkpoints) is then scored on the held-out
prompts by the gold judge and the reward model, with the KL to the SFT policy, beside the
best-of-N curve of the SFT policy. ``DIR/compare.json``, ``DIR/compare.md`` and
``DIR/compare.png`` hold the results.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from tether.algorithms.registry import ALGORITHMS, DEFAULT_ALGORITHM, load_plugins
from tether.runs import write_json

SNAPSHOTS = 4  # a preference method's checkpoints evaluated along the way (its trajectory)


def rl_methods() -> tuple[str, ...]:
    """The RL algorithms ``tether compare`` can run: every registered one (plugins included)."""
    load_plugins()
    return tuple(ALGORITHMS)


def preference_methods() -> tuple[str, ...]:
    """The methods trained on the demo's preference pairs instead of sampling (DPO, SimPO, ORPO)."""
    from tether.stages import compared_preference_stages

    return compared_preference_stages()


def methods() -> tuple[str, ...]:
    """Every method ``tether compare`` can run: the RL algorithms, then the preference methods."""
    return (*rl_methods(), *preference_methods())


def method_preset(method: str) -> Path:
    """The demo preset a method runs from (a plugin algorithm brings its own: a clear error until it does)."""
    from tether.demo import PRESETS, preset

    if preset(method) is None:
        from tether.errors import ConfigError

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
    from tether.metrics.logger import read_metrics

    return [{"step": r["step"], "gold_score": r.get("eval/gold_score"), "proxy_score": r.get("eval/proxy_score"),
             "kl": r.get("eval/kl")} for r in read_metrics(run_dir / "metrics.jsonl") if "eval/kl" in r]


def compare_demo(out: Path, demo: Path | None = None, methods=None, seed: int = 0,
                 overrides: dict[str, list[str]] | None = None, eval_repeats: int = 4, say=print) -> dict:
    """Run ``methods`` from the demo's SFT and RM (``demo``, or a fresh demo under ``out/demo``),
    score them all and write compare.json / .md / .png in ``out``; returns compare.json's data."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    methods = globals()["methods"]() if methods is None else methods
    for method in methods:  # every preset there before the first run starts
        method_preset(method)
    overrides = overrides or {}
    demo = Path(demo) if demo is not None else prepare_demo(out / "demo", seed, say)
    runs = {}
    for i, method in enumerate(methods, 1):
        extra = list(overrides.get(method, []))
        if method in preference_methods():
            extra = [f"run.save_every={_snapshot_every(demo, method)}", f"run.keep_checkpoints={SNAPSHOTS + 1}", *extra]
        say(f"[{i}/{len(methods)}] {method}: {out / method}")
        result = run_method(method_args(method, demo, out, seed, extra), out / f"{method}.log")
        if result["exit_code"] != 0:
            from tether.errors import TrainingError

            raise TrainingError(f"`tether {method}` failed (exit {result['exit_code']}); its output is in "
                                f"{out / (method + '.log')}.")
        runs[method] = result
    say("measuring every policy on the held-out prompts")
    from tether.eval.compare import measure

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
    from tether.stages import stage_spec

    cfg = load_config(stage_spec(method).config_class(), method_preset(method), [])
    rows = sum(1 for line in (demo / "task" / "prefs_train.jsonl").read_text().splitlines() if line.strip())
    steps = max(1, int(rows * cfg.epochs) // cfg.optim.batch_size)
    return max(1, steps // SNAPSHOTS)


def prepare_demo(demo: Path, seed: int, say) -> Path:
    """The demo task, its SFT model and reward model in ``demo`` (reused when already there)."""
    from tether.demo import stage_configs
    from tether.loops.reward_model import run_reward_model
    from tether.loops.sft import run_sft
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

