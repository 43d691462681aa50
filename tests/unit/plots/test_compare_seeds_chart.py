"""`tether compare --seeds N`'s table and chart from an aggregate built from hand-made seeds."""

from __future__ import annotations

from tether.eval.seeds import aggregate_compare
from tether.plots.compare_seeds import compare_seeds_plot, compare_seeds_table

PNG = b"\x89PNG\r\n\x1a\n"


def seed_data(gold: float, kl: float) -> dict:
    """A single-seed compare.json's data, cut to what the table and chart read."""
    return {"sft": {"gold_score": -0.37, "proxy_score": -0.35, "kl": 0.0},
            "methods": {"grpo": {"gold_score": gold, "proxy_score": 0.9, "kl": kl, "win_rate_gold": 0.67,
                                 "time_s": 80.0 + 10 * kl, "peak_rss_mb": 607.0},
                        "dpo": {"gold_score": 0.06, "proxy_score": 0.36, "kl": 1.29, "implicit_reward_accuracy": 0.75}},
            "best_of_n": [{"n": 1, "kl_analytic": 0.0, "gold_score": -0.40, "proxy_score": -0.43},
                          {"n": 8, "kl_analytic": 1.20, "gold_score": 0.42 + gold / 10, "proxy_score": 1.24}],
            "rm": {"eval_accuracy": 0.804}, "samples_per_policy": 512}


def aggregate(n: int = 3) -> dict:
    golds, kls = (0.1, 0.2, 0.3), (1.2, 1.4, 1.3)
    return aggregate_compare({s: seed_data(golds[s], kls[s]) for s in range(n)})


def test_the_table_has_mean_sd_and_the_interval() -> None:
    table = compare_seeds_table(aggregate())
    # GRPO gold: mean 0.2, sd 0.1, 95% CI 0.2 ± 4.302653 * 0.1 / sqrt(3) = [-0.048, +0.448]
    assert "| GRPO | 3 | +0.200 ± 0.100 | [-0.048, +0.448] |" in table
    # Gained over each seed's SFT (-0.37): mean 0.57, sd 0.1, 95% CI [0.322, 0.818]
    assert "| [-0.048, +0.448] | +0.570 ± 0.100 | [+0.322, +0.818] |" in table
    assert "| 1.30 ± 0.10 | [1.05, 1.55] |" in table  # KL: mean 1.3, sd 0.1
    assert "| 0.670 ± 0.000 | 93 ± 1 s | 607 ± 0 MB |" in table  # wall time 92, 94, 93 s
    assert "| SFT | 3 | -0.370 ± 0.000 | [-0.370, -0.370] |" in table
    assert "| best-of-8 of SFT | 3 | +0.440 ± 0.010 |" in table and "1.20 (analytic)" in table
    assert "Seeds 0, 1, 2" in table and "seed0/, seed1/, seed2/" in table and "t(0.975, n − 1)" in table
    assert "DPO's implicit reward 0.750 ± 0.000" in table


def test_one_seed_has_no_sd_or_interval() -> None:
    table = compare_seeds_table(aggregate(1))
    assert "| GRPO | 1 | +0.100 ± — | — |" in table
    assert "With one seed there is no sd and no interval" in table


def test_the_chart_is_written(tmp_path) -> None:
    for n in (1, 3):
        path = compare_seeds_plot(aggregate(n), tmp_path / f"seeds{n}.png")
        data = path.read_bytes()
        assert data[:8] == PNG and len(data) > 10_000
    missing = aggregate()
    missing["methods"]["grpo"]["kl"] = {"values": [None, None, None], "mean": None, "sd": None, "ci95": None, "n": 0}
    assert compare_seeds_plot(missing, tmp_path / "missing.png").is_file()
