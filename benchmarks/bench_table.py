"""Run `tether bench` (and optionally TRL 1.12) over sizes x variants and print the table.

Every point is one fresh process; its JSON is kept in --out. The repeats are interleaved
(repeat 1 of every point, then repeat 2, ...) so that a slow spell of the machine — these
VMs drift by 10-30 % within minutes — lands on every point alike. With --trl-python, the
TRL 1.12 baseline (benchmarks/trl_baseline.py, run by that interpreter) is measured in the
same rotation, and the table's "x TRL" column compares like with like.

Variants:

    fp32            the defaults
    bf16            run.precision=bf16
    fp32+compile    rl.compile=true
    bf16+compile    both
    fp32+shared_trunk, bf16+shared_trunk
                    critic.shared_trunk=true: a different model (value head on the actor)
    ablation:NAME   one default switched off (--ablation-sizes, default small; --ablation-repeat
                    runs each)

    python benchmarks/bench_table.py --out runs/bench --repeat 3 --ablations \\
        --trl-python /work/trl-venv/bin/python
    python benchmarks/bench_table.py --out runs/bench --table-only   # re-print from the JSON files
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
# TRL 1.12's seconds per iteration on this configuration from another machine of this class (fp32,
# 2 threads), used when no TRL run is in the rotation, and tether's target ratios against TRL; the
# targets are ratio x TRL's time measured alongside, when there is one.
TRL_FP32_ISSUE = {"tiny": 1.34, "small": 4.26, "medium": 8.26}
RATIO_FP32 = {"tiny": 0.5, "small": 0.65, "medium": 0.75}
RATIO_BF16 = {"small": 0.4, "medium": 0.4}

VARIANTS = {
    "fp32": ("fp32", []),
    "bf16": ("bf16", []),
    "fp32+compile": ("fp32", ["rl.compile=true"]),
    "bf16+compile": ("bf16", ["rl.compile=true"]),
    # A different model (value head on the actor's trunk): reported beside, not instead of, the separate critic's.
    "fp32+shared_trunk": ("fp32", ["critic.shared_trunk=true"]),
    "bf16+shared_trunk": ("bf16", ["critic.shared_trunk=true"]),
}
DEFAULT_VARIANTS = ["fp32", "bf16"]
ABLATIONS = {
    "full_last_layer": ("fp32", ["rl.trim_last_layer=false"]),
    "full_last_layer_bf16": ("bf16", ["rl.trim_last_layer=false"]),
    "sequential_roles": ("fp32", ["cpu.parallel_roles=false"]),
    "sequential_roles_bf16": ("bf16", ["cpu.parallel_roles=false"]),
    "hf_generate": ("fp32", ["rollout.engine=hf"]),
    "no_captured_logprobs": ("fp32", ["rollout.capture_logprobs=false"]),
    "unfused_adamw": ("fp32", ["rl.fused_optimizer=false"]),
    "compile": ("fp32", ["rl.compile=true"]),
    "aten_linears": ("fp32", ["cpu.linear_backend=aten"]),
    # cpu.linear_backend=auto picks aten on Intel CPUs: there this is the switched-off variant.
    "onednn_linears": ("fp32", ["cpu.linear_backend=onednn"]),
    "no_retain_memory": ("fp32", ["cpu.retain_memory=false"]),
}


def run_json(cmd: list[str], path: Path) -> dict:
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


def tether_point(out: Path, name: str, size: str, precision: str, overrides: list[str], k: int, threads: int):
    cmd = ["tether", "bench", "--size", size, "--precision", precision, "--threads", str(threads),
           "--seed", str(k), "--profile", *overrides]
    return run_json(cmd, out / f"{size}_{name}_r{k}.json")


def trl_point(out: Path, python: str, size: str, k: int, threads: int):
    cmd = [python, str(HERE / "trl_baseline.py"), "--size", size, "--threads", str(threads), "--seed", str(k)]
    return run_json(cmd, out / f"{size}_trl_r{k}.json")


def fmt(x, spec=".2f"):
    return "–" if x is None else format(x, spec)


def load_points(out: Path) -> dict[tuple[str, str], list[dict]]:
    points: dict[tuple[str, str], list[dict]] = {}
    for path in sorted(out.glob("*_r*.json")):
        size, rest = path.stem.split("_", 1)
        name = rest.rsplit("_r", 1)[0]
        points.setdefault((size, name), []).append(json.loads(path.read_text()))
    return points


def _med(reports: list[dict], *keys):
    values = []
    for r in reports:
        v = r
        for k in keys:
            v = v.get(k) if isinstance(v, dict) else None
        if v is not None:
            values.append(v)
    return statistics.median(values) if values else None


def machines(points: dict[tuple[str, str], list[dict]], out: Path) -> list[str]:
    """The CPUs the tether reports ran on, one line each. Reports without a ``cpu`` field (older
    benches did not record one) fall back on ``machine.json`` in ``out`` (a ``cpu_description()``
    written beside them), if any."""
    from tether.engines.cpu.describe import describe

    fallback = out / "machine.json"
    unnamed = (describe(json.loads(fallback.read_text())) + " (machine.json)" if fallback.exists()
               else "CPU not recorded (the reports have no cpu field)")
    seen = {describe(r["cpu"]) if r.get("cpu", {}).get("model") else unnamed
            for (_, name), reports in points.items() if name != "trl" for r in reports}
    return sorted(seen)


def table(out: Path) -> str:
    points = load_points(out)
    sizes = ["tiny", "small", "medium"]
    cpus = machines(points, out)
    header = [f"Machine: {cpus[0]}" if len(cpus) == 1 else
              "Machines (the points ran on different CPUs and do not compare): " + "; ".join(cpus), ""]
    rows = header + ["| size | variant | s/iteration (median of runs) | runs | TRL 1.12 fp32, same rotation | × TRL | "
            "target (× TRL) | generate | update | mfu_update | update matmuls GFLOP/s (share) | peak |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    keys = sorted((k for k in points if k[1] != "trl"), key=lambda k: (sizes.index(k[0]), k[1]))
    for size, name in keys:
        reports = points[(size, name)]
        medians = [r["iteration_s"]["median"] for r in reports]
        med = statistics.median(medians)
        trl_reports = points.get((size, "trl"))
        trl = statistics.median(r["iteration_s"]["median"] for r in trl_reports) if trl_reports else None
        ratio = (RATIO_BF16 if name.startswith("bf16") else RATIO_FP32).get(size)
        if name.startswith("ablation"):
            ratio = None
        trl_ref = trl if trl is not None else TRL_FP32_ISSUE.get(size)
        rows.append(
            f"| {size} | {name} | **{med:.2f}** | {', '.join(f'{m:.2f}' for m in medians)} | "
            f"{fmt(trl)} | {fmt(med / trl_ref if trl_ref else None)} | "
            f"{fmt(ratio * trl_ref if ratio and trl_ref else None)} ({fmt(ratio)}) | "
            f"{fmt(_med(reports, 'phases_s', 'generate'))} | {fmt(_med(reports, 'phases_s', 'update'))} | "
            f"{fmt(_med(reports, 'mfu_update'))} | {fmt(_med(reports, 'profile', 'matmul_gflops'), '.0f')} "
            f"({fmt(_med(reports, 'profile', 'matmul_share'))}) | {fmt(_med(reports, 'matmul_peak_gflops'), '.0f')} |")
    return "\n".join(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--sizes", nargs="+", default=["tiny", "small", "medium"])
    ap.add_argument("--variants", nargs="+", default=DEFAULT_VARIANTS, choices=list(VARIANTS))
    ap.add_argument("--trl-python", help="Python of a venv with trl==1.12.0: measure TRL in the same rotation.")
    ap.add_argument("--ablations", action="store_true", help="Also the ablations (at --ablation-sizes).")
    ap.add_argument("--ablation-repeat", type=int, default=1)
    ap.add_argument("--ablation-names", nargs="+", choices=list(ABLATIONS), help="Only these ablations.")
    ap.add_argument("--ablation-sizes", nargs="+", default=["small"], help="Sizes the ablations run at.")
    ap.add_argument("--table-only", action="store_true")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if not args.table_only:
        for k in range(1, args.repeat + 1):
            for size in args.sizes:
                for name in args.variants:
                    precision, overrides = VARIANTS[name]
                    tether_point(out, name, size, precision, overrides, k, args.threads)
                if args.trl_python:
                    trl_point(out, args.trl_python, size, k, args.threads)
            if args.ablations and k <= args.ablation_repeat:
                for name, (precision, overrides) in ABLATIONS.items():
                    if args.ablation_names and name not in args.ablation_names:
                        continue
                    for size in args.ablation_sizes:
                        tether_point(out, f"ablation:{name}", size, precision, overrides, k, args.threads)
    print(table(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
