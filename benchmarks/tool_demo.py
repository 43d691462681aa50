"""Does the tool matter? The tool demo (docs/episodes.md, "The tool demo") over several seeds.

For each seed: build the calc task (``tether.tasks.calc``: ``what is A times B ?`` with A two-digit,
B one-digit; the evaluation facts held out of all training data), then

* **tools**: SFT on the tool demonstrations (configs/demo/sft_tools.yaml), then GRPO in episodes
  calling ``calculator`` (configs/demo/grpo_tools.yaml);
* **no tool**: SFT on direct answers (configs/demo/sft_notool.yaml), then the same GRPO single-turn
  (configs/demo/grpo_notool.yaml).

Every checkpoint (both SFT models, both GRPO policies) is measured the same way on the held-out
facts: sampled at the preset's temperature with a fixed seed (episodes with the tool for the tool
policy), its final answers scored by the gold judge. Reported: gold (mean and 95% interval over the
seeds) for both methods after SFT and after GRPO, answer accuracy, and the tool policy's tool-call
rate (calls per episode) and tool-error rate (failed or malformed blocks per block) from its
episodes' ``env/*`` counters, on the held-out facts and in the last GRPO iteration's rollout.

    python benchmarks/tool_demo.py --out runs/tool_demo                 # 3 seeds, the presets' sizes
    python benchmarks/tool_demo.py --out /tmp/td --seeds 1 --iterations 2 --sft-steps 20 \\
        --n-sft 200 --eval-prompts 16 --eval-repeats 1 --rl-set rollout.batch_size=8 rl.minibatch_size=32

Writes OUT/tool_demo.json (and OUT/seed<N>/report.json per seed) and prints a table. A seed's task
is reused when it is complete; the stages run again.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from tether.config import RLConfig, SFTConfig, load_config
from tether.environments.base import batch_metrics
from tether.eval.seeds import over_seeds
from tether.runs import write_json

ROOT = Path(__file__).resolve().parents[1]
PRESETS = ROOT / "configs" / "demo"
METHODS = {"tools": ("sft_tools", "grpo_tools"), "notool": ("sft_notool", "grpo_notool")}
#: The env/* counters of a tool block that did not give a result.
ERRORS = ("malformed_calls", "bad_arguments", "unknown_tools", "tool_errors", "tool_timeouts")


def tool_rates(counters: dict[str, float], episodes: int) -> dict[str, float | None]:
    """Calls per episode and failed blocks per block from ``env/*`` totals over ``episodes``."""
    calls = counters.get("env/tool_calls", 0.0)
    blocks = calls + counters.get("env/malformed_calls", 0.0)
    errors = sum(counters.get(f"env/{k}", 0.0) for k in ERRORS)
    return {"tool_call_rate": calls / episodes if episodes else None,
            "tool_error_rate": errors / blocks if blocks else None}


def stage_config(cls, preset: str, task: Path, seed_dir: Path, seed: int, extra: list[str]):
    """A preset with the seed's paths in place of its ``runs/calc/...`` ones, then ``extra``: an SFT
    stage trains on the task's ``PRESET_train.jsonl``; an RL stage starts from its method's SFT model
    in ``seed_dir`` and evaluates nothing itself (:func:`measure` does, after it)."""
    if cls is SFTConfig:
        paths = [f"model.name_or_path={task / 'base_model'}", f"data.train={task / f'{preset}_train.jsonl'}",
                 f"data.eval={task / f'{preset}_eval.jsonl'}"]
    else:
        sft = next(s for s, r in METHODS.values() if r == preset)
        paths = [f"model.name_or_path={seed_dir / sft}", f"prompts={task / 'rl_prompts.jsonl'}",
                 "eval.prompts=null", "eval.every=0", "eval.judge=null"]
    return load_config(cls, PRESETS / f"{preset}.yaml", [f"run.out={seed_dir / preset}", f"run.seed={seed}",
                                                         "run.progress=false", "run.overwrite=true", *paths, *extra])


def measure(checkpoint: Path, cfg: RLConfig, prompts: Path, limit: int, repeats: int, seed: int) -> dict:
    """Gold, accuracy and (episodes) tool rates of ``checkpoint`` on the first ``limit`` prompts of
    ``prompts``, each sampled ``repeats`` times as ``cfg`` samples (its engine, temperature, caps and
    environment), with a fixed seed."""
    from tether.eval.policies import measured_policy
    from tether.eval.sampling import seeded_rollouts
    from tether.loops.rl_setup import environment_class, load_prompt_set, sampling_params
    from tether.models import load_causal_lm, load_tokenizer
    from tether.roles.build import episode_engine
    from tether.tasks.calc.judge import gold_score, is_correct

    tokenizer = load_tokenizer(str(checkpoint))
    held = load_prompt_set(str(prompts), "test", tokenizer, cfg.model.chat_template, 10_000, limit=limit,
                           key="eval.prompts", environment=environment_class(cfg))
    engine = measured_policy(load_causal_lm(str(checkpoint), tokenizer), tokenizer, cfg.rollout.temperature,
                             cfg.rollout.engine).sampler
    if cfg.environment.enabled:
        engine = episode_engine(cfg, engine, tokenizer)
    rows = None if held.rows is None else held.rows * repeats
    gold, right, stats = [], [], []
    try:
        for ro in seeded_rollouts(engine, held.ids * repeats, held.texts * repeats, sampling_params(cfg), seed,
                                  rows=rows):
            gold += [gold_score(p, r, bool(e)) for p, r, e in zip(ro.prompts, ro.responses, ro.ended.tolist())]
            right += [is_correct(p, r) for p, r in zip(ro.prompts, ro.responses)]
            stats += [record.stats for record in ro.episodes or []]
    finally:
        if cfg.environment.enabled:
            engine.close()
    out = {"gold": sum(gold) / len(gold), "accuracy": sum(right) / len(right), "n": len(gold)}
    if stats:
        env = batch_metrics(stats)
        out.update(turns=env["env/turns"], truncated=env["env/truncated"], **tool_rates(env, len(stats)))
    return out


def train_env(run_dir: Path, cfg: RLConfig) -> dict:
    """The tool rates of the last GRPO iteration's rollout (its logged env/* totals)."""
    from tether.metrics.logger import read_metrics

    rows = [r for r in read_metrics(run_dir / "metrics.jsonl") if "env/turns" in r]
    if not rows:
        return {}
    episodes = cfg.rollout.batch_size * cfg.group.size
    return {"iteration": rows[-1]["step"], "turns": rows[-1]["env/turns"],
            **tool_rates(rows[-1], episodes)}


def run_method(name: str, task: Path, seed_dir: Path, seed: int, args) -> dict:
    """SFT then GRPO of one method for one seed, each checkpoint measured; stage times in ``time_s``."""
    from tether.loops.rl_run import run_rl
    from tether.objectives.sft import run_sft

    sft_preset, rl_preset = METHODS[name]
    sft_extra = [f"max_steps={args.sft_steps}"] if args.sft_steps else []
    sft_cfg = stage_config(SFTConfig, sft_preset, task, seed_dir, seed, sft_extra + args.sft_set)
    rl_extra = [f"rl.iterations={args.iterations}"] if args.iterations else []
    rl_cfg = stage_config(RLConfig, rl_preset, task, seed_dir, seed, rl_extra + args.rl_set)
    times, t = {}, time.perf_counter()
    run_sft(sft_cfg)
    times["sft"], t = time.perf_counter() - t, time.perf_counter()
    run_rl(rl_cfg)
    times["grpo"], t = time.perf_counter() - t, time.perf_counter()
    prompts = task / "eval_prompts.jsonl"
    result = {stage: measure(Path(path), rl_cfg, prompts, args.eval_prompts, args.eval_repeats, seed)
              for stage, path in (("sft", sft_cfg.run.out), ("grpo", rl_cfg.run.out))}
    times["measure"] = time.perf_counter() - t
    if rl_cfg.environment.enabled:
        result["train_env"] = train_env(Path(rl_cfg.run.out), rl_cfg)
    return {**result, "time_s": times, "iterations": rl_cfg.rl.iterations}


def run_seed(seed: int, out: Path, args) -> dict:
    """Build the seed's task, run both methods; the seed's report (also OUT/seed<N>/report.json)."""
    from tether.tasks.calc import build_task

    seed_dir = out / f"seed{seed}"
    seed_dir.mkdir(parents=True, exist_ok=True)
    task = seed_dir / "task"
    t = time.perf_counter()
    meta = build_task(task, seed=seed, **({"n_sft": args.n_sft} if args.n_sft else {}))
    report = {"seed": seed, "task_s": time.perf_counter() - t, "n_eval_facts": meta["n_eval_facts"],
              "demonstrator_accuracy": {"tools": meta["demonstrator_accuracy_tools"],
                                        "notool": meta["demonstrator_accuracy_notool"]}}
    for name in METHODS:
        print(f"[seed {seed}] {name}: SFT then GRPO", flush=True)
        report[name] = run_method(name, task, seed_dir, seed, args)
    write_json(seed_dir / "report.json", report)
    return report


def summarise(reports: list[dict]) -> dict:
    """Each number over the seeds (values, mean, sd, 95% interval)."""
    def over(name: str, stage: str, key: str) -> dict:
        """``key`` of ``stage`` of method ``name`` over the seeds."""
        return over_seeds([r[name][stage].get(key) for r in reports])

    summary = {name: {f"{stage}_{key}": over(name, stage, key) for stage in ("sft", "grpo")
                      for key in ("gold", "accuracy")} for name in METHODS}
    for stage in ("sft", "grpo", "train_env"):
        for key in ("tool_call_rate", "tool_error_rate"):
            summary["tools"][f"{stage}_{key}"] = over("tools", stage, key)
    summary["grpo_gold_tools_minus_notool"] = over_seeds(
        [r["tools"]["grpo"]["gold"] - r["notool"]["grpo"]["gold"] for r in reports])
    return summary


def _cell(stats: dict, spec: str = "{:+.3f}") -> str:
    """``mean [low, high]`` of :func:`over_seeds`'s statistics (the mean alone for one seed)."""
    if stats["mean"] is None:
        return "—"
    if stats["ci95"] is None:
        return spec.format(stats["mean"])
    low, high = stats["ci95"]
    return f"{spec.format(stats['mean'])} [{spec.format(low)}, {spec.format(high)}]"


def table(summary: dict, n: int) -> str:
    """The summary as a markdown table (mean [95% interval] over ``n`` seeds)."""
    t, rate = summary["tools"], "{:.3f}"
    lines = [f"| over {n} seed(s): mean [95% interval] | tools | no tool |", "| --- | --- | --- |"]
    for label, key, spec in (("gold after SFT", "sft_gold", "{:+.3f}"), ("gold after GRPO", "grpo_gold", "{:+.3f}"),
                             ("accuracy after SFT", "sft_accuracy", rate),
                             ("accuracy after GRPO", "grpo_accuracy", rate)):
        lines.append(f"| {label} | {_cell(t[key], spec)} | {_cell(summary['notool'][key], spec)} |")
    for label, key in (("tool calls / episode (SFT, held out)", "sft_tool_call_rate"),
                       ("tool calls / episode (GRPO, held out)", "grpo_tool_call_rate"),
                       ("tool-error rate (GRPO, held out)", "grpo_tool_error_rate"),
                       ("tool calls / episode (last GRPO iteration)", "train_env_tool_call_rate"),
                       ("tool-error rate (last GRPO iteration)", "train_env_tool_error_rate")):
        lines.append(f"| {label} | {_cell(t[key], rate)} | — |")
    lines.append(f"| gold after GRPO, tools − no tool | {_cell(summary['grpo_gold_tools_minus_notool'])} | |")
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (the module docstring)."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--seeds", type=int, default=3, help="Seeds 0..N-1 (default 3).")
    p.add_argument("--iterations", type=int, default=0, help="GRPO iterations (default: the presets' 100).")
    p.add_argument("--sft-steps", type=int, default=0, help="SFT steps (default: the presets' 2 epochs).")
    p.add_argument("--n-sft", type=int, default=0, help="Tool demonstrations of the task (default 10000).")
    p.add_argument("--eval-prompts", type=int, default=128, help="Held-out facts measured (default: all 128).")
    p.add_argument("--eval-repeats", type=int, default=4, help="Samples per held-out fact (default 4).")
    p.add_argument("--sft-set", nargs="*", default=[], help="Overrides of both SFT stages (KEY=VALUE).")
    p.add_argument("--rl-set", nargs="*", default=[], help="Overrides of both GRPO stages (KEY=VALUE).")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Every seed, then the summary: printed, and written to OUT/tool_demo.json."""
    args = parse_args(argv)
    torch.set_num_threads(1)
    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    reports = [run_seed(seed, args.out, args) for seed in range(args.seeds)]
    summary = summarise(reports)
    settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    result = {"settings": settings, "seeds": reports, "summary": summary, "time_s": time.perf_counter() - t0}
    write_json(args.out / "tool_demo.json", result)
    print(table(summary, len(reports)))
    print(f"\n{json.dumps({r['seed']: {m: r[m]['time_s'] for m in METHODS} for r in reports})}")
    print(f"total {result['time_s']:.0f} s; {args.out / 'tool_demo.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
