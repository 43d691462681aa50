"""The README's Qwen recipe at real size on this machine: SFT -> reward model -> PPO and GRPO, a few
steps each, with LoRA and gradient checkpointing, through the CLI, a local random-init
``qwen2.5-0.5b``-shaped checkpoint standing in for the hub id and small local files in the
public datasets' schemas standing in for UltraChat and HH-RLHF (no hub is reachable here).

Each stage runs as its own process (``python -m tether.cli ...``), which reports its own peak
RSS (``VmHWM``, :mod:`tether.metrics.memory`). Seconds per step come from the step rows of the
stage's ``metrics.jsonl``; tokens per second are the stages' own ``perf/`` metrics (SFT, RM: the
tokens the steps put through the model, padding not counted; RL: generated tokens per second of
the rollout).

    python benchmarks/scale_e2e.py --work runs/scale --out benchmarks/results/scale/qwen2.5-0.5b.json

prints one JSON document (and writes it to ``--out``); docs/scale.md quotes it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import subprocess
import sys
import time
from pathlib import Path

from tether.metrics.memory import run_module

WORDS = ("the a model answer question data step reward policy value token learn human prefer helpful honest "
         "clear short long because when which explain example detail reason result method train simple "
         "careful kind good better best small large first second next last again").split()


def sentence(rng: random.Random, lo: int, hi: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi))) + "."


def write_data(root: Path, rows: int, seed: int = 0) -> dict[str, Path]:
    """Local files in the public schemas: UltraChat-style ``messages`` (SFT and prompts) and
    HH-RLHF-style ``chosen``/``rejected`` conversations sharing their prefix. Lengths are long-tailed."""
    rng = random.Random(seed)
    root.mkdir(parents=True, exist_ok=True)

    def convo() -> list[dict]:
        return [{"role": "user", "content": sentence(rng, 5, 60)},
                {"role": "assistant", "content": sentence(rng, 10, 150)}]

    def hh() -> dict:
        prefix = f"\n\nHuman: {sentence(rng, 5, 60)}\n\nAssistant:"
        return {"chosen": f"{prefix} {sentence(rng, 10, 120)}", "rejected": f"{prefix} {sentence(rng, 10, 120)}"}

    files = {
        "sft": [{"messages": convo()} for _ in range(rows)],
        "sft_eval": [{"messages": convo()} for _ in range(16)],
        "hh": [hh() for _ in range(rows)],
        "hh_eval": [hh() for _ in range(16)],
        "prompts": [{"messages": [{"role": "user", "content": sentence(rng, 5, 60)}]} for _ in range(rows)],
    }
    paths = {}
    for name, data in files.items():
        paths[name] = root / f"{name}.jsonl"
        paths[name].write_text("".join(json.dumps(r) + "\n" for r in data))
    return paths


def step_rows(run_dir: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [r for r in rows if r.get("step", 0) > 0 and ("train/loss" in r or "timing/iteration" in r)]


def seconds_per_step(rows: list[dict]) -> float | None:
    """Median gap between consecutive step rows (the first step, with its warm-up, left out)."""
    times = [r["time"] for r in rows]
    gaps = sorted(b - a for a, b in zip(times, times[1:]))
    return gaps[len(gaps) // 2] if gaps else None


def run_stage(name: str, argv: list[str], log: Path, env: dict) -> dict:
    print(f"[scale] {name}: tether {' '.join(argv)}", file=sys.stderr, flush=True)
    start = time.monotonic()
    with open(log, "w") as out:
        code, peak = run_module("tether.cli", argv, stdout=out, stderr=subprocess.STDOUT, env=env)
    wall = time.monotonic() - start
    if code != 0:
        raise SystemExit(f"{name} failed (exit {code}); see {log}:\n{log.read_text()[-3000:]}")
    return {"command": "tether " + " ".join(argv), "peak_rss_mb": peak, "wall_s": round(wall, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, required=True, help="scratch directory (model, data, runs)")
    parser.add_argument("--out", type=Path, default=None, help="write the JSON report here too")
    parser.add_argument("--model", default="qwen2.5-0.5b")
    parser.add_argument("--precision", default="bf16", choices=["fp32", "bf16"])
    parser.add_argument("--steps", type=int, default=4, help="optimiser steps (SFT, RM) / iterations (RL)")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--threads", type=int, default=0, help="run.threads (0: the free cores)")
    parser.add_argument("--stages", default="sft,rm,ppo,grpo",
                        help="which stages to run (later ones read the earlier ones' outputs in --work)")
    args = parser.parse_args()

    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    model = work / args.model
    if not (model / "config.json").is_file():
        code, _ = run_module("tether.cli", ["bench", "--model", args.model, "--write-model", str(model)], env=env)
        if code != 0:
            raise SystemExit(f"could not write the {args.model} checkpoint (exit {code})")
    data = write_data(work / "data", rows=max(64, args.batch * args.steps * 2))
    runs = work / "runs"
    common = [f"run.precision={args.precision}", f"run.threads={args.threads}", "run.progress=false", "run.log_every=1",
              "run.overwrite=true"]
    lora = ["lora.r=16", "gradient_checkpointing=true"]
    stages = {
        "sft": ["sft", "--config", "configs/demo/sft.yaml", f"model.name_or_path={model}", f"data.train={data['sft']}",
                f"data.eval={data['sft_eval']}", f"data.max_length={args.max_length}", "optim.lr=2e-5",
                f"optim.batch_size={args.batch}", "optim.grad_accum_steps=2", "optim.warmup_steps=0", "epochs=1",
                f"max_steps={args.steps}", f"run.out={runs / 'sft'}", *lora, *common],
        "rm": ["rm", "--config", "configs/demo/rm.yaml", f"model.name_or_path={runs / 'sft'}",
               f"data.train={data['hh']}", f"data.eval={data['hh_eval']}", f"data.max_length={args.max_length}",
               "optim.lr=1e-5", f"optim.batch_size={args.batch}", "optim.grad_accum_steps=2", "optim.warmup_steps=0",
               "epochs=1", f"max_steps={args.steps}", f"run.out={runs / 'rm'}", *lora, *common],
        "ppo": ["ppo", "--config", "configs/reference/ppo.yaml", f"model.name_or_path={runs / 'sft'}",
                f"reward.models=[{runs / 'rm'}]", f"prompts={data['prompts']}", f"run.out={runs / 'ppo'}",
                f"rollout.batch_size={args.batch}", f"rl.minibatch_size={args.batch}",
                f"rollout.max_new_tokens={args.new_tokens}", f"rl.iterations={args.steps}", "critic.lora.r=16",
                "critic.gradient_checkpointing=true", *lora, *common],
        "grpo": ["grpo", f"model.name_or_path={runs / 'sft'}", f"reward.models=[{runs / 'rm'}]",
                 f"prompts={data['prompts']}", f"run.out={runs / 'grpo'}", f"rollout.batch_size={args.batch // 4}",
                 "group.size=4", f"rl.minibatch_size={args.batch}", f"rollout.max_new_tokens={args.new_tokens}",
                 f"rl.iterations={args.steps}", *lora, *common],
    }
    report = {"model": args.model, "precision": args.precision, "machine": platform.processor() or platform.machine(),
              "cpus": os.cpu_count(), "stages": {}}
    for name, argv in stages.items():
        if name not in args.stages.split(","):
            continue
        result = run_stage(name, argv, work / f"{name}.log", env)
        rows = step_rows(runs / name)
        result["steps"] = len(rows)
        result["s_per_step"] = seconds_per_step(rows)
        if name in ("sft", "rm"):
            result["tokens_per_s"] = rows[-1].get("perf/tokens_per_s") if rows else None
        if name in ("ppo", "grpo"):
            last = rows[-1] if rows else {}
            result["generated_tokens_per_s"] = last.get("perf/generated_tokens_per_s")
            result["timing"] = {k: v for k, v in last.items() if k.startswith("timing/")}
        report["stages"][name] = result
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
