"""`tether bench` runs two iterations at a micro size and prints JSON with every key."""

from __future__ import annotations

import json

import pytest

from tether.cli import main

pytestmark = pytest.mark.slow


def test_bench_prints_valid_json(capsys):
    code = main(["bench", "--size", "micro", "--iterations", "2", "--threads", "1", "--batch", "4",
                 "--response-length", "4", "--epochs", "1"])
    assert code == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out)  # stdout is the JSON only; progress goes to stderr
    assert "iteration 2/2" in captured.err
    for key in ("iteration_s", "phases_s", "generated_tokens_per_s", "trained_tokens_per_s", "peak_rss_mb",
                "flops_gflop", "flops_real_tokens_gflop", "matmul_peak_gflops", "mfu_update",
                "mfu_update_real_tokens", "mfu_iteration", "first_iteration_s", "torch_threads", "versions"):
        assert key in report, key
    assert set(report["iteration_s"]) == {"median", "min", "max"}
    assert report["iteration_s"]["min"] <= report["iteration_s"]["median"] <= report["iteration_s"]["max"]
    for phase in ("generate", "ref_logprobs", "values", "reward", "advantages", "update_forward",
                  "update_backward", "update_optimizer", "other"):
        assert report["phases_s"][phase] >= 0, phase
    assert report["phases_s"]["update_forward"] > 0 and report["phases_s"]["update_optimizer"] > 0
    assert report["config"]["optimizer_steps"] == 2
    assert report["torch_threads"] == 1
    assert report["flops_gflop"]["update"] >= report["flops_real_tokens_gflop"]["update"] > 0
    assert report["matmul_peak_gflops"] > 0
    assert report["ratio_deviation_max"] < 1e-3
    assert report["page_faults_per_iteration"] >= 0
    assert set(report["config"]) >= {"linear_backend", "linear_backend_resolved", "retain_memory", "precision"}
    assert report["config"]["linear_backend_resolved"] in ("onednn", "aten")
    # The CPU is named: results compare only within one machine type.
    assert set(report["cpu"]) >= {"model", "vendor", "family_model_stepping", "flags", "logical_cpus", "capability"}
    assert report["cpu"]["logical_cpus"] >= 1


def test_bench_scaling_mode_prints_every_point(capsys, monkeypatch):
    import tether.bench.runner as runner

    monkeypatch.setattr(runner, "SCALING_LENGTHS", (2, 4))
    monkeypatch.setattr(runner, "SCALING_BATCHES", (2, 4))
    report = runner.run_scaling("micro", "fp32", epochs=1, threads=1, iterations=2,
                                lengths=runner.SCALING_LENGTHS, batches=runner.SCALING_BATCHES)
    json.dumps(report)
    assert set(report["response_length"]) == {"2", "4"} and set(report["batch"]) == {"2", "4"}
    assert all(v["iteration_s"] > 0 for v in report["response_length"].values())


def _fake_report(median, lo, hi, update, peak, mfu):
    return {"iteration_s": {"median": median, "min": lo, "max": hi}, "iterations_s": [lo, median, hi],
            "phases_s": {"update": update, "generate": 0.5}, "achieved_gflops": {"update": 10.0 * update},
            "matmul_peak_gflops": peak, "mfu_update": mfu, "peak_rss_mb": 100.0 * update,
            "ratio_deviation_max": 1e-7 * update, "cpu": {"load_avg_1m": 0.1}, "size": "small"}


def test_combine_runs_takes_medians_over_runs_and_extremes_over_iterations():
    from tether.bench.runner import combine_runs

    reports = [_fake_report(2.0, 1.9, 2.2, 1.0, 200.0, 0.5), _fake_report(3.0, 2.5, 3.5, 3.0, 100.0, 0.3),
               _fake_report(2.5, 2.4, 2.6, 2.0, 150.0, 0.4)]
    out = combine_runs(reports)
    assert out["iteration_s"] == {"median": 2.5, "min": 1.9, "max": 3.5}
    assert out["phases_s"] == {"update": 2.0, "generate": 0.5}
    assert out["achieved_gflops"]["update"] == 20.0
    assert out["matmul_peak_gflops"] == 150.0 and out["mfu_update"] == 0.4
    assert out["peak_rss_mb"] == 300.0 and out["ratio_deviation_max"] == 3e-7
    assert len(out["iterations_s"]) == 9 and len(out["runs"]) == 3
    assert [r["iteration_s"]["median"] for r in out["runs"]] == [2.0, 3.0, 2.5]


def test_bench_repeat_reports_every_run(capsys):
    code = main(["bench", "--size", "micro", "--iterations", "2", "--threads", "1", "--batch", "4",
                 "--response-length", "4", "--epochs", "1", "--repeat", "2", "--no-peak"])
    assert code == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert "run 2/2" in captured.err
    assert len(report["runs"]) == 2 and len(report["iterations_s"]) == 2
    medians = sorted(r["iteration_s"]["median"] for r in report["runs"])
    assert report["iteration_s"]["median"] == pytest.approx(sum(medians) / 2)
