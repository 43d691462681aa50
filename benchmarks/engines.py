"""Generated tokens per second of the generation engines (vllm, lean, hf) on the bench's random-init
Llama, at several batch sizes and response lengths; vLLM's start-up time. Prints a markdown table
and writes the JSON. Run it where vLLM is installed (.venv-vllm on a CPU: `make install-vllm`):

    .venv-vllm/bin/python benchmarks/engines.py --size small --out benchmarks/results/vllm-rollouts/engines.json

Every response is forced to its full length (min_new_tokens = max_new_tokens), temperature 0.7,
vLLM without per-request seeds (its CPU build fails on seeded requests in large batches),
no top-k/top-p; one untimed warm-up call per engine and shape; the median of ``--repeats`` calls.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch


def engines(names: list[str], size: str, threads: int):
    """name -> a generation engine over the same policy (the lean loop with the CPU speedups tether
    applies in PPO; HF generate; vLLM on the policy saved to a temporary directory)."""
    from tether.bench.runner import bench_overrides
    from tether.bench.setup import SIZES, build_models, word_tokenizer
    from tether.config import RLConfig, load_config
    from tether.engines import engine_settings, prepare_models
    from tether.rollout import HFGenerationEngine, LeanGenerationEngine

    torch.set_num_threads(threads)
    dims = SIZES[size]
    tok = word_tokenizer(dims.vocab)
    policy = build_models(dims, tok, reference=False, critic=False)["policy"]
    cfg = load_config(RLConfig, None, bench_overrides(16, 32, 1, 1, "fp32"))
    out, started = {}, {}
    if "vllm" in names:
        from tether.rollout.vllm_engine import VLLMGenerationEngine, VLLMOptions

        path = Path(tempfile.mkdtemp(prefix="tether-engines-")) / "policy"
        policy.save_pretrained(path)
        tok.save_pretrained(path)
        t0 = time.perf_counter()
        out["vllm"] = VLLMGenerationEngine(path, tok, VLLMOptions(cpu_kvcache_gb=2, max_model_len=256, seed_requests=False))
        started["vllm"] = time.perf_counter() - t0
    prepared = prepare_models([policy], engine_settings(cfg.run, cfg.model, cfg.cpu))
    if "lean" in names:
        out["lean"] = LeanGenerationEngine(policy, tok, decode_context=prepared.decode_context)
    if "hf" in names:
        out["hf"] = HFGenerationEngine(policy, tok, decode_context=prepared.decode_context)
    return out, tok, started


def main() -> None:
    from tether.bench.setup import prompt_set
    from tether.rollout import SamplingParams

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="small")
    parser.add_argument("--engines", default="vllm,lean,hf")
    parser.add_argument("--batches", default="16,64,256")
    parser.add_argument("--lengths", default="32,128")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    names = args.engines.split(",")
    built, tok, started = engines(names, args.size, args.threads)
    rows = []
    for batch in map(int, args.batches.split(",")):
        prompts = prompt_set(tok, batch, seed=batch)
        for length in map(int, args.lengths.split(",")):
            params = SamplingParams(max_new_tokens=length, min_new_tokens=length, temperature=0.7)
            row = {"batch": batch, "new_tokens": length}
            for name in names:
                engine = built[name]
                engine.generate(prompts.ids, prompts.texts, params, seed=0)  # warm-up
                rates = []
                for r in range(args.repeats):
                    t0 = time.perf_counter()
                    ro = engine.generate(prompts.ids, prompts.texts, params, seed=r + 1)
                    rates.append(float(ro.response_mask.sum()) / (time.perf_counter() - t0))
                row[name] = statistics.median(rates)
                print(f"[engines] {name} {batch} x {length}: {row[name]:.0f} tokens/s", file=sys.stderr, flush=True)
            rows.append(row)
    print(f"| batch x new tokens | {' | '.join(names)} (generated tokens/s) |")
    print(f"| --- | {' | '.join('---' for _ in names)} |")
    for row in rows:
        print(f"| {row['batch']} x {row['new_tokens']} | {' | '.join(f'{row[n]:,.0f}' for n in names)} |")
    if started:
        print(f"\nvLLM engine start-up: {started['vllm']:.1f} s")
    report = {"size": args.size, "threads": args.threads, "rows": rows, "startup_s": started}
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(report, indent=2))
    for engine in built.values():
        close = getattr(engine, "close", None)
        if close:
            close()


if __name__ == "__main__":
    main()
