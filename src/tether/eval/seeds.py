"""The same comparison over several seeds: each number's mean, sample standard deviation and 95%
interval, and `tether compare --seeds N`'s aggregate of its single-seed compare.json files.

The interval is Student's t: mean ± t(0.975, n − 1) · sd / √n, with sd the sample standard
deviation (n − 1 in the denominator). The quantiles come from a table (scipy is not a dependency):
:data:`T975` for 1 to 30 degrees of freedom, the normal 1.96 beyond (the usual textbook cut; at 31
the exact value is 2.040). One value has no sd and no interval: both are None.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence

#: t(0.975, df) for df = 1..30 (the two-sided 95% quantile of Student's t), to 6 decimals.
T975 = (12.706205, 4.302653, 3.182446, 2.776445, 2.570582, 2.446912, 2.364624, 2.306004, 2.262157, 2.228139,
        2.200985, 2.178813, 2.160369, 2.144787, 2.131450, 2.119905, 2.109816, 2.100922, 2.093024, 2.085963,
        2.079614, 2.073873, 2.068658, 2.063899, 2.059539, 2.055529, 2.051831, 2.048407, 2.045230, 2.042272)
Z975 = 1.959964  # the normal's 0.975 quantile, used beyond the table

#: compare.json keys aggregated over seeds, where a report has them.
METHOD_KEYS = ("gold_score", "proxy_score", "kl", "win_rate_gold", "win_rate_proxy", "accuracy", "spurious_rate",
               "time_s", "peak_rss_mb", "generated_tokens", "implicit_reward_accuracy", "implicit_reward_margin")
SFT_KEYS = ("gold_score", "proxy_score", "kl", "accuracy", "spurious_rate")
BEST_OF_N_KEYS = ("gold_score", "proxy_score")


def t975(df: int) -> float:
    """The two-sided 95% quantile of Student's t with ``df`` ≥ 1 degrees of freedom."""
    if df < 1:
        raise ValueError(f"t975 needs at least 1 degree of freedom, got {df}")
    return T975[df - 1] if df <= len(T975) else Z975


def mean_sd_ci(values: Sequence[float]) -> dict:
    """``{"mean", "sd", "ci95": [low, high], "n"}`` of ``values`` (sd: sample, n − 1; ci95: Student's
    t). No values: every statistic None; one value: its mean, sd and ci95 None."""
    n = len(values)
    if n == 0:
        return {"mean": None, "sd": None, "ci95": None, "n": 0}
    mean = statistics.fmean(values)
    if n == 1:
        return {"mean": mean, "sd": None, "ci95": None, "n": 1}
    sd = statistics.stdev(values)
    half = t975(n - 1) * sd / math.sqrt(n)
    return {"mean": mean, "sd": sd, "ci95": [mean - half, mean + half], "n": n}


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def over_seeds(values: Sequence) -> dict:
    """One number over the seeds: ``{"values": [...]}`` (one per seed, None where a seed lacks it)
    plus :func:`mean_sd_ci` of the finite ones."""
    return {"values": list(values), **mean_sd_ci([float(v) for v in values if _finite(v)])}


def _stats(reports: Sequence[Mapping | None], keys: Sequence[str]) -> dict:
    """key -> :func:`over_seeds` for each of ``keys`` that some report has."""
    present = [k for k in keys if any(r is not None and k in r for r in reports)]
    return {k: over_seeds([None if r is None else r.get(k) for r in reports]) for k in present}


def gold_gain(reports: Sequence[Mapping | None], datas: Sequence[Mapping]) -> dict:
    """:func:`over_seeds` of each seed's gold minus that seed's SFT gold: the seed also sets the
    evaluation's sampling, so a policy is best compared with the SFT measured beside it."""
    gains = []
    for report, data in zip(reports, datas, strict=True):
        gold, sft = (report or {}).get("gold_score"), data.get("sft", {}).get("gold_score")
        gains.append(gold - sft if _finite(gold) and _finite(sft) else None)
    return over_seeds(gains)


def aggregate_compare(per_seed: Mapping[int, Mapping]) -> dict:
    """The aggregate compare.json of single-seed compare.json dicts (``per_seed``: seed -> its data).

    ``{"seeds", "samples_per_policy", "sft", "methods", "best_of_n", "rm"}``: ``sft`` and
    each of ``methods`` (label -> report, in the first seed's order) map every key of
    :data:`SFT_KEYS` / :data:`METHOD_KEYS` they have to :func:`over_seeds`; ``best_of_n`` rows keep
    ``n`` and ``kl_analytic`` (the same in every seed) and aggregate gold and proxy; methods and
    best-of-N rows also get ``gold_gain`` (:func:`gold_gain`); ``rm`` is the first seed's (one
    reward model serves every seed).
    """
    if not per_seed:
        raise ValueError("aggregate_compare needs at least one seed's compare.json")
    seeds = list(per_seed)
    datas = [per_seed[s] for s in seeds]
    labels: list[str] = []
    for data in datas:
        labels += [label for label in data.get("methods", {}) if label not in labels]
    methods = {}
    for label in labels:
        reports = [d.get("methods", {}).get(label) for d in datas]
        methods[label] = {**_stats(reports, METHOD_KEYS), "gold_gain": gold_gain(reports, datas)}
    best_of_n = []
    for row in datas[0].get("best_of_n", []):
        rows = [next((r for r in d.get("best_of_n", []) if r.get("n") == row["n"]), None) for d in datas]
        best_of_n.append({"n": row["n"], "kl_analytic": row.get("kl_analytic"), **_stats(rows, BEST_OF_N_KEYS),
                          "gold_gain": gold_gain(rows, datas)})
    return {"seeds": seeds, "samples_per_policy": datas[0].get("samples_per_policy"),
            "sft": _stats([d.get("sft") for d in datas], SFT_KEYS), "methods": methods, "best_of_n": best_of_n,
            "rm": datas[0].get("rm", {})}


__all__ = ["T975", "aggregate_compare", "gold_gain", "mean_sd_ci", "over_seeds", "t975"]
