"""Device and precision from config, and the rank helpers' one-process behaviour."""

from __future__ import annotations

import pytest
import torch

from tether.common.errors import ConfigError
from tether.common.runtime import Precision, all_reduce_mean, is_main, rank, rank_seed, resolve_device, world_size


def test_auto_is_cpu_without_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == torch.device("cpu")
    assert resolve_device("cpu") == torch.device("cpu")


def test_auto_is_cuda_with_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert resolve_device("auto") == torch.device("cuda")
    assert resolve_device("cuda:1") == torch.device("cuda", 1)
    with pytest.raises(ConfigError, match=r"'cuda:2', but this machine has 2 CUDA device"):
        resolve_device("cuda:2")


@pytest.mark.parametrize("spec", ["cuda", "cuda:0"])
def test_cuda_without_cuda_is_a_config_error(spec, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ConfigError) as info:
        resolve_device(spec)
    message = str(info.value)
    assert "run.device" in message and spec in message and "no CUDA device" in message and "\n" not in message


@pytest.mark.parametrize("spec", ["gpu", "cuda:x", "CPU", "", "cuda:-1"])
def test_misspelled_devices_are_refused(spec):
    with pytest.raises(ConfigError, match="expected auto, cpu, cuda, cuda:N or mps"):
        resolve_device(spec)


def test_mps_where_there_is_none(monkeypatch):
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    with pytest.raises(ConfigError, match="MPS"):
        resolve_device("mps")


def test_flags_are_named_as_flags(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ConfigError, match=r"^--device = 'cuda'"):
        resolve_device("cuda", "--device")


@pytest.mark.parametrize("name,autocast,dtype,scaler", [
    ("fp32", "none", None, False), ("bf16", "bf16", torch.bfloat16, False), ("fp16", "fp16", torch.float16, True)])
def test_precision_policy(name, autocast, dtype, scaler):
    p = Precision(name)
    assert (p.autocast, p.dtype, p.needs_scaler) == (autocast, dtype, scaler)
    x = torch.ones(2, 2)
    with p.context(torch.device("cpu")):
        out = x @ x
    assert out.dtype == (dtype or torch.float32)
    with pytest.raises(ConfigError):
        Precision("fp8")


def test_rank_helpers_in_one_process():
    assert (rank(), world_size(), is_main()) == (0, 1, True)
    x = torch.tensor([1.0, 3.0])
    assert torch.equal(all_reduce_mean(x), x)
    # Rank 0 of iteration i has the seed a one-process run always had.
    assert rank_seed(7, 3) == (7 * 1_000_003 + 3 * 7919) % (2**63 - 1)
    assert rank_seed(7, 3, rank_index=1) != rank_seed(7, 3, rank_index=0)
