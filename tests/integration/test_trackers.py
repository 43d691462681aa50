"""run.report_to, for real and offline: each tracker's stored metrics read back with its own reader
equal metrics.jsonl, name for name and step for step; PPO's samples reach the trackers' tables.

TensorBoard: EventAccumulator. W&B: WANDB_MODE=offline, the run file in RUN/wandb. MLflow: its
local SQLite store RUN/mlflow.db through MlflowClient. trackio: its local database (TRACKIO_DIR).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from stage_helpers import sft_overrides
from test_distributed import ppo_args
from tracker_readers import (
    jsonl_metrics,
    mlflow_run,
    tensorboard_metrics,
    trackio_logs,
    wandb_history,
)

pytestmark = pytest.mark.slow

ALL = "run.report_to=[tensorboard,wandb,mlflow,trackio]"


def tracker_env(tmp: Path) -> dict:
    """Offline trackers whose files stay under ``tmp``."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline",
           "WANDB_CONFIG_DIR": str(tmp / "wandb-config"), "WANDB_CACHE_DIR": str(tmp / "wandb-cache"),
           "WANDB_DATA_DIR": str(tmp / "wandb-data"), "TRACKIO_DIR": str(tmp / "trackio")}
    env.pop("MLFLOW_TRACKING_URI", None)
    return env


def tether(args: list[str], env: dict, timeout: float = 300, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tether.cli", *args], capture_output=True, text=True, env=env,
                          timeout=timeout, cwd=cwd)


def assert_same(stored: dict, expected: dict, tracker: str, rel: float = 1e-6) -> None:
    """Every metrics.jsonl (step, name) is in ``stored`` with its value (float32 trackers: ``rel``)."""
    missing = sorted(set(expected) - set(stored))
    assert not missing, f"{tracker} lacks {len(missing)} of {len(expected)} metrics, e.g. {missing[:5]}"
    for key, value in expected.items():
        assert stored[key] == pytest.approx(value, rel=rel, abs=1e-7), f"{tracker} {key}: {stored[key]} != {value}"


def assert_same_rows(rows: list[dict], expected: list[dict]) -> None:
    assert len(rows) == len(expected)
    for row, want in zip(rows, expected):
        assert row.keys() == want.keys()
        for key, value in want.items():
            same = row[key] == pytest.approx(value, rel=1e-9) if isinstance(value, float) else row[key] == value
            assert same, f"{key}: {row[key]!r} != {value!r}"


def check_every_tracker(run: Path, trackio_dir: Path, name: str) -> dict:
    expected = jsonl_metrics(run)
    assert len(expected) > 20
    scalars, texts = tensorboard_metrics(run)
    assert_same(scalars, expected, "tensorboard", rel=1e-6)  # event files hold float32
    assert set(k for k in scalars) == set(expected)  # nothing else logged, no name changed
    wandb_metrics, wandb_tables, wandb_config = wandb_history(run)
    assert_same(wandb_metrics, expected, "wandb", rel=1e-12)
    assert wandb_config["stage"] == json.loads(json.dumps(wandb_config["stage"]))
    client, mlflow_info, mlflow_metrics = mlflow_run(run)
    assert_same(mlflow_metrics, expected, "mlflow", rel=1e-12)
    assert mlflow_info.info.status == "FINISHED" and mlflow_info.info.run_name == name
    logs = trackio_logs(trackio_dir, "tether", name)
    trackio_metrics = {(row["step"], k): v for row in logs for k, v in row.items()
                       if isinstance(v, (int, float)) and k != "step"}
    assert_same(trackio_metrics, expected, "trackio", rel=1e-12)
    ids = json.loads((run / "trackers.json").read_text())
    assert ids["mlflow"] == mlflow_info.info.run_id and set(ids) == {"wandb", "mlflow", "trackio"}
    return {"texts": texts, "wandb_tables": wandb_tables, "wandb_config": wandb_config, "mlflow": (client, mlflow_info),
            "trackio": logs}


def test_sft_metrics_reach_every_tracker(tiny_task, tmp_path):
    out = tmp_path / "sft-run"
    env = tracker_env(tmp_path)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    proc = tether(["sft", *sft_overrides(tiny_task["dir"], out, ALL, "max_steps=6")], env, cwd=cwd)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert not list(cwd.iterdir()), list(cwd.iterdir())
    json.loads(proc.stdout)  # the trackers print nothing on stdout: the result stays parseable
    got = check_every_tracker(out, tmp_path / "trackio", "sft-run")
    assert got["wandb_config"]["optim"]["lr"] == 0.001 and got["wandb_config"]["stage"] == "sft"
    client, info = got["mlflow"]
    assert info.data.params["optim.lr"] == "0.001" and info.data.tags["tether.stage"] == "sft"


def test_ppo_metrics_and_samples_reach_every_tracker(trained, tmp_path):
    out = tmp_path / "ppo-run"
    # A KL floor of 100 nats from iteration 1 on: the kl_barely_moved rule fires, so alarms reach the tables too.
    alarm = ("health.warmup_iters=0", "health.kl_low=100", "health.kl_low_after=0", "health.kl_healthy_high=100",
             "health.kl_drift=200", "health.kl_catastrophic=300")
    cwd = tmp_path / "cwd"  # every tracker writes under RUN, TRACKIO_DIR or its W&B dirs, never here
    cwd.mkdir()
    proc = tether(ppo_args(trained, out, ALL, "rl.iterations=2", "run.name=my-ppo", "run.project=tether", *alarm),
                  tracker_env(tmp_path), cwd=cwd)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert not list(cwd.iterdir()), list(cwd.iterdir())
    got = check_every_tracker(out, tmp_path / "trackio", "my-ppo")
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    first = [s for s in samples if s["iteration"] == 1]
    assert first
    # TensorBoard: a Markdown table per logged iteration, holding the sampled responses.
    assert {(1, "samples/text_summary"), (2, "samples/text_summary")} <= set(got["texts"])
    assert first[0]["response"].replace("|", "\\|").replace("\n", " ") in got["texts"][(1, "samples/text_summary")]
    # W&B: a table file per logged iteration.
    assert {1, 2} == {step for step, name in got["wandb_tables"] if name == "samples"}
    assert got["wandb_tables"][(1, "samples")] == first
    # MLflow: a JSON artifact per logged iteration, with the rows as written to samples.jsonl.
    client, info = got["mlflow"]
    assert (out / "mlartifacts").is_dir()  # MLflow's artifacts stay in the run directory
    path = client.download_artifacts(info.info.run_id, "samples/step_1.json", str(tmp_path))
    table = json.loads(Path(path).read_text())
    assert_same_rows([dict(zip(table["columns"], row)) for row in table["data"]], first)  # 10 significant digits
    # trackio: the table in the step's log row.
    rows = [row for row in got["trackio"] if "samples" in row]
    assert [row["step"] for row in rows] == [1, 2]
    assert first[0]["prompt"] in json.dumps(rows[0]["samples"])
    # Health alarms: alarms.jsonl's rows, as a table at their iteration.
    alarms = [json.loads(line) for line in (out / "alarms.jsonl").read_text().splitlines()]
    assert any(a["name"] == "kl_barely_moved" for a in alarms)
    step = alarms[0]["iteration"]
    cells = [{k: json.dumps(v) if isinstance(v, dict) else v for k, v in a.items()} for a in alarms if a["iteration"] == step]
    assert got["wandb_tables"][(step, "alarms")] == cells  # a dict of values as its JSON


def test_a_resumed_run_continues_its_tracker_runs(tiny_task, tmp_path):
    """Killed after its step-3 checkpoint, then --resume: MLflow continues the same run (its id kept
    in RUN/trackers.json) to FINISHED, and every metric of the finished run is there."""
    out = tmp_path / "resumed"
    env = tracker_env(tmp_path)
    args = sft_overrides(tiny_task["dir"], out, "run.report_to=[tensorboard,mlflow]", "run.save_every=3",
                         "max_steps=6")
    killed = tether(["sft", *args], {**env, "TETHER_FAULT": "step:5"})
    assert killed.returncode != 0
    first_id = json.loads((out / "trackers.json").read_text())["mlflow"]
    resumed = tether(["sft", "--resume", str(out)], env)
    assert resumed.returncode == 0, resumed.stderr[-4000:]
    assert json.loads((out / "trackers.json").read_text())["mlflow"] == first_id
    client, info, metrics = mlflow_run(out)
    assert info.info.run_id == first_id and info.info.status == "FINISHED"
    assert {step for step, name in metrics if name == "train/loss"} == set(range(1, 7))
    assert_same(metrics, jsonl_metrics(out), "mlflow (resumed)", rel=1e-12)
    scalars, _ = tensorboard_metrics(out)
    assert_same(scalars, jsonl_metrics(out), "tensorboard (resumed)")


def test_a_tracker_that_is_not_installed_is_one_paragraph(tiny_task, tmp_path):
    out = tmp_path / "never"
    code = ("import importlib.util as u, sys\nfind = u.find_spec\n"
            "u.find_spec = lambda name, *a: None if name == 'wandb' else find(name, *a)\n"
            "from tether.cli import main\nsys.exit(main(sys.argv[1:]))")
    proc = subprocess.run([sys.executable, "-c", code, "sft", *sft_overrides(tiny_task["dir"], out,
                                                                                 "run.report_to=[tensorboard,wandb]")],
                          capture_output=True, text=True, env=tracker_env(tmp_path), timeout=120)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    assert "run.report_to" in proc.stderr and "pip install wandb" in proc.stderr
    assert not out.exists()
    dry = subprocess.run([sys.executable, "-c", code, "sft", "--dry-run", *sft_overrides(
        tiny_task["dir"], out, "run.report_to=[tensorboard,wandb]")], capture_output=True, text=True,
        env=tracker_env(tmp_path), timeout=120)
    assert dry.returncode == 2 and dry.stderr == proc.stderr  # the dry run stops on it too


def test_an_unknown_tracker_names_the_choices(tiny_task, tmp_path):
    proc = tether(["sft", *sft_overrides(tiny_task["dir"], tmp_path / "x", "run.report_to=[comet]")],
                  tracker_env(tmp_path))
    assert proc.returncode == 2 and "run.report_to[0]" in proc.stderr and "'tensorboard'" in proc.stderr
