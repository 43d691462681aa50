"""`tether compare --pareto`'s chart and table from pareto.json (:mod:`tether.demo.pareto`).

One panel per objective of the front: gold (up is better) against the reward model's score and
against the '!' rate. Each setting's mean over the seeds is a point with ± one sd bars in both
numbers and each seed a faint dot; the settings on the front (no other setting better on both
numbers) are joined; SFT is a black square. The table gives every number's mean and 95% interval
and where the constraint multipliers settled in training.
"""

from __future__ import annotations

from pathlib import Path

from matplotlib.figure import Figure

from tether.plots.compare_seeds import _mean, _sd, seed_dots

TITLES = {"proxy_score": "reward model's score (proxy)", "spurious_rate": "'!' rate (responses with '!')"}


def pareto_plot(data: dict, out_png: str | Path) -> Path:
    """Gold against each objective, the front joined; returns ``out_png``."""
    objectives = [key for key, _ in data.get("objectives", [])]
    fig = Figure(figsize=(6.5 * max(len(objectives), 1), 5), layout="constrained")
    axes = fig.subplots(1, max(len(objectives), 1), squeeze=False)[0]
    palette = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf"]
    for ax, key in zip(axes, objectives):
        sft_x, sft_y = _mean(data.get("sft", {}).get(key)), _mean(data.get("sft", {}).get("gold_score"))
        if sft_x is not None and sft_y is not None:
            ax.plot([sft_x], [sft_y], marker="s", color="black", ls="", ms=8, label="SFT")
        front = data.get("front", {}).get(key, [])
        for i, (label, report) in enumerate(data.get("methods", {}).items()):
            x, y, color = report.get(key, {}), report.get("gold_score", {}), palette[i % len(palette)]
            seed_dots(ax, x, y, color)
            if _mean(x) is not None and _mean(y) is not None:
                ax.errorbar([_mean(x)], [_mean(y)], xerr=[_sd(x)], yerr=[_sd(y)], marker="*", ms=13, ls="",
                            color=color, capsize=3, label=label + (" (front)" if label in front else ""))
        line = sorted((_mean(data["methods"][lb][key]), _mean(data["methods"][lb]["gold_score"])) for lb in front)
        line = [(a, b) for a, b in line if a is not None and b is not None]
        if len(line) > 1:
            ax.plot([a for a, _ in line], [b for _, b in line], ls="--", color="#555555", lw=1)
        ax.set_xlabel(TITLES.get(key, key))
        ax.set_ylabel("gold score (judge)")
        ax.set_title(f"gold vs {TITLES.get(key, key)}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    seeds = ", ".join(str(s) for s in data.get("seeds", []))
    fig.suptitle(f"{data.get('method', '')} at each setting: mean ± sd over seeds {seeds}; front joined")
    fig.savefig(out_png, dpi=110)
    return Path(out_png)


def _cell(stat, fmt: str = "{:+.3f}") -> str:
    mean = _mean(stat)
    if mean is None:
        return "—"
    ci = stat.get("ci95")
    return fmt.format(mean) + (f" [{fmt.format(ci[0])}, {fmt.format(ci[1])}]" if ci else "")


def pareto_table(data: dict) -> str:
    """A markdown table: each setting's numbers (mean [95% interval] over the seeds), and SFT's."""
    lines = ["| setting | gold | gold − SFT | '!' rate | proxy | KL to SFT | accuracy | multipliers (last iterations) | "
             "on the front |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    sft = data.get("sft", {})
    lines.append(f"| SFT | {_cell(sft.get('gold_score'))} | — | {_cell(sft.get('spurious_rate'), '{:.3f}')} | "
                 f"{_cell(sft.get('proxy_score'))} | 0 | {_cell(sft.get('accuracy'), '{:.3f}')} | — | — |")
    fronts = data.get("front", {})
    for label, r in data.get("methods", {}).items():
        multipliers = ", ".join(f"{k.split('/')[1]} {v:.2f}" for k, v in r.get("training", {}).items()
                                if k.endswith("/multiplier")) or "—"
        on = ", ".join(TITLES.get(k, k).split(" (")[0] for k, labels in fronts.items() if label in labels) or "no"
        lines.append(f"| {label} | {_cell(r.get('gold_score'))} | {_cell(r.get('gold_gain'))} | "
                     f"{_cell(r.get('spurious_rate'), '{:.3f}')} | {_cell(r.get('proxy_score'))} | "
                     f"{_cell(r.get('kl'), '{:.2f}')} | {_cell(r.get('accuracy'), '{:.3f}')} | {multipliers} | {on} |")
    if data.get("matched_kl"):
        kl = data["matched_kl"]
        lines += ["", f"At matched KL ({_cell(kl, '{:.2f}')}: the smallest KL every run of a seed reached, each run's "
                  "held-out gold interpolated along its evaluations from SFT's):", "",
                  "| setting | gold at matched KL |", "| --- | --- |"]
        lines += [f"| {label} | {_cell(r.get('gold_at_matched_kl'))} |" for label, r in data.get("methods", {}).items()
                  if r.get("gold_at_matched_kl")]
    return "\n".join(lines)
