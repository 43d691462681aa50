"""The GPU suite (docs/gpu.md): every test here is marked ``gpu`` and skipped with the reason
"no CUDA device" where ``torch.cuda.is_available()`` is false, so ``pytest -m gpu --collect-only``
lists them anywhere and ``make test`` skips them in milliseconds on a CPU machine.

The models are built here, at random init and tiny shapes (no hub): a Qwen2 and a Llama with
grouped-query attention, over the tiny arith task's tokenizer (tests/conftest.py's ``tiny_task``,
which also gives the data files every stage reads). ``TETHER_GPU_SUITE_DEVICE=cpu`` runs the suite
on the CPU instead (a check of the tests' own logic; gpu_helpers.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from gpu_helpers import ON_CUDA, build_model, device_ready

HERE = Path(__file__).resolve().parent
NO_CUDA = "no CUDA device"


def cuda() -> bool:
    return ON_CUDA and torch.cuda.is_available()


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Mark this folder's tests ``gpu`` (before ``-m`` selects) and skip them without CUDA."""
    skip = None if device_ready() else pytest.mark.skip(reason=NO_CUDA)
    for item in items:
        if HERE in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.gpu)
            if skip is not None:
                item.add_marker(skip)


@pytest.fixture(autouse=True)
def fresh_peak():
    """Each test starts with the device's peak-memory counter reset and its cache emptied."""
    if cuda():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    yield


@pytest.fixture(scope="session")
def gpu_task(tiny_task, tmp_path_factory) -> dict:
    """The tiny task's files and random-init Qwen2 / Llama checkpoints over its tokenizer:
    {"task", "qwen2", "llama", "tokenizer"}. Built on the CPU (no device needed to collect)."""
    from tether.models import load_tokenizer

    task = tiny_task["dir"]
    root = tmp_path_factory.mktemp("gpu-models")
    tokenizer = load_tokenizer(str(task / "base_model"))
    return {"task": task, "tokenizer": tokenizer,
            "qwen2": build_model("qwen2", tokenizer, root / "qwen2"),
            "llama": build_model("llama", tokenizer, root / "llama")}
