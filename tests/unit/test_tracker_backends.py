"""The trackers' outside services (tether.common.services): which servers are checked before a run, and
the bound each library is given. Stand-ins replace wandb and MLflow's client here; the real
libraries against loopback servers are in tests/integration/test_unreachable_services.py."""

from __future__ import annotations

import os
import socket
import sys
import types

import pytest

from tether.common import services
from tether.common.errors import ConfigError
from tether.trackers import check_servers
from tether.trackers.backends import MLflowTracker, WandbTracker


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    monkeypatch.setenv(services.TIMEOUT_ENV, "3")
    for name in ("WANDB_INIT_TIMEOUT", "WANDB_MODE", "MLFLOW_TRACKING_URI", "MLFLOW_HTTP_REQUEST_TIMEOUT",
                 "MLFLOW_HTTP_REQUEST_MAX_RETRIES", "TRACKIO_SERVER_URL", "TRACKIO_SPACE_ID", "http_proxy",
                 "HTTP_PROXY"):
        monkeypatch.delenv(name, raising=False)
    yield
    for name in ("MLFLOW_HTTP_REQUEST_TIMEOUT", "MLFLOW_HTTP_REQUEST_MAX_RETRIES"):  # set by the tracker itself
        os.environ.pop(name, None)


def closed_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def fake_wandb(monkeypatch, mode: str = "online", base_url: str = "http://127.0.0.1:1") -> list[dict]:
    """A stand-in ``wandb``: ``setup().settings`` resolves to ``mode`` and ``base_url``; ``init``
    records its keyword arguments."""
    calls: list[dict] = []
    module = types.ModuleType("wandb")
    module.Settings = lambda **kw: types.SimpleNamespace(**kw)
    module.Error = type("Error", (Exception,), {})
    module.setup = lambda: types.SimpleNamespace(settings=types.SimpleNamespace(mode=mode, base_url=base_url))

    def init(**kwargs):
        calls.append(kwargs)
        return types.SimpleNamespace(id="run-1")

    module.init = init
    monkeypatch.setitem(sys.modules, "wandb", module)
    return calls


def open_wandb(tmp_path):
    return WandbTracker(out=tmp_path, project="p", name="n", stage="sft", config={})


def test_wandb_gets_the_bound_as_its_init_timeout_unless_the_user_set_one(monkeypatch, tmp_path):
    calls = fake_wandb(monkeypatch)
    open_wandb(tmp_path)
    assert calls[-1]["settings"].init_timeout == 3.0
    assert WandbTracker.service_note() == "W&B gets 3 s to start a run (WANDB_INIT_TIMEOUT, else TETHER_SERVICE_TIMEOUT_S)."
    monkeypatch.setenv("WANDB_INIT_TIMEOUT", "120")
    open_wandb(tmp_path)
    assert calls[-1]["settings"] is None  # W&B reads the user's WANDB_INIT_TIMEOUT itself
    assert WandbTracker.service_note().startswith("W&B gets 120 s")


def test_wandb_online_checks_its_host_offline_does_not(monkeypatch):
    url = closed_url()
    fake_wandb(monkeypatch, "online", url)
    with pytest.raises(ConfigError, match=rf"The W&B server at {url} \(WANDB_BASE_URL\) did not answer: .*refused.*"
                                          r"WANDB_MODE=offline.*3 s to answer \(TETHER_SERVICE_TIMEOUT_S\)"):
        check_servers(["tensorboard", "wandb"])
    for mode in ("offline", "disabled", "dryrun"):
        fake_wandb(monkeypatch, mode, url)
        check_servers(["wandb"])


def test_mlflow_checks_a_remote_uri_and_bounds_its_requests(monkeypatch, tmp_path):
    check_servers(["mlflow", "tensorboard"])  # no MLFLOW_TRACKING_URI: RUN/mlflow.db, nothing to reach
    url = closed_url()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", url)
    with pytest.raises(ConfigError, match=rf"MLflow tracking server at {url} \(MLFLOW_TRACKING_URI\)"):
        check_servers(["mlflow"])
    pytest.importorskip("mlflow")
    import mlflow.tracking

    seen = {}

    class Client:
        def __init__(self, tracking_uri):
            seen["env"] = {k: os.environ.get(k) for k in services.mlflow_env()}

        def get_experiment_by_name(self, name):
            return None

        def create_experiment(self, name, artifact_location=None):
            return "1"

        def create_run(self, experiment_id, run_name, tags):
            return types.SimpleNamespace(info=types.SimpleNamespace(run_id="r"))

        def log_batch(self, run_id, params=(), metrics=()):
            pass

    monkeypatch.setattr(mlflow.tracking, "MlflowClient", Client)
    MLflowTracker(out=tmp_path, project="p", name="n", stage="sft", config={"a": 1})
    assert seen["env"] == {"MLFLOW_HTTP_REQUEST_TIMEOUT": "3", "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2"}
    assert MLflowTracker.service_note() == ("Each MLflow request gets 3 s and 2 retries (MLFLOW_HTTP_REQUEST_TIMEOUT, "
                                            "MLFLOW_HTTP_REQUEST_MAX_RETRIES, else TETHER_SERVICE_TIMEOUT_S).")


def test_trackio_checks_its_server_without_naming_the_write_token(monkeypatch):
    url = closed_url()
    monkeypatch.setenv("TRACKIO_SERVER_URL", f"{url}/?write_token=secret")
    with pytest.raises(ConfigError, match=r"\(TRACKIO_SERVER_URL\) did not answer") as err:
        check_servers(["trackio"])
    assert "secret" not in str(err.value)
