"""`tether compare --tool-demo`'s table and chart from its compare.json (plain dicts: see
:func:`tether.demo.tool_compare.summarise`).

The chart has two panels over the methods: gold and answer accuracy on the held-out facts, after
SFT (light) and after RL (dark), each bar the mean over the seeds with its 95% interval, each seed a
dot. The table gives mean [95% interval] of every number.
"""

from __future__ import annotations

from pathlib import Path

from matplotlib.figure import Figure

from tether.plots.curves import _num


def _cell(stats: dict | None, spec: str = "{:+.3f}") -> str:
    """``mean [low, high]`` of :func:`tether.eval.seeds.over_seeds`'s statistics (the mean alone for
    one seed; a dash where there is none)."""
    if not isinstance(stats, dict) or _num(stats.get("mean")) is None:
        return "—"
    if stats.get("ci95") is None:
        return spec.format(stats["mean"])
    low, high = stats["ci95"]
    return f"{spec.format(stats['mean'])} [{spec.format(low)}, {spec.format(high)}]"


ROWS = (("gold after SFT", "sft_gold", "{:+.3f}"), ("gold after RL", "rl_gold", "{:+.3f}"),
        ("accuracy after SFT", "sft_accuracy", "{:.3f}"), ("accuracy after RL", "rl_accuracy", "{:.3f}"),
        ("tool calls / episode (SFT, held out)", "sft_tool_call_rate", "{:.3f}"),
        ("tool calls / episode (RL, held out)", "rl_tool_call_rate", "{:.3f}"),
        ("tool-error rate (RL, held out)", "rl_tool_error_rate", "{:.3f}"),
        ("tool calls / episode (last RL iteration)", "train_tool_call_rate", "{:.3f}"),
        ("tool-error rate (last RL iteration)", "train_tool_error_rate", "{:.3f}"),
        ("gold after RL, minus no tool's", "rl_gold_minus_notool", "{:+.3f}"))


def tool_compare_table(data: dict) -> str:
    """The summary as a markdown table: a column per method, mean [95% interval] over the seeds."""
    methods, summary = data["methods"], data["summary"]
    seeds = len(data.get("seeds", []))
    lines = [f"| over {seeds} seed(s): mean [95% interval] | " + " | ".join(methods) + " |",
             "| --- |" + " --- |" * len(methods)]
    for label, key, spec in ROWS:
        if any(key in summary[m] for m in methods):
            lines.append(f"| {label} | " + " | ".join(_cell(summary[m].get(key), spec) for m in methods) + " |")
    return "\n".join(lines)


def tool_compare_plot(data: dict, out_png: str | Path) -> Path:
    """Gold and accuracy after SFT and after RL per method, over the seeds; returns ``out_png``."""
    methods, summary = data["methods"], data["summary"]
    fig = Figure(figsize=(11, 4.5), layout="constrained")
    for ax, key, title in zip(fig.subplots(1, 2), ("gold", "accuracy"),
                              ("gold score on the held-out facts", "answer accuracy on the held-out facts")):
        for offset, stage, alpha in ((-0.2, "sft", 0.45), (0.2, "rl", 1.0)):
            for i, method in enumerate(methods):
                stats = summary[method].get(f"{stage}_{key}", {})
                mean = _num(stats.get("mean"))
                if mean is None:
                    continue
                color = "#1f77b4" if method != "notool" else "#7f7f7f"
                ci = stats.get("ci95")
                err = None if ci is None else [[mean - ci[0]], [ci[1] - mean]]
                ax.bar(i + offset, mean, width=0.38, color=color, alpha=alpha, yerr=err, capsize=3,
                       label=f"after {stage.upper()}" if i == 0 else None)
                values = [v for v in stats.get("values", []) if _num(v) is not None]
                ax.plot([i + offset] * len(values), values, "k.", ms=4)
        ax.set_xticks(range(len(methods)), [m if m != "notool" else "no tool (GRPO)" for m in methods])
        ax.axhline(0, color="black", lw=0.5)
        ax.set_title(title)
        ax.legend(fontsize=8)
    fig.suptitle(f"tool demo over {len(data.get('seeds', []))} seed(s): bars = mean, whiskers = 95% interval, "
                 "dots = seeds", fontsize=10)
    fig.savefig(out_png, dpi=110)
    return Path(out_png)
