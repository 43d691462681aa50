"""`--dry-run`'s predicted peak against the measured peak RSS, for every stage, in both vocabulary
regimes: a Mistral-shaped model with 32,000 vocabulary rows and a Qwen2-shaped one with 151,936
(tied), each small in its trunk (4 layers) so that the vocabulary's share of memory is the real
models' or larger. Random-init checkpoints with tokenizers of the exact vocabulary sizes
(``tether bench --write-model``), data in the public schemas with long-tailed lengths
(``scale_e2e.write_data``).

Each stage runs as its own process and reports its own high-water mark (``VmHWM``,
:mod:`tether.metrics.memory`); the prediction is ``tether.dry_run(...).peak`` for the same
arguments. fp32, 8 rows per step in 2 micro-batches, ``data.max_length=256``, 3 steps (RL: 3
iterations of 8 episodes, 32 new tokens).

    python benchmarks/memory_stages.py --work runs/mem --out benchmarks/results/scale/memory-stages.json

prints a markdown table (and the JSON document to ``--out``); docs/scale.md quotes it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from scale_e2e import write_data  # noqa: E402
from tether.metrics.memory import run_module  # noqa: E402

#: The two regimes' shapes (transformers config keys).
SHAPES = {
    "mistral-32k": {"model_type": "mistral", "architectures": ["MistralForCausalLM"], "vocab_size": 32000,
                    "hidden_size": 512, "intermediate_size": 1408, "num_hidden_layers": 4, "num_attention_heads": 8,
                    "num_key_value_heads": 2, "max_position_embeddings": 2048, "tie_word_embeddings": False,
                    "sliding_window": None, "rms_norm_eps": 1e-5, "hidden_act": "silu"},
    "qwen2-152k": {"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "vocab_size": 151936,
                   "hidden_size": 256, "intermediate_size": 704, "num_hidden_layers": 4, "num_attention_heads": 4,
                   "num_key_value_heads": 2, "max_position_embeddings": 2048, "tie_word_embeddings": True,
                   "use_sliding_window": False, "rms_norm_eps": 1e-6, "hidden_act": "silu"},
}
STAGES = ("sft", "rm", "dpo", "kto", "orpo", "ppo", "grpo")


def write_checkpoint(work: Path, name: str, env: dict) -> Path:
    model = work / name
    if (model / "config.json").is_file():
        return model
    shape = work / f"{name}-shape"
    shape.mkdir(parents=True, exist_ok=True)
    (shape / "config.json").write_text(json.dumps(SHAPES[name]))
    code, _ = run_module("tether.cli", ["bench", "--model", str(shape), "--write-model", str(model)], env=env)
    if code != 0:
        raise SystemExit(f"could not write the {name} checkpoint (exit {code})")
    return model


def stage_args(stage: str, model: Path, data: dict, runs: Path) -> list[str]:
    common = ["run.progress=false", "run.overwrite=true", f"run.out={runs / stage}"]
    supervised = [f"model.name_or_path={model}", "data.max_length=256", "optim.batch_size=8",
                  "optim.grad_accum_steps=2", "max_steps=3", *common]
    rl = [f"model.name_or_path={model}", f"reward.models=[{runs / 'rm'}]", f"prompts={data['prompts']}",
          "rollout.max_new_tokens=32", "rl.iterations=3", "rl.minibatch_size=8", "rl.grad_accum_steps=2", *common]
    return {
        "sft": [f"data.train={data['sft']}", f"data.eval={data['sft_eval']}", *supervised],
        "rm": [f"data.train={data['hh']}", f"data.eval={data['hh_eval']}", *supervised],
        "dpo": [f"data.train={data['hh']}", f"data.eval={data['hh_eval']}", *supervised],
        "kto": [f"data.train={data['hh']}", f"data.eval={data['hh_eval']}", *supervised],
        "orpo": [f"data.train={data['hh']}", f"data.eval={data['hh_eval']}", *supervised],
        "ppo": [*rl, "rollout.batch_size=8", "critic.init=reward"],
        "grpo": [*rl, "rollout.batch_size=2", "group.size=4"],
    }[stage]


def predicted_mb(stage: str, args: list[str]) -> float:
    """``tether STAGE ARGS --dry-run``'s predicted peak, in MB (2**20 bytes), in a child process."""
    code = ("import json, sys, tether; plan = tether.dry_run(sys.argv[1], None, sys.argv[2:]); "
            "print(json.dumps(plan.peak['total']))")
    out = subprocess.run([sys.executable, "-c", code, stage, *args], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"--dry-run of {stage} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1]) / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, required=True, help="scratch directory (models, data, runs)")
    parser.add_argument("--out", type=Path, default=None, help="write the JSON report here too")
    parser.add_argument("--models", default=",".join(SHAPES))
    parser.add_argument("--stages", default=",".join(STAGES))
    args = parser.parse_args()

    work = args.work.resolve()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    data = write_data(work / "data", rows=64)
    report = {"machine": platform.processor() or platform.machine(), "cpus": os.cpu_count(), "runs": []}
    print("| model | stage | predicted (MiB) | measured peak RSS (MiB) | error |")
    print("| --- | --- | --- | --- | --- |")
    for name in args.models.split(","):
        model = write_checkpoint(work, name, env)
        runs = work / "runs" / name
        for stage in args.stages.split(","):
            argv = stage_args(stage, model, data, runs)
            predicted = predicted_mb(stage, argv)
            log = work / f"{name}-{stage}.log"
            with open(log, "w") as fh:
                code, peak = run_module("tether.cli", [stage, *argv], stdout=fh, stderr=subprocess.STDOUT, env=env)
            if code != 0:
                raise SystemExit(f"{name} {stage} failed (exit {code}); see {log}")
            error = (predicted - peak) / peak
            report["runs"].append({"model": name, "stage": stage, "predicted_mb": round(predicted, 1),
                                   "peak_rss_mb": round(peak, 1), "error": round(error, 4)})
            print(f"| {name} | {stage} | {predicted:.0f} | {peak:.0f} | {error:+.1%} |", flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
