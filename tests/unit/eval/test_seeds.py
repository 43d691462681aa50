"""Statistics over seeds: mean, sample sd and Student-t 95% interval by hand, the t table against
an independent integration, and the aggregate of hand-built single-seed compare.json dicts."""

from __future__ import annotations

import math

import pytest

from tether.eval.seeds import T975, aggregate_compare, gold_gain, mean_sd_ci, over_seeds, t975


def test_mean_sd_ci_by_hand() -> None:
    s = mean_sd_ci([1.0, 2.0, 3.0])  # mean 2; sd sqrt(((-1)^2 + 0 + 1^2) / 2) = 1
    assert s["n"] == 3 and s["mean"] == pytest.approx(2.0) and s["sd"] == pytest.approx(1.0)
    half = 4.302653 / math.sqrt(3)  # t(0.975, 2) * sd / sqrt(n) = 2.484138
    assert s["ci95"] == pytest.approx([2.0 - half, 2.0 + half], abs=1e-6)
    assert s["ci95"][1] == pytest.approx(4.484138, abs=1e-6)
    two = mean_sd_ci([0.1, 0.3])  # mean 0.2; sd sqrt(2 * 0.01 / 1) = 0.141421; half = 12.706205 * 0.1
    assert two["sd"] == pytest.approx(0.1414214, abs=1e-7)
    assert two["ci95"] == pytest.approx([0.2 - 1.2706205, 0.2 + 1.2706205], abs=1e-6)


def test_one_value_has_no_spread_and_none_has_nothing() -> None:
    assert mean_sd_ci([0.5]) == {"mean": 0.5, "sd": None, "ci95": None, "n": 1}
    assert mean_sd_ci([]) == {"mean": None, "sd": None, "ci95": None, "n": 0}
    assert mean_sd_ci([2.0, 2.0])["ci95"] == [2.0, 2.0]  # no spread: a zero-width interval


def _t_cdf_upper_half(q: float, df: int, steps: int = 4000) -> float:
    """P(0 < T < q) for Student's t by Simpson's rule on its density (independent of the table)."""
    c = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi)
    f = [c * (1 + (q * i / steps) ** 2 / df) ** (-(df + 1) / 2) for i in range(steps + 1)]
    return q / steps / 3 * (f[0] + f[-1] + 4 * sum(f[1:-1:2]) + 2 * sum(f[2:-1:2]))


@pytest.mark.parametrize("df", range(1, 31))
def test_the_t_table_is_the_975_quantile(df) -> None:
    assert _t_cdf_upper_half(t975(df), df) == pytest.approx(0.475, abs=2e-6)


def test_t975_edges() -> None:
    assert len(T975) == 30 and t975(2) == 4.302653 and t975(30) == 2.042272
    assert t975(31) == t975(1000) == pytest.approx(1.96, abs=1e-4)  # the normal beyond the table
    with pytest.raises(ValueError, match="degree of freedom"):
        t975(0)


def test_over_seeds_keeps_every_seed_and_skips_missing_values() -> None:
    s = over_seeds([1.0, None, 3.0, "nan"])
    assert s["values"] == [1.0, None, 3.0, "nan"] and s["n"] == 2 and s["mean"] == 2.0
    assert s["sd"] == pytest.approx(math.sqrt(2))


def single_seed(seed: int, gold: float, kl: float) -> dict:
    """A single-seed compare.json's data as compare.py's ``measure`` writes it (fewer keys)."""
    return {
        "sft": {"gold_score": -0.37, "proxy_score": -0.35 + seed / 100, "kl": 0.0, "accuracy": 0.43,
                "spurious_rate": 0.29, "entropy": 0.8, "length_mean": 9.0, "eos_rate": 1.0},
        "methods": {
            "ppo": {"gold_score": gold, "proxy_score": 1.0, "kl": kl, "win_rate_gold": 0.6, "win_rate_proxy": 0.8,
                    "time_s": 100.0 + seed, "peak_rss_mb": 600.0, "exit_code": 0, "generated_tokens": 90_000,
                    "trajectory": [{"step": 50, "gold_score": 0.0, "proxy_score": 0.5, "kl": 0.6},
                                   {"step": "final", "gold_score": gold, "proxy_score": 1.0, "kl": kl}]},
            "dpo": {"gold_score": gold / 2, "proxy_score": 0.3, "kl": kl, "win_rate_gold": 0.55, "time_s": 90.0,
                    "peak_rss_mb": 580.0, "generated_tokens": 0, "implicit_reward_accuracy": 0.7 + seed / 100,
                    "implicit_reward_margin": 0.3, "trajectory": []},
        },
        "best_of_n": [{"n": 1, "kl_analytic": 0.0, "proxy_score": -0.4, "gold_score": -0.4},
                      {"n": 2, "kl_analytic": 0.193147, "proxy_score": 0.3 + seed / 10, "gold_score": -0.1}],
        "rm": {"eval_accuracy": 0.804, "eval_margin": 1.461},
        "samples_per_policy": 512, "seed": seed,
    }


def test_aggregate_of_three_seeds_by_hand() -> None:
    data = aggregate_compare({0: single_seed(0, 0.1, 1.2), 1: single_seed(1, 0.2, 1.4), 2: single_seed(2, 0.3, 1.3)})
    assert data["seeds"] == [0, 1, 2] and data["samples_per_policy"] == 512 and data["rm"]["eval_accuracy"] == 0.804
    assert list(data["methods"]) == ["ppo", "dpo"]
    gold = data["methods"]["ppo"]["gold_score"]
    assert gold["values"] == [0.1, 0.2, 0.3] and gold["n"] == 3
    assert gold["mean"] == pytest.approx(0.2) and gold["sd"] == pytest.approx(0.1)
    assert gold["ci95"] == pytest.approx([0.2 - 0.4302653 / math.sqrt(3), 0.2 + 0.4302653 / math.sqrt(3)])
    assert data["methods"]["ppo"]["kl"]["mean"] == pytest.approx(1.3)
    assert data["methods"]["ppo"]["time_s"]["mean"] == pytest.approx(101.0)
    assert data["methods"]["ppo"]["peak_rss_mb"]["sd"] == 0.0
    assert "trajectory" not in data["methods"]["ppo"] and "exit_code" not in data["methods"]["ppo"]
    assert "win_rate_proxy" not in data["methods"]["dpo"]  # a key no seed has is left out
    assert data["methods"]["dpo"]["implicit_reward_accuracy"]["mean"] == pytest.approx(0.71)
    assert data["sft"]["proxy_score"]["values"] == pytest.approx([-0.35, -0.34, -0.33])
    assert set(data["sft"]) == {"gold_score", "proxy_score", "kl", "accuracy", "spurious_rate"}
    assert [r["n"] for r in data["best_of_n"]] == [1, 2] and data["best_of_n"][1]["kl_analytic"] == 0.193147
    assert data["best_of_n"][1]["proxy_score"]["mean"] == pytest.approx(0.4)
    assert data["best_of_n"][1]["proxy_score"]["sd"] == pytest.approx(0.1)


def test_aggregate_with_a_method_missing_from_one_seed() -> None:
    second = single_seed(1, 0.2, 1.4)
    del second["methods"]["dpo"]
    data = aggregate_compare({0: single_seed(0, 0.1, 1.2), 1: second})
    assert data["methods"]["dpo"]["gold_score"]["values"] == [0.05, None]
    assert data["methods"]["dpo"]["gold_score"]["n"] == 1 and data["methods"]["dpo"]["gold_score"]["sd"] is None
    with pytest.raises(ValueError, match="at least one seed"):
        aggregate_compare({})


def test_gold_gain_is_each_seeds_gold_minus_that_seeds_sft():
    # Seeds measure SFT at -0.4 and -0.2: a policy at +0.1 and +0.3 gains +0.5 both times (sd 0).
    datas = [{"sft": {"gold_score": -0.4}}, {"sft": {"gold_score": -0.2}}]
    gain = gold_gain([{"gold_score": 0.1}, {"gold_score": 0.3}], datas)
    assert gain["values"] == pytest.approx([0.5, 0.5]) and gain["sd"] == pytest.approx(0.0)
    missing = gold_gain([None, {"gold_score": 0.3}], datas)
    assert missing["values"][0] is None and missing["n"] == 1 and missing["mean"] == pytest.approx(0.5)
    data = aggregate_compare({0: {**datas[0], "methods": {"x": {"gold_score": 0.1}}},
                              1: {**datas[1], "methods": {"x": {"gold_score": 0.3}}}})
    assert data["methods"]["x"]["gold_gain"]["mean"] == pytest.approx(0.5)
