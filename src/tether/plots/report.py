"""``report.html``: one self-contained page per run, built from the run's files only.

``build_report(DIR)`` reads what the run left on disk (no model is loaded) and writes
``DIR/report.html`` with every plot embedded as a base64 PNG, so the file can be mailed or
opened anywhere. Two layouts are recognised:

* a **run directory** (``tether ppo``): ``DIR/metrics.jsonl`` and the files below in ``DIR``;
* a **demo directory** (``tether demo``): ``DIR/sft/``, ``DIR/rm/``, ``DIR/ppo/`` and
  ``DIR/summary.json``; PPO's files are read from ``DIR/ppo/`` (or ``DIR`` itself).

Files read (all optional except a ``metrics.jsonl``):

``metrics.jsonl``
    one row per logged step, ``{"stage", "step", "time", <metric>: value}`` (docs/metrics.md).
``alarms.jsonl``
    one health alarm per line, written by the PPO loop with
    :func:`tether.eval.health.append_alarms`::

        {"name": "kl_drifting", "level": "warning", "iteration": 42,
         "message": "KL to the reference is 11.2 nats/sequence ...", "fix": "Raise kl.coef ...",
         "values": {"kl": 11.2}}

    ``level`` is ``info``, ``warning`` or ``alarm``; ``values`` is optional.
``samples.jsonl``
    a few responses per logged iteration, one per line::

        {"iteration": 10, "prompt": "what is 3 + 4 ?", "response": "sure . 7 .", "score": 0.83}

    optional extra keys ``gold`` (judge score) and ``ended`` (bool) are shown when present.
    The report shows the first, the middle and the last iteration present.
``summary.json``
    the demo's measurements (``base``/``sft``/``ppo``/``rm``/``samples``/``timing``) or any JSON
    object (rendered as tables).
``eval.json``
    held-out evaluation: an object of objects (one column per policy), a flat object, or a list of rows.
``frontier.json``
    a list of points ``{"label", "beta", "kl", "proxy_score", "gold_score"}`` or
    ``{"points": [...], "best_of_n": [...]}``.
``best_of_n.json``
    the rows of :func:`tether.eval.best_of_n.best_of_n` (``{"n", "kl_analytic", "proxy_score",
    "gold_score"}``), as a list or ``{"rows": [...]}``.
``config.yaml``
    the resolved PPO config (beta, controller, health bands) for the headline table.
"""

from __future__ import annotations

import base64
import datetime as _dt
import html
import json
import math
import statistics
import tempfile
from pathlib import Path
from typing import Any

from tether.registry.algorithms import DEFAULT_ALGORITHM
from tether.common.errors import TetherError
from tether.plots.curves import _num, best_of_n_plot, frontier_plot, metric_panels, training_curves
from tether.plots.run_files import locate, read_json, read_jsonl, read_yaml
from tether.plots.overlap import ENGINE_WAIT, GENERATE, STALENESS_MAX, STALENESS_MEAN, TRAINER_WAIT, overlap_summary

REPORT_NAME = "report.html"
LEVEL_ORDER = {"alarm": 0, "warning": 1, "info": 2}
SAMPLES_PER_GROUP = 6

CSS = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; color: #222;
       max-width: 1180px; margin: 2em auto; padding: 0 1.5em; line-height: 1.45; }
h1 { border-bottom: 3px solid #1f77b4; padding-bottom: .3em; }
h2 { border-bottom: 1px solid #ccc; padding-bottom: .2em; margin-top: 2.2em; }
p.meta { color: #666; font-size: .9em; }
table { border-collapse: collapse; margin: .8em 0 1.2em; font-size: .92em; }
th, td { border: 1px solid #ddd; padding: .35em .7em; text-align: left; vertical-align: top; }
th { background: #f2f5f9; }
tr:nth-child(even) td { background: #fafafa; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.text { white-space: pre-wrap; font-family: ui-monospace, Menlo, Consolas, monospace; font-size: .9em; }
img { max-width: 100%; border: 1px solid #e3e3e3; }
.note { background: #f7f9fc; border-left: 4px solid #1f77b4; padding: .6em 1em; margin: .8em 0; }
.note ul { margin: .3em 0; padding-left: 1.3em; }
.badge { display: inline-block; padding: .05em .55em; border-radius: .8em; color: #fff; font-size: .85em; }
.badge.alarm { background: #d62728; } .badge.warning { background: #ff7f0e; } .badge.info { background: #7f7f7f; }
.ok { color: #2ca02c; font-weight: 600; }
.muted { color: #888; }
"""

CURVES_NOTE = """
<div class="note"><b>How to read these curves</b> (reference text 004, "Reading training logs": read them
<i>together</i>, never the reward alone). Thin lines are per-iteration values, thick lines a 5-iteration
moving average; dashed vertical lines mark health alarms (grey info, orange warning, red alarm).
<ul>
<li><b>Reward</b>: healthy is a slow rise; rising fast while the gold score (if logged) stalls or drops is the
danger sign of reward hacking.</li>
<li><b>KL to the reference</b> (nats per response): healthy is fluctuating in a target band. Reference text 003:
&lt; 1 the policy barely changed, 2&ndash;6 healthy, &gt; 10 drifting, &gt; 20 catastrophic (large-model bands;
a tiny model's best gold comes at lower KL). Beta, on the right axis, is the KL coefficient.</li>
<li><b>Length and repetition</b>: healthy is stable; length and repetition spiking together with the reward is
reward hacking.</li>
<li><b>Entropy</b>: healthy is slowly decreasing but not collapsed; a fast drop to near zero is mode collapse.</li>
<li><b>Value loss</b>: healthy is controlled fluctuation; exploding or never decreasing means the critic is not
tracking the returns (explained variance on the right: closer to 1 is better).</li>
<li><b>Clip fractions</b>: healthy is some fraction clipped; near 0 means tiny updates, persistently high means
too-aggressive updates.</li>
<li><b>EOS rate</b>: the share of responses that ended on their own; a fall means responses run into the length cap.</li>
<li><b>Approx-KL and grad norm</b>: the size of each update; spikes point at instability (ref. 004 stability toolbox).</li>
</ul></div>
"""

FRONTIER_NOTE = """
<div class="note">Each point is one policy: its mean proxy (reward-model) score and gold (judge) score against the
square root of its KL to the SFT policy (Gao et al. 2022). A faithful reward keeps gold rising with proxy; an
over-optimised one shows the proxy still rising while gold peaks and falls &mdash; the gap is reward hacking.
Triangles are best-of-N: sample N responses from SFT and keep the reward model's favourite, no training at
all; its KL is the analytic log N &minus; (N&minus;1)/N.</div>
"""

BON_NOTE = """
<div class="note">Best-of-N reuses one set of samples: for each N the first N samples per prompt compete and the
reward model's favourite is kept. The proxy score can only rise with N; whether the gold score follows tells
how far the reward model can be trusted at that distance from SFT.</div>
"""


# -- HTML helpers -----------------------------------------------------------------------------
def _esc(x: Any) -> str:
    return html.escape(str(x), quote=True)


def _fmt(x: Any) -> str:
    if x is None:
        return "&ndash;"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return str(x)
    if isinstance(x, float):
        if not math.isfinite(x):
            return _esc(x)
        if x == 0:
            return "0"
        return f"{x:.4g}" if abs(x) >= 1000 or abs(x) < 0.001 else f"{x:.3f}"
    if isinstance(x, str):
        return _esc(x)
    return _esc(json.dumps(x))


def _is_scalar(x: Any) -> bool:
    return x is None or isinstance(x, (int, float, str, bool))


def _table(header: list[str], rows: list[list[Any]], text_cols: tuple[int, ...] = ()) -> str:
    out = ["<table>", "<tr>" + "".join(f"<th>{_esc(h)}</th>" for h in header) + "</tr>"]
    for row in rows:
        cells = []
        for i, value in enumerate(row):
            if isinstance(value, _Raw):
                cells.append(f"<td>{value}</td>")
            elif i in text_cols:
                cells.append(f'<td class="text">{_esc(value)}</td>')
            elif isinstance(value, (int, float)) and not isinstance(value, bool):
                cells.append(f'<td class="num">{_fmt(value)}</td>')
            else:
                cells.append(f"<td>{_fmt(value)}</td>")
        out.append("<tr>" + "".join(cells) + "</tr>")
    out.append("</table>")
    return "\n".join(out)


class _Raw(str):
    """Trusted HTML for a table cell."""


def _img(path: Path, alt: str) -> str:
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return f'<img src="data:image/png;base64,{data}" alt="{_esc(alt)}">'


def _generic(data: Any) -> str:
    """Any JSON value as tables: object of objects, flat object, list of rows, else <pre>."""
    if isinstance(data, dict) and data and all(isinstance(v, dict) for v in data.values()):
        cols = list(data)
        keys: list[str] = []
        for v in data.values():
            keys += [k for k, x in v.items() if _is_scalar(x) and k not in keys]
        if keys:
            return _table(["", *cols], [[k, *[data[c].get(k) for c in cols]] for k in keys])
    if isinstance(data, dict):
        flat = [[k, v] for k, v in data.items() if _is_scalar(v)]
        nested = {k: v for k, v in data.items() if not _is_scalar(v)}
        out = _table(["key", "value"], flat) if flat else ""
        for k, v in nested.items():
            out += f"<h4>{_esc(k)}</h4>" + _generic(v)
        return out
    if isinstance(data, list) and data and all(isinstance(r, dict) for r in data):
        keys = []
        for r in data:
            keys += [k for k, x in r.items() if _is_scalar(x) and k not in keys]
        return _table(keys, [[r.get(k) for k in keys] for r in data])
    return f"<pre>{_esc(json.dumps(data, indent=2))}</pre>"


# -- content ----------------------------------------------------------------------------------
def _ppo_rows(rows: list[dict]) -> list[dict]:
    ppo = [r for r in rows if r.get("stage", DEFAULT_ALGORITHM) == DEFAULT_ALGORITHM]
    return [r for r in ppo if _num(r.get("step")) is not None and r["step"] >= 1
            and any(k.startswith(("objective/", "ppo/", "response/")) for k in r)]


def _window_mean(rows: list[dict], key: str, last: bool, n: int = 5) -> float | None:
    vals = [v for v in (_num(r.get(key)) for r in rows) if v is not None]
    if not vals:
        return None
    part = vals[-n:] if last else vals[:n]
    return sum(part) / len(part)


# (label, metric, unit, what healthy looks like) of the headline table's start/end rows.
HEADLINE_METRICS = (
    ("score (trained on)", "objective/score", "", "slow rise is healthy (ref. 004)"),
    ("RM score (raw)", "objective/score_raw", "", ""),
    ("KL to reference", "objective/kl", "nats/resp.",
     "ref. 003: <1 barely moved, 2-6 healthy, >10 drifting, >20 catastrophic"),
    ("beta (KL coefficient)", "objective/kl_coef", "", ""),
    ("entropy", "objective/entropy", "nats/token", "slowly decreasing, not collapsed"),
    ("response length", "response/length_mean", "tokens", "stable; no spike with reward"),
    ("repeated-bigram rate", "response/repetition", "", "stable"),
    ("EOS rate", "response/eos_rate", "", "near 1 when answers fit the cap"),
    ("value loss", "ppo/val/loss", "", "controlled, not exploding"),
    ("policy clip fraction", "ppo/policy/clipfrac", "", "some clipping; not ~0, not persistently high"),
)


def _headline(ppo: list[dict], alarms: list[dict], summary: Any, config: dict) -> str:
    rows: list[list[Any]] = []

    if ppo:
        rows.append(["PPO iterations logged", None, int(ppo[-1]["step"]), "", ""])
        for label, key, unit, note in HEADLINE_METRICS:
            start, end = _window_mean(ppo, key, False), _window_mean(ppo, key, True)
            if start is not None or end is not None:
                rows.append([label, start, end, unit, note])
        t = [v for v in (_num(r.get("timing/iteration")) for r in ppo) if v is not None]
        if t:
            rows.append(["time per iteration (median)", None, statistics.median(t), "s", ""])
    kl_cfg = config.get("kl") if isinstance(config.get("kl"), dict) else {}
    if kl_cfg:
        desc = f"{kl_cfg.get('controller', '?')}, beta {kl_cfg.get('coef', '?')}"
        if kl_cfg.get("controller") == "adaptive":
            desc += f", target {kl_cfg.get('target', '?')} nats"
        rows.append(["KL controller (config)", None, _Raw(_esc(desc)), "", ""])
    if isinstance(summary, dict) and isinstance(summary.get("sft"), dict) and isinstance(summary.get(DEFAULT_ALGORITHM), dict):
        for key, label, note in (("gold_score", "gold score (held-out, judge)", "the score that matters"),
                                 ("proxy_score", "proxy score (held-out, RM)", ""),
                                 ("accuracy", "answer accuracy (held-out)", "")):
            if summary["sft"].get(key) is not None or summary[DEFAULT_ALGORITHM].get(key) is not None:
                rows.append([label + ": SFT → PPO", summary["sft"].get(key), summary[DEFAULT_ALGORITHM].get(key), "", note])
    counts = {lv: sum(1 for a in alarms if a.get("level") == lv) for lv in ("alarm", "warning", "info")}
    text = ", ".join(f"{n} {lv}" for lv, n in counts.items() if n) or "none"
    rows.append(["health alarms raised", None, _Raw(_esc(text) if alarms else '<span class="ok">none</span>'), "", ""])
    return _table(["", "start (first 5)", "end (last 5)", "unit", "healthy looks like"], rows)


def _async_section(ppo: list[dict], overlap: dict, tmp: Path) -> str:
    """The overlap of sampling and training in a run with rollout.max_staleness >= 1."""
    png = metric_panels(ppo, [("seconds per iteration", [GENERATE, TRAINER_WAIT, ENGINE_WAIT, "timing/iteration"]),
                              ("staleness (updates)", [STALENESS_MEAN, STALENESS_MAX])], tmp / "async.png")
    rows = [["iterations sampled ahead", overlap["iterations"], ""],
            ["worker sampling (median)", overlap["sampling_s_median"], "s per iteration"],
            ["trainer waiting for a rollout (median)", overlap["trainer_wait_s_median"], "s per iteration"],
            ["worker waiting for weights or work (median)", overlap["engine_wait_s_median"], "s per iteration"],
            ["sampling hidden behind training", overlap["overlap"], "1 - trainer wait / sampling, after iteration 1"],
            ["staleness: mean / max", _Raw(f"{overlap['staleness_mean']:.2f} / {overlap['staleness_max']:.0f}"),
             "updates between sampling and training"]]
    return ("<p>A sampler with its own copy of the weights sampled each rollout while earlier iterations trained "
            "(<code>rollout.max_staleness</code>). Sampling hidden behind training (after the first iteration) is "
            "the time saved; docs/algorithms.md says when that is worth it.</p>"
            + _img(png, "asynchronous rollouts") + _table(["", "value", "unit"], rows))


def _alarms_section(alarms: list[dict] | None) -> str:
    if alarms is None:
        return '<p class="muted">No <code>alarms.jsonl</code>: this run did not record health alarms.</p>'
    if not alarms:
        return '<p class="ok">No alarm was raised: every health rule stayed quiet.</p>'
    intro = ("<p>Raised by the health monitor (<code>tether.eval.health</code>) while training; each alarm fires when "
             "its condition starts to hold and again only after it cleared or escalated. Rules and thresholds: "
             "docs/metrics.md.</p>")
    rows = []
    for a in sorted(alarms, key=lambda a: (_num(a.get("iteration")) or 0, LEVEL_ORDER.get(a.get("level"), 3))):
        level = str(a.get("level", "?"))
        rows.append([a.get("iteration"), _Raw(f'<span class="badge {_esc(level)}">{_esc(level)}</span>'),
                     _Raw(f"<b>{_esc(a.get('name', '?'))}</b>"), a.get("message", ""), a.get("fix", "")])
    return intro + _table(["iteration", "level", "alarm", "what was seen", "suggested fix"], rows)


def _demo_eval(summary: dict) -> str:
    cols = [c for c in ("base", "sft", DEFAULT_ALGORITHM) if isinstance(summary.get(c), dict)]
    keys: list[str] = []
    for c in cols:
        keys += [k for k, v in summary[c].items() if _is_scalar(v) and k not in keys]
    labels = {"gold_score": "gold score (judge)", "proxy_score": "proxy score (RM)", "accuracy": "answer accuracy",
              "spurious_rate": "responses with '!'", "kl": "KL to SFT (nats)", "entropy": "entropy (nats/token)",
              "length_mean": "length (tokens)", "eos_rate": "EOS rate", "greedy_accuracy": "greedy accuracy"}
    out = ("<p>Held-out prompts, sampled with a fixed seed; gold is the hidden judge, proxy the reward model.</p>"
           + _table(["", *[c.upper() if c != "base" else "base" for c in cols]],
                    [[labels.get(k, k), *[summary[c].get(k) for c in cols]] for k in keys]))
    if isinstance(summary.get("rm"), dict):
        out += "<h3>Reward model</h3>" + _generic(summary["rm"])
    extra = {k: v for k, v in summary.items() if k not in ("base", "sft", DEFAULT_ALGORITHM, "rm", "samples", "timing")}
    if extra:
        out += "<h3>Other</h3>" + _generic(extra)
    if isinstance(summary.get("timing"), dict):
        out += "<h3>Timings (seconds)</h3>" + _generic(summary["timing"])
    return out


def _samples_section(samples: list[dict] | None, summary: Any) -> str:
    if samples:
        by_it: dict[int, list[dict]] = {}
        for s in samples:
            it = _num(s.get("iteration"))
            if it is not None:
                by_it.setdefault(int(it), []).append(s)
        its = sorted(by_it)
        picks = []
        for it, name in ((its[0], "start"), (its[len(its) // 2], "middle"), (its[-1], "end")):
            if it not in [p for p, _ in picks]:
                picks.append((it, name))
        out = ("<p>What the policy actually wrote, at the first, middle and last logged iteration. Read them: a "
               "rising score with degenerate text is reward hacking (ref. 004: manual spot-checks).</p>")
        extra = [k for k in ("gold", "ended") if any(k in s for s in samples)]
        for it, name in picks:
            rows = [[s.get("prompt", ""), _conversation(s), _num(s.get("score")), *[s.get(k) for k in extra]]
                    for s in by_it[it][:SAMPLES_PER_GROUP]]
            out += f"<h3>{name.capitalize()}: iteration {it}</h3>"
            out += _table(["prompt", "response", "score", *extra], rows, text_cols=(0, 1))
        return out
    if isinstance(summary, dict) and isinstance(summary.get("samples"), list) and summary["samples"]:
        rows = [[s.get("prompt", ""), s.get("sft", ""), s.get(DEFAULT_ALGORITHM, "")] for s in summary["samples"] if isinstance(s, dict)]
        return ("<p>Held-out prompts answered by the SFT policy and by the PPO policy (same sampling seed).</p>"
                + _table(["prompt", "SFT", "PPO"], rows, text_cols=(0, 1, 2)))
    return '<p class="muted">No <code>samples.jsonl</code> and no samples in <code>summary.json</code>.</p>'


def _conversation(sample: dict) -> str:
    """A sample's response; for an episode (``messages``), every turn after the opening user
    message as ``role: content`` lines (tool calls and results included)."""
    messages = sample.get("messages")
    if not isinstance(messages, list) or not messages:
        return sample.get("response", "")
    first = next((i for i, m in enumerate(messages) if isinstance(m, dict) and m.get("role") == "assistant"), 0)
    return "\n".join(f"{m.get('role', '?')}: {m.get('content', '')}" for m in messages[first:] if isinstance(m, dict))


def _as_list(data: Any, *keys: str) -> list[dict]:
    if isinstance(data, list):
        return [r for r in data if isinstance(r, dict)]
    if isinstance(data, dict):
        for k in keys:
            if isinstance(data.get(k), list):
                return [r for r in data[k] if isinstance(r, dict)]
    return []


def _kl_band(config: dict) -> tuple[float, float] | None:
    health = config.get("health") if isinstance(config.get("health"), dict) else {}
    low, high = _num(health.get("kl_low")), _num(health.get("kl_healthy_high"))
    return (low, high) if low is not None and high is not None else None


# -- entry point ------------------------------------------------------------------------------
COMPARE_NOTE = ("<p>Every method from the same SFT model and reward model, with the same budget of generated "
                "responses, scored on the same held-out samples: gold (the judge) and proxy (the reward model) "
                "against the KL to SFT. Lines follow each run's held-out evaluations; stars are the final "
                "policies; the dashed curve is best-of-N of SFT at its analytic KL (docs/algorithms.md).</p>")


def build_report(run_dir: str | Path, out: str | Path | None = None) -> Path:
    """Write ``run_dir/report.html`` (or ``out``) from the run's files; return its path.

    Raises :class:`~tether.common.errors.TetherError` when ``run_dir`` holds no ``metrics.jsonl``
    (neither ``run_dir/metrics.jsonl`` nor ``run_dir/ppo/metrics.jsonl``).
    """
    files = locate(run_dir)
    root: Path = files["root"]
    if files["metrics"] is None:
        raise TetherError(f"'{root}' has no metrics.jsonl (looked in {root} and {root / DEFAULT_ALGORITHM}): give the run "
                          "directory of `tether ppo` or the DIR of `tether demo`.")
    all_rows = read_jsonl(files["metrics"])
    ppo = _ppo_rows(all_rows)
    alarms = read_jsonl(files["alarms"]) if files["alarms"] else None
    samples = read_jsonl(files["samples"]) if files["samples"] else None
    summary = read_json(files["summary"])
    evaluation = read_json(files["eval"])
    frontier = read_json(files["frontier"])
    bon_data = read_json(files["best_of_n"])
    config = read_yaml(files["config"])

    parts: list[str] = []
    toc: list[tuple[str, str]] = []

    def section(anchor: str, title: str, body: str) -> None:
        toc.append((anchor, title))
        parts.append(f'<h2 id="{anchor}">{_esc(title)}</h2>\n{body}')

    with tempfile.TemporaryDirectory(prefix="tether-report-") as tmp:
        tmp = Path(tmp)
        section("headline", "Headline", _headline(ppo, alarms or [], summary, config))
        if ppo:
            png = training_curves(ppo, tmp / "curves.png", alarms=alarms, kl_band=_kl_band(config))
            section("curves", "Training curves", CURVES_NOTE + _img(png, "PPO training curves"))
        else:
            stages = sorted({str(r.get("stage")) for r in all_rows})
            section("curves", "Training curves",
                    f'<p class="muted">No PPO iterations in {_esc(files["metrics"])} (stages found: {_esc(", ".join(stages))}).</p>')
            other = [r for r in all_rows if r.get("stage") in ("sft", "rm")]
            if other:
                files["sft_metrics"] = files["sft_metrics"] or (files["metrics"] if other[0]["stage"] == "sft" else None)
                files["rm_metrics"] = files["rm_metrics"] or (files["metrics"] if other[0]["stage"] == "rm" else None)
        if ppo and (overlap := overlap_summary(ppo)) is not None:
            section("async", "Asynchronous rollouts", _async_section(ppo, overlap, tmp))
        section("alarms", "Alarms raised", _alarms_section(alarms))
        eval_body = ""
        if isinstance(summary, dict) and isinstance(summary.get(DEFAULT_ALGORITHM), dict) and isinstance(summary.get("sft"), dict):
            eval_body += _demo_eval(summary)
        elif summary is not None:
            eval_body += "<h3>summary.json</h3>" + _generic({k: v for k, v in summary.items() if k != "samples"}
                                                            if isinstance(summary, dict) else summary)
        if evaluation is not None:
            eval_body += "<h3>eval.json</h3>" + _generic(evaluation)
        section("eval", "Evaluation", eval_body or '<p class="muted">No <code>summary.json</code> or '
                '<code>eval.json</code> in this run.</p>')
        section("samples", "Samples: start, middle, end", _samples_section(samples, summary))
        points = _as_list(frontier, "points")
        bon_rows = _as_list(bon_data, "rows", "best_of_n") or _as_list(frontier, "best_of_n")
        if points or bon_rows:
            body = FRONTIER_NOTE + _img(frontier_plot(points, tmp / "frontier.png", best_of_n=bon_rows), "frontier")
            if points:
                body += _table(["policy", "beta", "KL", "proxy", "gold"],
                               [[p.get("label"), p.get("beta"), p.get("kl"), p.get("proxy_score"), p.get("gold_score")]
                                for p in points])
            section("frontier", "Reward vs KL frontier", body)
        if bon_rows:
            body = BON_NOTE + _img(best_of_n_plot(bon_rows, tmp / "bon.png"), "best-of-N")
            body += _table(["n", "KL (analytic)", "proxy", "gold"],
                           [[r.get("n"), r.get("kl_analytic"), r.get("proxy_score"), r.get("gold_score")] for r in bon_rows])
            section("best-of-n", "Best-of-N", body)
        compared = read_json(root / "compare.json") if (root / "compare.json").is_file() else None
        if isinstance(compared, dict) and compared.get("methods"):
            from tether.plots.compare import compare_plot, compare_rows

            header, rows = compare_rows(compared)
            section("compare", "Methods compared (tether compare)",
                    COMPARE_NOTE + _img(compare_plot(compared, tmp / "compare.png"), "methods compared")
                    + _table(header, rows, text_cols=(0,)))
        stage_parts = []
        if files["sft_metrics"]:
            rows = [r for r in read_jsonl(files["sft_metrics"]) if r.get("stage", "sft") == "sft"]
            png = metric_panels(rows, [("SFT loss (response tokens)", ["train/loss", "eval/loss"])], tmp / "sft.png")
            stage_parts.append("<h3>SFT</h3><p>Cross-entropy on response tokens; the held-out loss should fall and "
                               "flatten without rising again (over-fitting).</p>" + _img(png, "SFT curves"))
        if files["rm_metrics"]:
            rows = [r for r in read_jsonl(files["rm_metrics"]) if r.get("stage", "rm") == "rm"]
            png = metric_panels(rows, [("Bradley-Terry loss", ["train/loss", "eval/loss"]),
                                       ("pairwise accuracy", ["train/accuracy", "eval/accuracy"]),
                                       ("held-out margin r_c - r_r", ["eval/margin"])], tmp / "rm.png")
            stage_parts.append("<h3>Reward model</h3><p>Held-out accuracy is how often the chosen response outscores the "
                               "rejected one (ref. 004: 'can RM distinguish chosen/rejected?'); it is capped by label "
                               "noise.</p>" + _img(png, "RM curves"))
        if stage_parts:
            section("stages", "Earlier stages", "\n".join(stage_parts))

    read = [f"<li><code>{_esc(p)}</code></li>" for k, p in files.items()
            if isinstance(p, Path) and k != "root" and p.is_file()]
    parts.append(f'<h2 id="files">Files read</h2><ul>{"".join(read)}</ul>'
                 '<p class="meta">Regenerate with <code>tether report DIR</code>.</p>')
    nav = " &middot; ".join(f'<a href="#{a}">{_esc(t)}</a>' for a, t in toc)
    kind = "demo" if files["demo"] else "run"
    now = _dt.datetime.now().strftime("%Y-%m-%d %H:%M")
    page = (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f"<title>tether report: {_esc(root.resolve().name)}</title><style>{CSS}</style></head><body>\n"
            f"<h1>tether {kind} report: {_esc(root.resolve().name)}</h1>\n"
            f'<p class="meta">{_esc(root.resolve())} &middot; generated {now} from the run\'s files only</p>\n'
            f"<p>{nav}</p>\n" + "\n".join(parts) + "\n</body></html>\n")
    target = Path(out) if out is not None else root / REPORT_NAME
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(page, encoding="utf-8")
    return target


__all__ = ["REPORT_NAME", "build_report", "locate"]
