"""``cpu.linear_backend=auto``: the backend each CPU vendor measured faster with, applied by make_roles."""

from __future__ import annotations

import pytest
import torch

from tether.bench.runner import bench_overrides
from tether.bench.setup import SIZES, build_setup
from tether.config import RLConfig, load_config
from tether.engines.cpu import onednn
from tether.engines.cpu.onednn import OneDNNLinear, onednn_available, resolve_backend
from tether.roles.build import make_roles


def test_auto_follows_the_measured_vendor_and_precision_table(monkeypatch):
    monkeypatch.setattr(onednn, "onednn_available", lambda: True)  # the table, whatever this build
    assert resolve_backend("auto", "none", vendor="AuthenticAMD") == "onednn"
    assert resolve_backend("auto", "bf16", vendor="AuthenticAMD") == "onednn"
    assert resolve_backend("auto", "none", vendor="GenuineIntel") == "aten"
    assert resolve_backend("auto", "bf16", vendor="GenuineIntel") == "onednn"
    for vendor in ("ARM", "", "HygonGenuine"):  # never measured: PyTorch's default
        assert resolve_backend("auto", "bf16", vendor=vendor) == "aten"
    # Explicit choices are kept whatever the CPU.
    assert resolve_backend("onednn", vendor="GenuineIntel") == "onednn"
    assert resolve_backend("aten", "bf16", vendor="AuthenticAMD") == "aten"


def test_onednn_falls_back_to_aten_without_the_kernels(monkeypatch, caplog):
    monkeypatch.setattr(onednn, "onednn_available", lambda: False)
    with caplog.at_level("WARNING", logger="tether.engines.cpu.onednn"):
        assert resolve_backend("onednn") == "aten"
    assert "no oneDNN" in caplog.text  # asked for explicitly: said so
    caplog.clear()
    with caplog.at_level("WARNING", logger="tether.engines.cpu.onednn"):
        assert resolve_backend("auto", "bf16", vendor="AuthenticAMD") == "aten"
    assert caplog.text == ""  # auto falls back quietly


def test_an_unknown_backend_is_a_clear_error():
    with pytest.raises(ValueError, match="'auto', 'onednn' or 'aten'"):
        resolve_backend("mkl")


def test_the_default_is_auto():
    assert load_config(RLConfig, None, bench_overrides(4, 4, 1, 1, "fp32")).cpu.linear_backend == "auto"


# Deliberate skip: without oneDNN kernels use_onednn_linears switches nothing, whatever the table says.
@pytest.mark.skipif(not onednn_available(), reason="this torch build has no oneDNN")
@pytest.mark.parametrize("vendor, precision, uses_onednn", [("AuthenticAMD", "fp32", True), ("GenuineIntel", "fp32", False),
                                                     ("GenuineIntel", "bf16", True)])
def test_make_roles_switches_the_linears_the_table_calls_for(monkeypatch, vendor, precision, uses_onednn):
    import tether.engines.cpu.describe as cpu

    monkeypatch.setattr(cpu, "cpu_vendor", lambda: vendor)
    cfg = load_config(RLConfig, None, bench_overrides(4, 4, 1, 1, precision))
    m = build_setup(SIZES["micro"], n_prompts=4, seed=0).models
    make_roles(cfg, m["policy"], m["reference"], m["critic"], m["reward"], None)
    for name in ("policy", "reference", "critic", "reward"):
        kinds = {type(mod) for mod in m[name].modules() if isinstance(mod, torch.nn.Linear)}
        assert kinds == ({OneDNNLinear} if uses_onednn else {torch.nn.Linear}), (name, kinds)
