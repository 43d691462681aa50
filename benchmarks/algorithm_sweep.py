"""A small sweep per alignment method on the demo task: the numbers behind the presets in
configs/demo/ and the table in docs/algorithms.md.

Each setting is `LABEL:METHOD[:KEY=VALUE,...]` and runs the method's demo preset with those
overrides from a `tether demo` directory's SFT model and reward model (`--from`), as `tether
compare` runs it (a child process each, `--parallel` at a time). Every final policy is then
scored together on the same 512 held-out samples, beside best-of-N of SFT, and the results are
written as DIR/compare.json, DIR/compare.md and DIR/compare.png.

    python benchmarks/algorithm_sweep.py --from runs/demo --out runs/sweep \
        grpo-b0.05:grpo:kl.coef=0.05 grpo-b0.1:grpo:kl.coef=0.1 dpo-b0.3:dpo:dpo.beta=0.3
"""

from __future__ import annotations

import argparse
import concurrent.futures as futures
import sys
from pathlib import Path

from tether.demo.compare import method_args, methods, run_method
from tether.eval.compare import measure
from tether.plots.compare import compare_plot, compare_table
from tether.runs import write_json


def parse(setting: str) -> tuple[str, str, list[str]]:
    label, method, *rest = setting.split(":")
    if method not in methods():
        sys.exit(f"{setting!r}: the method must be one of {', '.join(methods())}")
    overrides = [kv for kv in ",".join(rest).split(",") if kv]
    return label, method, overrides


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--from", dest="demo", required=True, help="A `tether demo` directory (task/, sft/, rm/).")
    p.add_argument("--out", required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--parallel", type=int, default=2, help="Runs at once (each uses run.threads=1).")
    p.add_argument("--eval-repeats", type=int, default=4)
    p.add_argument("settings", nargs="+", metavar="LABEL:METHOD[:KEY=VALUE,...]")
    args = p.parse_args()
    demo, out = Path(args.demo), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    settings = [parse(s) for s in args.settings]

    def one(setting):
        label, method, overrides = setting
        argv = method_args(method, demo, out, args.seed, overrides)
        argv = [a.replace(f"run.out={out / method}", f"run.out={out / label}") for a in argv]
        print(f"start {label}: tether {' '.join(argv[:1] + overrides)}", flush=True)
        result = run_method(argv, out / f"{label}.log")
        print(f"done  {label}: exit {result['exit_code']}, {result['time_s']:.0f} s", flush=True)
        return label, {**result, "method": method, "overrides": overrides}

    with futures.ThreadPoolExecutor(args.parallel) as pool:
        runs = dict(pool.map(one, settings))
    runs = {label: run for label, run in runs.items() if run["exit_code"] == 0}
    data = measure(out, demo, runs, args.seed, args.eval_repeats)
    write_json(out / "compare.json", data)
    compare_plot(data, out / "compare.png")
    (out / "compare.md").write_text(compare_table(data) + "\n", encoding="utf-8")
    print(compare_table(data))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
