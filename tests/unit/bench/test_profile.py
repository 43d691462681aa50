"""The update profile's arithmetic, on hand-made operator times."""

from __future__ import annotations

import math

import pytest

import threading

import torch

from tether.bench.profile import OpClock, matmul_flops, summarize_ops
from tether.engines.cpu.onednn import onednn_available


def test_summarize_ops_splits_matmul_from_the_rest():
    ops = {"aten::mm": 2.0, "aten::bmm": 0.5, "aten::mul": 0.7, "aten::_fused_adamw_": 0.3}
    out = summarize_ops(ops, update_s=4.0, update_gflop=250.0, top=2)
    assert out["matmul_s"] == 2.5
    assert out["matmul_gflops"] == 100.0  # 250 GFLOP in 2.5 s of matmul kernels
    assert out["non_matmul_s"] == 1.5
    assert out["matmul_share"] == 0.625
    assert out["top_ops_s"] == {"aten::mm": 2.0, "aten::mul": 0.7}


def test_summarize_ops_with_two_streams_counts_matmul_thread_seconds_once_per_core():
    # Two role threads, 1.5 s of wall update: 2.4 thread-seconds of matmul = 1.2 s per core.
    out = summarize_ops({"aten::mm": 2.4, "aten::mul": 0.6}, update_s=1.5, update_gflop=240.0, streams=2)
    assert out["matmul_s"] == pytest.approx(1.2)
    assert out["matmul_gflops"] == pytest.approx(200.0)
    assert out["non_matmul_s"] == pytest.approx(0.3)
    assert out["matmul_share"] == pytest.approx(0.8)
    assert out["streams"] == 2


def test_summarize_ops_rates_the_executed_matmul_flops_when_given():
    out = summarize_ops({"aten::mm": 2.0}, update_s=2.5, update_gflop=250.0, executed_gflop=180.0)
    assert out["matmul_gflops"] == 90.0  # 180 executed GFLOP in 2 s, not the 250 counted
    assert out["executed_matmul_gflop"] == 180.0 and out["counted_update_gflop"] == 250.0


def test_matmul_flops_by_hand():
    assert matmul_flops("aten::mm", [(4, 3), (3, 5)]) == 2 * 4 * 3 * 5
    assert matmul_flops("aten::addmm", [(5,), (4, 3), (3, 5)]) == 120
    assert matmul_flops("aten::bmm", [(2, 4, 3), (2, 3, 5)]) == 240
    assert matmul_flops("aten::baddbmm", [(2, 4, 5), (2, 4, 3), (2, 3, 5)]) == 240
    assert matmul_flops("aten::mul", [(4, 3), (4, 3)]) == 0
    # oneDNN linear: (M.., K) input, (N, K) weight -> 2·M·K·N, the weight possibly a transposed view.
    assert matmul_flops("mkldnn::_linear_pointwise", [(2, 4, 3), (5, 3)]) == 2 * 8 * 3 * 5
    assert matmul_flops("mkldnn::_linear_pointwise", [(8, 5), (3, 5)]) == 2 * 8 * 5 * 3


def test_op_clock_counts_a_linear_layers_flops():
    totals, flops = {}, {}
    layer = torch.nn.Linear(8, 6)
    x = torch.randn(5, 8, requires_grad=True)
    with OpClock(totals, threading.Lock(), flops):
        layer(x).sum().backward()
    # Forward 2·5·8·6, then the input's and the weight's gradients: 3× in all.
    assert sum(flops.values()) == 3 * 2 * 5 * 8 * 6
    assert totals.get("aten::addmm", 0) > 0


def test_summarize_ops_without_matmuls_has_no_rate():
    out = summarize_ops({"aten::mul": 1.0}, update_s=1.0, update_gflop=5.0)
    assert out["matmul_s"] == 0 and math.isnan(out["matmul_gflops"])


@pytest.mark.slow
def test_bench_profile_reports_matmul_time(capsys):
    import json

    from tether.cli import main

    assert main(["bench", "--size", "micro", "--iterations", "2", "--threads", "1", "--batch", "4",
                 "--response-length", "4", "--epochs", "1", "--profile"]) == 0
    prof = json.loads(capsys.readouterr().out)["profile"]
    assert 0 < prof["matmul_s"] < prof["update_s"]
    assert prof["matmul_gflops"] > 0 and 0 < prof["matmul_fraction_of_peak"]
    # Size micro's products are below cpu.linear_backend=onednn's threshold: all in aten.
    assert "aten::mm" in prof["top_ops_s"] or "aten::addmm" in prof["top_ops_s"]
    assert prof["executed_matmul_gflop"] > 0


@pytest.mark.skipif(not onednn_available(), reason="this torch build has no oneDNN")
def test_bench_profile_counts_onednn_products(capsys, monkeypatch):
    import json

    from tether.cli import main
    from tether.engines.cpu import onednn

    monkeypatch.setattr(onednn, "MIN_MACS", 0)  # micro's products are below the threshold
    assert main(["bench", "--size", "micro", "--iterations", "2", "--threads", "1", "--batch", "4",
                 "--response-length", "4", "--epochs", "1", "--profile", "--no-peak",
                 "cpu.linear_backend=onednn"]) == 0
    prof = json.loads(capsys.readouterr().out)["profile"]
    assert prof["top_ops_s"].get("mkldnn::_linear_pointwise", 0) > 0
    # Forward and input-gradient products in oneDNN, weight gradients in aten: both counted.
    assert prof["top_ops_s"].get("aten::mm", 0) > 0 and prof["executed_matmul_gflop"] > 0


def test_bench_profile_counts_aten_matmuls_with_the_aten_backend(capsys):
    import json

    from tether.cli import main

    assert main(["bench", "--size", "micro", "--iterations", "2", "--threads", "1", "--batch", "4",
                 "--response-length", "4", "--epochs", "1", "--profile", "--no-peak",
                 "cpu.linear_backend=aten"]) == 0
    report = json.loads(capsys.readouterr().out)
    prof = report["profile"]
    assert report["config"]["linear_backend"] == "aten"
    assert "mkldnn::_linear_pointwise" not in prof["top_ops_s"]
    assert "aten::mm" in prof["top_ops_s"] or "aten::addmm" in prof["top_ops_s"]
    assert prof["matmul_s"] > 0


@pytest.mark.slow
def test_bench_profile_sees_the_matmuls_of_the_role_threads(capsys):
    import json

    import torch

    from tether.cli import main

    before = torch.get_num_threads()
    try:
        assert main(["bench", "--size", "micro", "--iterations", "2", "--threads", "2", "--batch", "4",
                     "--response-length", "4", "--epochs", "1", "--profile", "--no-peak"]) == 0
    finally:
        torch.set_num_threads(before)
    report = json.loads(capsys.readouterr().out)
    prof = report["profile"]
    assert report["config"]["parallel_roles"] is True and prof["streams"] == 2
    # torch.profiler would see none of the workers' operators: the clock must see their matmuls.
    assert prof["matmul_s"] > 0 and prof["top_ops_s"].get("aten::mm", 0) > 0
