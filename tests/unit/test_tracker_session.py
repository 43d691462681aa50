"""Trackers: opened with the run directory and handed over with it (RunDir), fed by the
MetricsLogger built on it, closed (failed or not) by the stage's guard; numbers only; the ids a
resumed run continues. Fake backends stand in for the
libraries here (tests/integration/test_trackers.py runs the real ones)."""

from __future__ import annotations

import json

import pytest

import tether.trackers as trackers
from tether.config import SFTConfig, from_dict
from tether.common.errors import ConfigError
from tether.metrics import MetricsLogger
from tether.runs import RunDir, guarded_run, prepare_run_dir, removed_on_early_failure


class FakeBackend:
    opened: list["FakeBackend"] = []

    def __init__(self, out, project, name, stage, config, resume_id=None):
        self.args = dict(out=out, project=project, name=name, stage=stage, config=config, resume_id=resume_id)
        self.run_id = resume_id or f"id-{len(FakeBackend.opened)}"
        self.logged, self.tables, self.closed = [], [], None
        FakeBackend.opened.append(self)

    def log(self, step, metrics):
        self.logged.append((step, metrics))

    def log_table(self, name, step, rows):
        self.tables.append((name, step, rows))

    def close(self, failed=False):
        self.closed = "failed" if failed else "finished"


@pytest.fixture
def fake(monkeypatch):
    from tether.trackers import backends

    FakeBackend.opened = []
    monkeypatch.setattr(backends, "BACKENDS", {"wandb": FakeBackend})
    monkeypatch.setattr(trackers, "check_installed", lambda names: None)
    return FakeBackend.opened


def cfg_for(out, **run):
    return from_dict(SFTConfig, {"model": {"name_or_path": "m"}, "data": {"train": "t"},
                                 "run": {"out": str(out), "report_to": ["wandb"], **run}})


def test_metrics_logger_feeds_the_run_dirs_trackers_numbers_only(fake, tmp_path):
    out = tmp_path / "run"
    with removed_on_early_failure():  # guarded_run's guard: it closes what the run directory opened
        run_dir = prepare_run_dir(out, cfg_for(out, project="p"), "sft")
        (backend,) = fake
        assert isinstance(run_dir, RunDir) and run_dir == out and run_dir.trackers.backends == [backend]
        with MetricsLogger(run_dir, "sft") as logger:
            logger.log(3, {"train/loss": 1.5, "n": 2, "flag": True, "bad": float("nan"), "text": "x"})
            logger.log_table("samples", 3, [{"prompt": "a", "score": 0.5}])
        assert backend.args["project"] == "p" and backend.args["name"] == "run"
        assert backend.args["config"]["stage"] == "sft" and backend.args["config"]["optim"]["lr"] == 1e-5
        assert backend.closed is None  # the logger does not own them
    assert backend.logged == [(3, {"train/loss": 1.5, "n": 2.0})]  # bools, NaN and strings stay in metrics.jsonl
    assert backend.tables == [("samples", 3, [{"prompt": "a", "score": 0.5}])]
    assert backend.closed == "finished"
    row = json.loads((out / "metrics.jsonl").read_text())
    assert row["bad"] == "nan" and row["flag"] is True  # the file keeps everything


def test_trackers_are_passed_not_looked_up(fake, tmp_path):
    """A logger reaches only the trackers it is given (or its RunDir's): none by directory name."""
    opened = trackers.open_trackers(tmp_path, cfg_for(tmp_path), "sft", resume=False)
    with MetricsLogger(tmp_path, "sft") as plain:  # the same directory as a plain path: no trackers
        plain.log(1, {"a": 1.0})
    with MetricsLogger(tmp_path, "sft", trackers=opened) as given:
        given.log(2, {"a": 2.0})
    assert fake[0].logged == [(2, {"a": 2.0})]
    assert RunDir(tmp_path).trackers is None and (RunDir(tmp_path) / "x").trackers is None
    opened.close()
    opened.close()  # once only
    assert fake[0].closed == "finished"


def test_a_failing_stage_closes_its_trackers_as_failed(fake, tmp_path):
    @guarded_run
    def stage(cfg):
        prepare_run_dir(cfg.run.out, cfg, "sft")
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        stage(cfg_for(tmp_path / "run"))
    assert fake[0].closed == "failed"
    assert not (tmp_path / "run").exists()  # nothing resumable was written: the start is taken back


def test_resume_reuses_the_tracker_run_ids(fake, tmp_path):
    trackers.open_trackers(tmp_path, cfg_for(tmp_path), "sft", resume=False).close(failed=True)
    assert json.loads((tmp_path / "trackers.json").read_text()) == {"wandb": "id-0"}
    trackers.open_trackers(tmp_path, cfg_for(tmp_path), "sft", resume=True).close()
    assert fake[1].args["resume_id"] == "id-0" and fake[1].closed == "finished"
    trackers.open_trackers(tmp_path, cfg_for(tmp_path), "sft", resume=False)  # a fresh run: a new tracker run
    assert fake[2].args["resume_id"] is None


def test_no_trackers_asked_for_opens_nothing(fake, tmp_path):
    cfg = from_dict(SFTConfig, {"model": {"name_or_path": "m"}, "data": {"train": "t"}})
    assert trackers.open_trackers(tmp_path, cfg, "sft", resume=False) is None
    assert not fake and not (tmp_path / "trackers.json").exists()


def test_a_tracker_that_cannot_start_is_one_paragraph(monkeypatch, tmp_path):
    from tether.trackers import backends

    def broken(**kwargs):
        raise OSError("permission denied:\n  /nowhere")

    monkeypatch.setattr(backends, "BACKENDS", {"wandb": broken})
    monkeypatch.setattr(trackers, "check_installed", lambda names: None)
    with pytest.raises(ConfigError, match=r"run.report_to': wandb could not start a run for .*: permission denied: /nowhere"):
        trackers.open_trackers(tmp_path, cfg_for(tmp_path), "sft", resume=False)


def test_a_missing_package_names_it(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "trackio" else real(name, *a))
    with pytest.raises(ConfigError, match=r"asks for trackio.*`pip install trackio`"):
        trackers.check_installed(["tensorboard", "trackio"])
    # A saved config naming a tracker still loads (a Ray worker, a resumed run's directory check).
    from_dict(SFTConfig, {"model": {"name_or_path": "m"}, "data": {"train": "t"}, "run": {"report_to": ["trackio"]}})
