"""Gold, proxy and KL of the same settings over several seeds: the mean, the spread and each
seed's value, from the `compare.json` of one `benchmarks/algorithm_sweep.py` run per seed.

    python benchmarks/seeds_table.py runs/sweep-seed0 runs/sweep-seed1 runs/sweep-seed2

Prints a markdown table, one row per setting (label), and with `--against BASE` each setting's
gold and KL relative to the setting BASE of the same method prefix (``ppo-k1`` against
``ppo-sync`` with ``--against sync``). The statistics are the package's
(:func:`tether.eval.seeds.mean_sd_ci`: sample sd, n − 1); one seed has no sd (—).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from tether.eval.seeds import mean_sd_ci


def load(dirs: list[Path]) -> dict[str, list[dict]]:
    """label -> its measurements, one per seed directory, in the order given."""
    out: dict[str, list[dict]] = {}
    for d in dirs:
        data = json.loads((d / "compare.json").read_text(encoding="utf-8"))
        for label, row in data["methods"].items():
            out.setdefault(label, []).append(row)
    return out


def fmt(values: list[float], sign: bool = True) -> str:
    spec = "{:+.3f}" if sign else "{:.2f}"
    stats = mean_sd_ci(values)
    sd = "—" if stats["sd"] is None else f"{stats['sd']:.3f}"
    return f"{spec.format(stats['mean'])} ± {sd} ({', '.join(spec.format(v) for v in values)})"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dirs", nargs="+", type=Path)
    p.add_argument("--against", default=None, help="The suffix of the baseline label, e.g. sync.")
    args = p.parse_args()
    runs = load(args.dirs)
    header = "| setting | seeds | gold: mean ± sd (each seed) | KL: mean ± sd (each seed) |"
    extra = " gold − base | KL / base |" if args.against else ""
    print(header + extra)
    print("| --- | --- | --- | --- |" + (" --- | --- |" if args.against else ""))
    for label, rows in runs.items():
        gold = [r["gold_score"] for r in rows]
        kl = [r["kl"] for r in rows]
        line = f"| {label} | {len(rows)} | {fmt(gold)} | {fmt(kl, sign=False)} |"
        if args.against:
            base = runs.get(f"{label.split('-')[0]}-{args.against}")
            if base is None or base is rows:
                line += " — | — |"
            else:
                d_gold = mean_sd_ci(gold)["mean"] - mean_sd_ci([r["gold_score"] for r in base])["mean"]
                r_kl = mean_sd_ci(kl)["mean"] / mean_sd_ci([r["kl"] for r in base])["mean"]
                line += f" {d_gold:+.3f} | {r_kl:.2f} |"
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
