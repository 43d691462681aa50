"""`tether compare`'s chart and table from compare.json's data (plain dicts; no training code).

Two panels share the x axis, KL to the SFT policy (nats): gold score (the judge) and proxy score
(the reward model). Each method is one line through its held-out evaluations in training order,
its final policy a filled marker; best-of-N of the SFT policy is the dashed curve at its analytic
KL; SFT itself sits at KL 0.
"""

from __future__ import annotations

from pathlib import Path

from matplotlib.figure import Figure

from tether.plots.curves import _legend, _num

PALETTE = ("#1f77b4", "#2ca02c", "#9467bd", "#8c564b", "#ff7f0e", "#17becf", "#bcbd22", "#e377c2")
DPO_COLOR = "#d62728"


PREFERENCE_COLORS = (DPO_COLOR, "#7f7f7f", "#000000", "#b8860b")


def method_name(method: str) -> str:
    """A method's name in prose: the registered algorithm's title, a stage's title (DPO, SimPO), else
    the method upper-cased."""
    from tether.registry.algorithms import ALGORITHMS
    from tether.registry.stages import STAGES

    if method in ALGORITHMS:
        return ALGORITHMS[method].title
    spec = STAGES.get(method)
    return spec.title if spec is not None and spec.title else method.upper()


def method_color(method: str) -> str:
    """One colour per method, stable across charts: registry order for the RL algorithms, stage-table
    order for the preference methods."""
    from tether.registry.algorithms import ALGORITHMS
    from tether.registry.stages import compared_preference_stages

    names, preference = list(ALGORITHMS), compared_preference_stages()
    if method in names:
        return PALETTE[names.index(method) % len(PALETTE)]
    if method in preference:
        return PREFERENCE_COLORS[preference.index(method) % len(PREFERENCE_COLORS)]
    return DPO_COLOR


def compare_plot(data: dict, out_png: str | Path) -> Path:
    """Gold vs KL and proxy vs KL for every method, best-of-N and SFT; returns ``out_png``."""
    fig = Figure(figsize=(12, 5), layout="constrained")
    axes = fig.subplots(1, 2, sharex=True)
    for ax, key, title in ((axes[0], "gold_score", "gold score (judge) vs KL"),
                           (axes[1], "proxy_score", "proxy score (reward model) vs KL")):
        sft = data.get("sft", {})
        if _num(sft.get(key)) is not None:
            ax.plot([0.0], [sft[key]], marker="s", color="black", ls="", ms=8, label="SFT")
        bon = [r for r in data.get("best_of_n", []) if _num(r.get(key)) is not None]
        if bon:
            ax.plot([r["kl_analytic"] for r in bon], [r[key] for r in bon], marker="^", ls="--", color="#7f7f7f",
                    label="best-of-N of SFT (analytic KL)")
            last = bon[-1]
            ax.annotate(f"N={last['n']}", (last["kl_analytic"], last[key]), textcoords="offset points",
                        xytext=(4, 4), fontsize=8, color="#555555")
        for method, report in data.get("methods", {}).items():
            points = [p for p in report.get("trajectory", []) if _num(p.get("kl")) is not None
                      and _num(p.get(key)) is not None]
            color = method_color(method)
            if points:
                ax.plot([p["kl"] for p in points], [p[key] for p in points], marker="o", ms=3.5, lw=1.2,
                        alpha=0.8, color=color, label=method_name(method))
            if _num(report.get("kl")) is not None and _num(report.get(key)) is not None:
                ax.plot([report["kl"]], [report[key]], marker="*", ms=14, color=color, ls="",
                        markeredgecolor="black", markeredgewidth=0.6)
        ax.set_xlabel("KL to the SFT policy (nats per response)")
        ax.set_ylabel(key.replace("_", " "))
        ax.set_title(title)
        ax.grid(alpha=0.3)
    _legend(axes[0])
    fig.suptitle("Alignment methods from the same SFT and reward model (stars: final policies)")
    out_png = Path(out_png)
    fig.savefig(out_png, dpi=110)
    return out_png


def compare_rows(data: dict) -> tuple[list[str], list[list]]:
    """The table's header and rows as values (the HTML report's table)."""
    header = ["method", "gold", "proxy", "KL", "win rate vs SFT (gold)", "accuracy", "'!' rate", "wall time (s)",
              "peak RSS (MB)"]
    sft = data.get("sft", {})
    rows = [["SFT", sft.get("gold_score"), sft.get("proxy_score"), 0.0, None, sft.get("accuracy"),
             sft.get("spurious_rate"), None, None]]
    for method, r in data.get("methods", {}).items():
        rows.append([method_name(method), r.get("gold_score"), r.get("proxy_score"), r.get("kl"),
                     r.get("win_rate_gold"), r.get("accuracy"), r.get("spurious_rate"), r.get("time_s"),
                     r.get("peak_rss_mb")])
    for b in data.get("best_of_n", []):
        rows.append([f"best-of-{b['n']} of SFT", b.get("gold_score"), b.get("proxy_score"), b.get("kl_analytic"),
                     None, None, None, None, None])
    return header, rows


def compare_table(data: dict) -> str:
    """The per-method table (markdown): gold, proxy, KL, win rates over SFT, cost."""

    def f(x, fmt="{:+.3f}"):
        return "—" if _num(x) is None else fmt.format(x)

    sft = data.get("sft", {})
    rows = ["| method | gold | proxy | KL | win rate vs SFT (gold / proxy) | accuracy | `!` rate | wall time | peak RSS | "
            "generated tokens |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
            f"| SFT | {f(sft.get('gold_score'))} | {f(sft.get('proxy_score'))} | 0 | — | "
            f"{f(sft.get('accuracy'), '{:.3f}')} | {f(sft.get('spurious_rate'), '{:.3f}')} | — | — | — |"]
    for method, r in data.get("methods", {}).items():
        rows.append(
            f"| {method_name(method)} | {f(r.get('gold_score'))} | {f(r.get('proxy_score'))} | "
            f"{f(r.get('kl'), '{:.2f}')} | {f(r.get('win_rate_gold'), '{:.3f}')} / {f(r.get('win_rate_proxy'), '{:.3f}')} | "
            f"{f(r.get('accuracy'), '{:.3f}')} | {f(r.get('spurious_rate'), '{:.3f}')} | "
            f"{f(r.get('time_s'), '{:.0f} s')} | {f(r.get('peak_rss_mb'), '{:.0f} MB')} | "
            f"{r.get('generated_tokens', '—'):,} |")
    for b in data.get("best_of_n", []):
        rows.append(f"| best-of-{b['n']} of SFT | {f(b.get('gold_score'))} | {f(b.get('proxy_score'))} | "
                    f"{f(b.get('kl_analytic'), '{:.2f}')} | — | — | — | — | — | — |")
    lines = ["\n".join(rows)]
    rm = data.get("rm", {})
    dpo = data.get("methods", {}).get("dpo")
    if dpo is not None:
        lines.append(f"\nHeld-out pair accuracy: explicit reward model {f(rm.get('eval_accuracy'), '{:.3f}')} "
                     f"(margin {f(rm.get('eval_margin'))}); DPO's implicit reward "
                     f"{f(dpo.get('implicit_reward_accuracy'), '{:.3f}')} (margin {f(dpo.get('implicit_reward_margin'))}).")
    return "\n".join(lines)
