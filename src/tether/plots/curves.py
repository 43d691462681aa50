"""Plots of a run, from its logged rows only: training curves, KL frontier, best-of-N.

Draws on :class:`matplotlib.figure.Figure` with the Agg canvas (no pyplot, no GUI, no global
backend switch) and imports nothing from training code: inputs are plain dicts as read from
``metrics.jsonl``, ``alarms.jsonl``, ``frontier.json`` and ``best_of_n.json``.

    training_curves(read_metrics("runs/x/metrics.jsonl", "ppo"), "curves.png", alarms=alarm_dicts)
    frontier_plot([{"label": "beta=0.2", "beta": 0.2, "kl": 1.4, "proxy_score": 0.9,
                    "gold_score": 0.45}, ...], "frontier.png", best_of_n=bon_rows)
    best_of_n_plot(bon_rows, "best_of_n.png")
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

LEVEL_COLORS = {"info": "#7f7f7f", "warning": "#ff7f0e", "alarm": "#d62728"}
PROXY_COLOR = "#1f77b4"
GOLD_COLOR = "#ff7f0e"
SMOOTH = 5  # moving-average window drawn over noisy per-iteration series


def _num(value: Any) -> float | None:
    """A logged value as a finite float, else None (the logger writes non-finite floats as strings)."""
    if isinstance(value, bool) or value is None:
        return None
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def series(rows: Iterable[dict], key: str, x_key: str = "step") -> tuple[list[float], list[float]]:
    """(x, y) of the rows that log ``key`` as a finite number."""
    xs, ys = [], []
    for row in rows:
        y, x = _num(row.get(key)), _num(row.get(x_key))
        if y is not None and x is not None:
            xs.append(x)
            ys.append(y)
    return xs, ys


def moving_average(ys: Sequence[float], window: int = SMOOTH) -> list[float]:
    """Centred moving average (no lag; the window shrinks at both ends)."""
    half = window // 2
    out = []
    for i in range(len(ys)):
        part = ys[max(0, i - half) : i + half + 1]
        out.append(sum(part) / len(part))
    return out


def _get(obj: Any, name: str, default: Any = None) -> Any:
    return obj.get(name, default) if isinstance(obj, dict) else getattr(obj, name, default)


def _plot(ax, rows, key, label, color, smooth=True, **kw) -> bool:
    xs, ys = series(rows, key)
    if not xs:
        return False
    if smooth and len(xs) > 2 * SMOOTH:
        ax.plot(xs, ys, color=color, alpha=0.3, lw=1)
        ax.plot(xs, moving_average(ys), color=color, lw=2, label=f"{label} (avg {SMOOTH})", **kw)
    else:
        ax.plot(xs, ys, color=color, lw=1.5, marker="o" if len(xs) < 30 else None, ms=3, label=label, **kw)
    return True


def _twin(ax, rows, key, label, color, ylabel, **kw):
    """A right-hand axis with one series; removed again (None) when ``key`` is not logged."""
    twin = ax.twinx()
    if not _plot(twin, rows, key, label, color, **kw):
        twin.remove()
        return None
    twin.set_ylabel(ylabel)
    lo, hi = twin.get_ylim()
    if lo > 0 and hi > 0:
        twin.set_ylim(0, hi * 1.1)  # a constant beta would otherwise get a meaningless zoomed axis
    return twin


def _empty(ax, text="not logged") -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="#999999")


def _legend(ax, *more_axes) -> None:
    handles, labels = ax.get_legend_handles_labels()
    for other in [a for a in more_axes if a is not None]:
        h, lab = other.get_legend_handles_labels()
        handles += h
        labels += lab
    if handles:
        ax.legend(handles, labels, fontsize=8, loc="best")


def _gold_keys(rows: Sequence[dict]) -> list[str]:
    keys = []
    for row in rows:
        for key in row:
            if "gold" in key and key not in keys and _num(row[key]) is not None:
                keys.append(key)
    return keys


def _alarm_lines(axes, alarms, label_ax=None) -> list[str]:
    levels = []
    for alarm in alarms or ():
        it, level = _num(_get(alarm, "iteration")), str(_get(alarm, "level", "warning"))
        if it is None:
            continue
        color = LEVEL_COLORS.get(level, "#000000")
        for ax in axes:
            ax.axvline(it, color=color, ls="--", lw=1, alpha=0.8)
        if label_ax is not None:
            label_ax.text(it, 0.98, f" {_get(alarm, 'name', '')}", transform=label_ax.get_xaxis_transform(),
                          rotation=90, va="top", ha="left", fontsize=7, color=color)
        if level not in levels:
            levels.append(level)
    return levels


def training_curves(metrics_rows: Iterable[dict], out_png: str | Path, alarms: Iterable[Any] | None = None,
                    kl_band: tuple[float, float] | None = None, title: str | None = None) -> Path:
    """A 4x2 grid of the PPO curves the reference texts say to read together (ref. 004).

    Panels: score (proxy, raw RM, and any ``*gold*`` key when logged), KL with beta on a twin axis,
    length with repetition on a twin axis, entropy, value loss, clip fractions, EOS rate, approx-KL
    with grad norm. ``alarms`` (Alarm objects or dicts with iteration/level/name) become vertical
    dashed lines, coloured by level; ``kl_band=(low, high)`` shades the healthy KL band.
    Returns the path written.
    """
    rows = [r for r in metrics_rows if isinstance(r, dict)]
    alarms = list(alarms or [])
    # Fixed margins: constrained layout doubles the drawing time of this 8-panel grid.
    fig = Figure(figsize=(13, 14))
    fig.subplots_adjust(left=0.06, right=0.93, top=0.95 if title else 0.97, bottom=0.07, hspace=0.28, wspace=0.3)
    axes = fig.subplots(4, 2, sharex=True).ravel()
    if title:
        fig.suptitle(title, fontsize=14)

    ax = axes[0]
    found = _plot(ax, rows, "objective/score", "score (trained on)", PROXY_COLOR)
    found |= _plot(ax, rows, "objective/score_raw", "RM score (raw)", "#17becf")
    found |= _plot(ax, rows, "eval/proxy_score", "eval/proxy_score (held-out RM)", "#17becf", smooth=False, ls="--")
    for i, key in enumerate(_gold_keys(rows)):
        found |= _plot(ax, rows, key, key, GOLD_COLOR if i == 0 else "#8c564b", smooth=False)
    ax.set_title("Reward: proxy score (and gold if logged)")
    ax.set_ylabel("score")
    _legend(ax) if found else _empty(ax)

    ax = axes[1]
    if kl_band is not None:
        ax.axhspan(kl_band[0], kl_band[1], color="#2ca02c", alpha=0.12, label=f"healthy {kl_band[0]:g}-{kl_band[1]:g}")
    found = _plot(ax, rows, "objective/kl", "KL k1", "#9467bd")
    found |= _plot(ax, rows, "objective/kl_k3", "KL k3", "#c5b0d5", smooth=False)
    ax.set_ylabel("KL (nats/sequence)")
    ax.set_title("KL to the reference, and beta")
    twin = _twin(ax, rows, "objective/kl_coef", "beta", "#2ca02c", "beta (KL coefficient)", smooth=False, ls=":")
    _legend(ax, twin) if found else _empty(ax)

    ax = axes[2]
    found = _plot(ax, rows, "response/length_mean", "mean length", "#8c564b")
    ax.set_ylabel("tokens")
    ax.set_title("Response length, and repetition")
    twin = _twin(ax, rows, "response/repetition", "repeated-bigram rate", "#e377c2", "repeated-bigram rate")
    _legend(ax, twin) if found else _empty(ax)

    ax = axes[3]
    _plot(ax, rows, "objective/entropy", "entropy", "#bcbd22") or _empty(ax)
    ax.set_ylabel("nats/token")
    ax.set_title("Policy entropy")
    _legend(ax)

    ax = axes[4]
    found = _plot(ax, rows, "ppo/val/loss", "value loss", "#d62728")
    ax.set_title("Critic: value loss")
    _, ys = series(rows, "ppo/val/loss")
    if ys and min(ys) > 0 and max(ys) / min(ys) > 100:
        ax.set_yscale("log")
    twin = _twin(ax, rows, "ppo/val/explained_var", "explained variance", "#7f7f7f", "explained variance", ls=":")
    _legend(ax, twin) if found else _empty(ax)

    ax = axes[5]
    found = _plot(ax, rows, "ppo/policy/clipfrac", "policy clip fraction", "#1f77b4")
    found |= _plot(ax, rows, "ppo/val/clipfrac", "value clip fraction", "#aec7e8")
    ax.set_title("PPO clip fractions")
    _legend(ax) if found else _empty(ax)

    ax = axes[6]
    _plot(ax, rows, "response/eos_rate", "EOS rate", "#2ca02c") or _empty(ax)
    ax.set_ylim(-0.02, 1.05)
    ax.set_title("Share of responses that end with EOS")
    _legend(ax)

    ax = axes[7]
    found = _plot(ax, rows, "ppo/policy/approxkl", "approx KL (old->new)", "#9467bd")
    ax.set_title("Update size: approx-KL per iteration, gradient norm")
    twin = _twin(ax, rows, "optim/grad_norm", "actor grad norm", "#7f7f7f", "grad norm", ls=":")
    _legend(ax, twin) if found else _empty(ax)

    for ax in axes[-2:]:
        ax.set_xlabel("PPO iteration")
    for ax in axes:
        ax.grid(alpha=0.3)
    levels = _alarm_lines(axes, alarms, label_ax=axes[0])
    if levels:
        from matplotlib.lines import Line2D

        fig.legend([Line2D([], [], color=LEVEL_COLORS.get(lv, "k"), ls="--") for lv in levels],
                   [f"{lv} raised" for lv in levels], loc="lower center", ncols=len(levels), fontsize=9)
    return _save(fig, out_png)


def metric_panels(rows: Iterable[dict], panels: Sequence[tuple[str, Sequence[str]]], out_png: str | Path,
                  title: str | None = None, xlabel: str = "step") -> Path:
    """One panel per (title, [metric keys]) in a row: e.g. SFT losses, RM accuracies."""
    rows = [r for r in rows if isinstance(r, dict)]
    fig = Figure(figsize=(5.5 * max(len(panels), 1), 3.6), layout="constrained")
    axes = fig.subplots(1, max(len(panels), 1), squeeze=False)[0]
    if title:
        fig.suptitle(title)
    colors = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd"]
    for ax, (panel_title, keys) in zip(axes, panels):
        found = False
        for key, color in zip(keys, colors):
            found |= _plot(ax, rows, key, key, color)
        ax.set_title(panel_title)
        ax.set_xlabel(xlabel)
        ax.grid(alpha=0.3)
        _legend(ax) if found else _empty(ax)
    return _save(fig, out_png)


def _is_bon(point: dict) -> bool:
    return point.get("kind") == "best_of_n" or ("kl_analytic" in point and "kl" not in point)


def _kl_of(point: dict) -> float | None:
    kl = _num(point.get("kl", point.get("kl_analytic")))
    return None if kl is None else math.sqrt(max(kl, 0.0))


def frontier_plot(points: Iterable[dict], out_png: str | Path, best_of_n: Iterable[dict] | None = None,
                  title: str | None = None) -> Path:
    """Proxy and gold score against sqrt(KL) (Gao et al. 2022's over-optimisation plot).

    ``points``: dicts ``{"label", "beta", "kl", "proxy_score", "gold_score"}`` (one per PPO run or
    checkpoint; circles joined in KL order, annotated with their label). Best-of-N rows (``n``,
    ``kl_analytic``, ``proxy_score``, ``gold_score``), given as ``best_of_n`` or mixed into
    ``points``, are drawn as triangles on the same axes. Missing scores are skipped.
    """
    points = [p for p in points if isinstance(p, dict)]
    bon = [p for p in points if _is_bon(p)] + [dict(p) for p in (best_of_n or [])]
    ppo = [p for p in points if not _is_bon(p)]
    fig = Figure(figsize=(8, 5.5), layout="constrained")
    ax = fig.subplots()
    anything = False
    for group, marker, ls, what in ((ppo, "o", "-", "PPO"), (bon, "^", "--", "best-of-N")):
        pts = sorted((p for p in group if _kl_of(p) is not None), key=_kl_of)
        for key, color, name in (("proxy_score", PROXY_COLOR, "proxy (RM)"), ("gold_score", GOLD_COLOR, "gold")):
            xy = [(_kl_of(p), _num(p.get(key))) for p in pts if _num(p.get(key)) is not None]
            if not xy:
                continue
            anything = True
            ax.plot([x for x, _ in xy], [y for _, y in xy], marker=marker, ls=ls, color=color, ms=7,
                    lw=1.2, alpha=0.9, label=f"{what}: {name}")
        # every PPO point is labelled; best-of-N only at its largest n (its labels would pile up near 0)
        for p in pts if what == "PPO" else pts[-1:]:
            if p.get("annotate") is False:
                continue
            label = p.get("label") or (f"best-of-{p['n']}" if "n" in p else f"beta={p.get('beta')}")
            y = _num(p.get("gold_score"))
            y = _num(p.get("proxy_score")) if y is None else y
            if y is not None:
                ax.annotate(str(label), (_kl_of(p), y), textcoords="offset points", xytext=(4, -12 if what == "PPO" else 6),
                            fontsize=8, color="#444444")
    if not anything:
        _empty(ax, "no frontier points")
    ax.set_xlabel("sqrt(KL to the SFT policy)  (sqrt nats; best-of-N: analytic KL)")
    ax.set_ylabel("score")
    ax.set_title(title or "Proxy and gold score vs distance from the SFT policy")
    ax.grid(alpha=0.3)
    _legend(ax)
    return _save(fig, out_png)


def best_of_n_plot(rows: Iterable[dict], out_png: str | Path, title: str | None = None) -> Path:
    """Proxy and gold score of best-of-n against n (log scale), with each n's analytic KL."""
    rows = sorted((r for r in rows if isinstance(r, dict) and _num(r.get("n")) is not None), key=lambda r: r["n"])
    fig = Figure(figsize=(7.5, 5), layout="constrained")
    ax = fig.subplots()
    ns = [r["n"] for r in rows]
    found = False
    for key, color, name in (("proxy_score", PROXY_COLOR, "proxy (RM) of the pick"), ("gold_score", GOLD_COLOR, "gold of the pick")):
        xy = [(r["n"], _num(r.get(key))) for r in rows if _num(r.get(key)) is not None]
        if xy:
            found = True
            ax.plot([x for x, _ in xy], [y for _, y in xy], marker="^", color=color, label=name)
    if ns:
        ax.set_xscale("log", base=2)
        ax.set_xticks(ns)
        ax.set_xticklabels([f"{n}\nKL {_num(r.get('kl_analytic')) or 0:.2f}" for n, r in zip(ns, rows)])
        ax.minorticks_off()
    ax.set_xlabel("n samples per prompt (analytic KL, nats)")
    ax.set_ylabel("mean score over prompts")
    ax.set_title(title or "Best-of-N: keep the reward model's favourite of n samples")
    ax.grid(alpha=0.3)
    _legend(ax) if found else _empty(ax, "no best-of-N rows")
    return _save(fig, out_png)


def _save(fig: Figure, out_png: str | Path) -> Path:
    out = Path(out_png)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=90, format="png")
    return out


__all__ = ["best_of_n_plot", "frontier_plot", "metric_panels", "moving_average", "series", "training_curves"]
