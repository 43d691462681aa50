"""Run `tether bench` over sizes x variants (each a median of --repeat runs) and print the table.

Every point is one `tether bench` subprocess (fresh process: no warm cache from another point
except inductor's on-disk compile cache), its JSON kept in --out. Variants:

    fp32            the defaults (eager)
    fp32+compile    ppo.compile=true ppo.compile_mode=max-autotune (as docs/performance.md's table)
    bf16            ppo.autocast=bf16
    bf16+compile    both
    ablation:NAME   fp32 with one default optimisation switched off (small only)

    python benchmarks/bench_table.py --out /tmp/bench --repeat 3
    python benchmarks/bench_table.py --out /tmp/bench --table-only   # re-print from the JSON files
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

# Issue 6's measurements of TRL 1.12 (fp32, 2 threads) and its targets, seconds per iteration.
TRL_FP32 = {"tiny": 1.34, "small": 4.26, "medium": 8.26}
TARGET_FP32 = {"tiny": 0.67, "small": 2.8, "medium": 6.2}
TARGET_BF16 = {"small": 1.7, "medium": 3.3}

VARIANTS = {
    "fp32": ("fp32", []),
    "fp32+compile": ("fp32", ["ppo.compile=true", "ppo.compile_mode=max-autotune"]),
    "bf16": ("bf16", []),
    "bf16+compile": ("bf16", ["ppo.compile=true", "ppo.compile_mode=max-autotune"]),
}
ABLATIONS = {
    "hf_generate": ["rollout.engine=hf"],
    "no_captured_logprobs": ["rollout.capture_logprobs=false"],
    "unfused_adamw": ["ppo.fused_optimizer=false"],
}


def run_point(out: Path, name: str, size: str, precision: str, overrides: list[str], repeat: int,
              threads: int) -> dict:
    path = out / f"{size}_{name}.json"
    cmd = ["tether", "bench", "--size", size, "--precision", precision, "--repeat", str(repeat),
           "--threads", str(threads), "--profile", *overrides]
    print(f"[bench_table] {' '.join(cmd)}", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        print(proc.stderr[-3000:], file=sys.stderr)
        raise SystemExit(f"bench failed: {' '.join(cmd)}")
    report = json.loads(proc.stdout)
    report["wall_s"] = time.perf_counter() - t0
    path.write_text(json.dumps(report, indent=2))
    return report


def fmt(x, spec=".2f"):
    return "–" if x is None else format(x, spec)


def table(out: Path) -> str:
    rows = ["| size | variant | s/iteration (median of runs) | runs' medians | TRL 1.12 fp32 | target | "
            "× TRL | generate | update | mfu_update | matmul GFLOP/s in update (share) | peak | first iteration |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    sizes = list(TRL_FP32)
    for path in sorted(out.glob("*.json"), key=lambda p: (sizes.index(p.stem.split("_")[0]), p.stem)):
        r = json.loads(path.read_text())
        size, name = path.stem.split("_", 1)
        target = (TARGET_BF16 if name.startswith("bf16") else TARGET_FP32).get(size)
        med = r["iteration_s"]["median"]
        prof = r.get("profile", {})
        runs = ", ".join(f"{x['iteration_s']['median']:.2f}" for x in r.get("runs", []))
        rows.append(
            f"| {size} | {name} | **{med:.2f}** | {runs} | {TRL_FP32.get(size, '–')} | {fmt(target)} | "
            f"{med / TRL_FP32[size]:.2f} | {r['phases_s']['generate']:.2f} | {r['phases_s']['update']:.2f} | "
            f"{fmt(r.get('mfu_update'))} | {fmt(prof.get('matmul_gflops'), '.0f')} ({fmt(prof.get('matmul_share'))}) | "
            f"{fmt(r.get('matmul_peak_gflops'), '.0f')} | {r['first_iteration_s']:.1f} |")
    return "\n".join(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--sizes", nargs="+", default=["tiny", "small", "medium"])
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS))
    ap.add_argument("--ablations", action="store_true", help="Also the ablations at size small.")
    ap.add_argument("--table-only", action="store_true")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if not args.table_only:
        for size in args.sizes:
            for name in args.variants:
                precision, overrides = VARIANTS[name]
                run_point(out, name, size, precision, overrides, args.repeat, args.threads)
        if args.ablations:
            for name, overrides in ABLATIONS.items():
                run_point(out, f"ablation:{name}", "small", "fp32", overrides, 1, args.threads)
    print(table(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
