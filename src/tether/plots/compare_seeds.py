"""`tether compare --seeds N`'s chart and table from the aggregate compare.json (plain dicts: see
:func:`tether.eval.seeds.aggregate_compare`).

The chart has the panels of :func:`tether.plots.compare.compare_plot` (gold and proxy against KL to
SFT): each method's mean final policy is a star with error bars of ± one sample sd in both the
score and the KL, each seed's final policy a faint dot of the same colour; best-of-N of SFT is the
curve of its mean scores at the analytic KL; SFT sits at KL 0. The table gives mean ± sd and the
95% interval of gold, proxy and KL.
"""

from __future__ import annotations

from pathlib import Path

from matplotlib.figure import Figure

from tether.plots.compare import method_color, method_name
from tether.plots.curves import _num

SEED_ALPHA = 0.3  # each seed's final point: visible, behind the mean


def _mean(stat) -> float | None:
    return _num(stat.get("mean")) if isinstance(stat, dict) else None


def _sd(stat) -> float:
    """A statistic's sd, 0 where there is none (one seed): no error bar."""
    return (_num(stat.get("sd")) or 0.0) if isinstance(stat, dict) else 0.0


def seed_dots(ax, x: dict, y: dict, color: str) -> None:
    """Each seed's point of two over-seeds statistics (their ``values``), faint, where both are numbers."""
    dots = [(_num(a), _num(b)) for a, b in zip(x.get("values", []), y.get("values", []))]
    dots = [(a, b) for a, b in dots if a is not None and b is not None]
    if dots:
        ax.plot([a for a, _ in dots], [b for _, b in dots], marker="o", ms=5, ls="", color=color, alpha=SEED_ALPHA)


def _seeds_text(data: dict) -> str:
    return ", ".join(str(s) for s in data.get("seeds", []))


def compare_seeds_plot(data: dict, out_png: str | Path) -> Path:
    """Gold vs KL and proxy vs KL over seeds: means with ± sd bars, each seed faintly; returns ``out_png``."""
    fig = Figure(figsize=(13.5, 5), layout="constrained")
    axes = fig.subplots(1, 2, sharex=True)
    for ax, key, title in ((axes[0], "gold_score", "gold score (judge) vs KL"),
                           (axes[1], "proxy_score", "proxy score (reward model) vs KL")):
        sft = data.get("sft", {}).get(key)
        if _mean(sft) is not None:
            ax.errorbar([0.0], [_mean(sft)], yerr=[_sd(sft)], marker="s", color="black", ls="", ms=8, capsize=3,
                        label="SFT")
        bon = [r for r in data.get("best_of_n", []) if _mean(r.get(key)) is not None and _num(r.get("kl_analytic")) is not None]
        if bon:
            ax.errorbar([r["kl_analytic"] for r in bon], [_mean(r[key]) for r in bon], yerr=[_sd(r[key]) for r in bon],
                        marker="^", ls="--", color="#7f7f7f", capsize=3, label="best-of-N of SFT, mean (analytic KL)")
            ax.annotate(f"N={bon[-1]['n']}", (bon[-1]["kl_analytic"], _mean(bon[-1][key])), textcoords="offset points",
                        xytext=(4, 4), fontsize=8, color="#555555")
        for method, report in data.get("methods", {}).items():
            kl, y, color = report.get("kl", {}), report.get(key, {}), method_color(method)
            seed_dots(ax, kl, y, color)
            if _mean(kl) is not None and _mean(y) is not None:
                ax.errorbar([_mean(kl)], [_mean(y)], xerr=[_sd(kl)], yerr=[_sd(y)], marker="*", ms=14, ls="",
                            color=color, capsize=3, markeredgecolor="black", markeredgewidth=0.6,
                            label=method_name(method))
        ax.set_xlabel("KL to the SFT policy (nats per response)")
        ax.set_ylabel(key.replace("_", " "))
        ax.set_title(title)
        ax.grid(alpha=0.3)
    # One legend beside the panels: inside either it would cover some method's points.
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=8, loc="outside right center")
    fig.suptitle(f"Alignment methods over seeds {_seeds_text(data)}: mean final policy ± 1 sd (stars), "
                 "each seed's (faint dots)")
    out_png = Path(out_png)
    fig.savefig(out_png, dpi=110)
    return out_png


def _mean_sd(stat, fmt: str = "{:+.3f}", unit: str = "") -> str:
    """``mean ± sd`` of a statistic (``mean ± —`` for one seed, ``—`` for none)."""
    if _mean(stat) is None:
        return "—"
    sd = _num(stat.get("sd"))
    spread = "—" if sd is None else fmt.format(sd).lstrip("+")
    return f"{fmt.format(stat['mean'])} ± {spread}{unit}"


def _ci(stat, fmt: str = "{:+.3f}") -> str:
    """``[low, high]`` of a statistic's 95% interval (``—`` without one)."""
    ci = stat.get("ci95") if isinstance(stat, dict) else None
    return "—" if not ci else f"[{fmt.format(ci[0])}, {fmt.format(ci[1])}]"


def compare_seeds_table(data: dict) -> str:
    """The table over seeds (markdown): mean ± sd and the 95% interval of gold, of gold gained over
    each seed's SFT, of proxy and of KL; win rate, wall time and peak RSS as mean ± sd; the seeds
    and how the numbers were computed."""
    rows = ["| method | n | gold: mean ± sd | gold: 95% CI | gold − SFT: mean ± sd | gold − SFT: 95% CI | "
            "proxy: mean ± sd | proxy: 95% CI | KL: mean ± sd | KL: 95% CI | win rate vs SFT (gold) | wall time | "
            "peak RSS |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    sft = data.get("sft", {})
    g, p = sft.get("gold_score", {}), sft.get("proxy_score", {})
    rows.append(f"| SFT | {g.get('n', '—')} | {_mean_sd(g)} | {_ci(g)} | 0 | — | {_mean_sd(p)} | {_ci(p)} | 0 | — | — | — | — |")
    for method, r in data.get("methods", {}).items():
        g, p, kl = r.get("gold_score", {}), r.get("proxy_score", {}), r.get("kl", {})
        gain = r.get("gold_gain", {})
        rows.append(f"| {method_name(method)} | {g.get('n', '—')} | {_mean_sd(g)} | {_ci(g)} | {_mean_sd(gain)} | {_ci(gain)} | "
                    f"{_mean_sd(p)} | {_ci(p)} | "
                    f"{_mean_sd(kl, '{:.2f}')} | {_ci(kl, '{:.2f}')} | {_mean_sd(r.get('win_rate_gold'), '{:.3f}')} | "
                    f"{_mean_sd(r.get('time_s'), '{:.0f}', ' s')} | {_mean_sd(r.get('peak_rss_mb'), '{:.0f}', ' MB')} |")
    for b in data.get("best_of_n", []):
        g, p = b.get("gold_score", {}), b.get("proxy_score", {})
        kl = "—" if _num(b.get("kl_analytic")) is None else f"{b['kl_analytic']:.2f} (analytic)"
        gain = b.get("gold_gain", {})
        rows.append(f"| best-of-{b['n']} of SFT | {g.get('n', '—')} | {_mean_sd(g)} | {_ci(g)} | {_mean_sd(gain)} | "
                    f"{_ci(gain)} | "
                    f"{_mean_sd(p)} | {_ci(p)} | "
                    f"{kl} | — | — | — | — |")
    seeds = data.get("seeds", [])
    lines = ["\n".join(rows),
             f"\nSeeds {_seeds_text(data)}: one complete comparison each in "
             f"{', '.join(f'seed{s}/' for s in seeds)}. n: the seeds with the value. sd: the sample standard deviation "
             "(n − 1); 95% CI: mean ± t(0.975, n − 1) · sd / √n."
             + (" With one seed there is no sd and no interval (—)." if len(seeds) < 2 else "")]
    rm, dpo = data.get("rm", {}), data.get("methods", {}).get("dpo")
    if dpo is not None:
        acc = rm.get("eval_accuracy")
        lines.append(f"\nHeld-out pair accuracy: explicit reward model {'—' if _num(acc) is None else f'{acc:.3f}'}; "
                     f"DPO's implicit reward {_mean_sd(dpo.get('implicit_reward_accuracy'), '{:.3f}')} over the seeds.")
    return "\n".join(lines)
