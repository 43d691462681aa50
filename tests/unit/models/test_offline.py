"""Names that cannot be found fail at once when the hub cannot be reached (docs/reliability.md,
first new-user trial, class 6): a mistyped relative path used to be tried as a hub id, with ~45
lines of retry warnings and ~50 s before the clean error."""

from __future__ import annotations

import time

import pytest

from tether.data.records import load_records
from tether.common.errors import DataError, ModelError
from tether.models import load_causal_lm, load_scalar_model, load_tokenizer
from tether.models import loading


@pytest.fixture
def unreachable_hub(monkeypatch):
    """No HF_HUB_OFFLINE, and a hub endpoint that refuses connections: what a machine without a
    network looks like to tether (whatever network the test machine has)."""
    from huggingface_hub import constants

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setattr(loading, "_HUB_REACHABLE", {})


@pytest.mark.parametrize("name,local", [
    ("./x", True), ("/abs/x", True), ("~/x", True), ("a/b/c", True), ("runs/nope", True),
    ("Qwen/Qwen2.5-0.5B", False), ("gpt2", False), ("org\\name", True),
])
def test_looks_local(name, local, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()  # `runs/nope` is a path here because ./runs exists
    assert loading.looks_local(name) is local


def test_hub_offline_detects_an_unreachable_hub(unreachable_hub):
    t0 = time.perf_counter()
    assert loading.hub_offline()
    assert time.perf_counter() - t0 < 2.0


def test_hub_offline_env(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert loading.hub_offline()


@pytest.mark.parametrize("loader", [load_tokenizer, load_causal_lm, load_scalar_model])
def test_hub_id_fails_at_once_without_a_hub(loader, unreachable_hub, capfd):
    t0 = time.perf_counter()
    with pytest.raises(ModelError) as info:
        loader("no-such-org-xyz/no-such-model", key="model.name_or_path")
    assert time.perf_counter() - t0 < 10.0  # was ~25 s per file of retries
    message = str(info.value)
    assert "no-such-org-xyz/no-such-model" in message and "(model.name_or_path)" in message
    assert "cannot be reached" in message and "\n" not in message
    assert "retry" not in capfd.readouterr().err.lower()


def test_missing_relative_path_is_not_tried_on_the_hub(unreachable_hub, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    with pytest.raises(ModelError, match="'runs/nope' \\(model.name_or_path\\) does not exist"):
        load_causal_lm("runs/nope", key="model.name_or_path")


def test_hub_dataset_fails_at_once_without_a_hub(unreachable_hub, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    t0 = time.perf_counter()
    with pytest.raises(DataError) as info:
        load_records("no-such-org-xyz/no-such-data", key="data.train")
    assert time.perf_counter() - t0 < 10.0
    assert "(data.train)" in str(info.value) and "cannot be reached" in str(info.value)
    (tmp_path / "data").mkdir()
    with pytest.raises(DataError, match="no such file"):
        load_records("data/nope", key="data.train")  # ./data exists: a missing file, not a hub dataset
