"""One adapter per tracker: open a run, log scalars at a step, log a table, close.

Each adapter calls its library's public API and nothing else; the library is imported in the
constructor, so a tracker that is not asked for is never imported. ``run_id`` is what a resumed
run passes back as ``resume_id`` to continue the same tracker run.

An adapter whose library talks to a server has ``check_server()``, called before the run does any
work, and ``service_note()``, the bound its library was given (both from :mod:`tether.common.services`).
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

from tether.common import services
from tether.config.base import flat_dict


def _columns(rows: list[dict]) -> list[str]:
    columns: list[str] = []
    for row in rows:
        columns.extend(k for k in row if k not in columns)
    return columns


def _cell(value):
    """A table cell: numbers and strings as they are, anything else (a dict of values) as its JSON."""
    return value if isinstance(value, (int, float, str)) or value is None else json.dumps(value, default=str)


class TensorBoardTracker:
    """Event files in ``RUN/tensorboard`` (``tensorboard --logdir RUN``). TensorBoard has no tables:
    a table becomes a text summary (a Markdown table) under its name."""

    def __init__(self, out: Path, project: str, name: str, stage: str, config: dict, resume_id=None):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(out / "tensorboard"))
        self.run_id = None
        self.writer.add_text("config", "\n".join(f"    {k}: {v}" for k, v in flat_dict(config).items()), 0)

    def log(self, step: int, metrics: dict[str, float]) -> None:
        for key, value in metrics.items():
            self.writer.add_scalar(key, value, step)
        self.writer.flush()

    def log_table(self, name: str, step: int, rows: list[dict]) -> None:
        columns = _columns(rows)

        def cell(v) -> str:
            return str(_cell(v)).replace("|", "\\|").replace("\n", " ")

        lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
        lines += ["| " + " | ".join(cell(row.get(c)) for c in columns) + " |" for row in rows]
        self.writer.add_text(name, "\n".join(lines), step)

    def close(self, failed: bool = False) -> None:
        self.writer.close()


INIT_TIMEOUT_ENV = "WANDB_INIT_TIMEOUT"


class WandbTracker:
    """A W&B run (project ``run.project``) with the resolved config; files under ``RUN/wandb``.
    ``WANDB_MODE=offline`` keeps it on disk (``wandb sync`` uploads it later)."""

    def __init__(self, out: Path, project: str, name: str, stage: str, config: dict, resume_id=None):
        import wandb

        # W&B waits 90 s for a run by default; it gets the services' bound unless WANDB_INIT_TIMEOUT is set.
        settings = None if INIT_TIMEOUT_ENV in os.environ else wandb.Settings(init_timeout=services.timeout_s())
        try:
            self.run = wandb.init(project=project, name=name, job_type=stage, dir=str(out), config=config,
                                  id=resume_id, resume="allow" if resume_id else None, reinit="create_new",
                                  settings=settings)
        except wandb.Error as err:  # its advice names Python code a tether user does not write: service_note() instead
            raise RuntimeError(" ".join(str(err).split()).split(" Consider increasing the init_timeout")[0]) from err
        self.run_id = self.run.id
        self._wandb = wandb

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self.run.log(metrics, step=step)

    def log_table(self, name: str, step: int, rows: list[dict]) -> None:
        columns = _columns(rows)
        table = self._wandb.Table(columns=columns, data=[[_cell(r.get(c)) for c in columns] for r in rows])
        self.run.log({name: table}, step=step)

    def close(self, failed: bool = False) -> None:
        self.run.finish(exit_code=1 if failed else 0)

    @staticmethod
    def check_server() -> None:
        """Online mode: the W&B server (``WANDB_BASE_URL``, or the host ``wandb login`` saved) answers."""
        import wandb

        settings = wandb.setup().settings  # the mode and host as wandb.init will resolve them
        if settings.mode in ("offline", "dryrun", "disabled"):
            return
        url = settings.base_url
        services.check("The W&B server", url, "WANDB_BASE_URL", lambda: services.url_answers(url),
                       "Correct WANDB_BASE_URL (or `wandb login --host`), or log offline with WANDB_MODE=offline "
                       "(`wandb sync` uploads the run later).")

    @staticmethod
    def service_note() -> str:
        if os.environ.get("WANDB_MODE", "").lower() in ("offline", "dryrun", "disabled"):
            return ""
        wait = os.environ.get(INIT_TIMEOUT_ENV) or f"{services.timeout_s():g}"
        return f"W&B gets {wait} s to start a run ({INIT_TIMEOUT_ENV}, else {services.TIMEOUT_ENV})."


# MLflow's key alphabet: letters, digits, _ - . / and space; anything else becomes _.
_MLFLOW_KEY = re.compile(r"[^A-Za-z0-9_\-./ ]")


class MLflowTracker:
    """An MLflow run in experiment ``run.project``, through ``MlflowClient`` (no global active run):
    the tracking server or store of ``MLFLOW_TRACKING_URI`` when set, else a SQLite store ``RUN/mlflow.db``
    with its artifacts in ``RUN/mlartifacts``.
    The flattened config becomes the run's params; tables are JSON artifacts (``samples/step_N.json``)."""

    def __init__(self, out: Path, project: str, name: str, stage: str, config: dict, resume_id=None):
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        # MLflow 3's default local store: a SQLite database (sqlalchemy, alembic) beside the run, its
        # artifacts (tables) in RUN/mlartifacts, not MLflow's default ./mlruns of the working directory.
        # Its file store (maintenance mode) cannot hold both `timing/update` and `timing/update/x`.
        uri = os.environ.get("MLFLOW_TRACKING_URI")
        artifacts = None
        if not uri:
            uri, artifacts = f"sqlite:///{(out / 'mlflow.db').resolve()}", (out / "mlartifacts").resolve().as_uri()
        else:  # MLflow waits 120 s per request and retries 7 times by default; MLflow reads these per request
            services.set_default_env(services.mlflow_env())
        self.client = MlflowClient(tracking_uri=uri)
        self.tracking_uri = uri
        if resume_id is not None:
            self.run_id = resume_id
            self.client.update_run(resume_id, status="RUNNING")
            return
        experiment = self.client.get_experiment_by_name(project)
        experiment_id = experiment.experiment_id if experiment else self.client.create_experiment(
            project, artifact_location=artifacts)
        run = self.client.create_run(experiment_id, run_name=name, tags={"tether.stage": stage})
        self.run_id = run.info.run_id
        params = [Param(_MLFLOW_KEY.sub("_", k)[:250], str(v)[:6000]) for k, v in flat_dict(config).items()]
        for start in range(0, len(params), 100):  # MLflow takes at most 100 params per batch
            self.client.log_batch(self.run_id, params=params[start:start + 100])

    def log(self, step: int, metrics: dict[str, float]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        batch = [Metric(_MLFLOW_KEY.sub("_", k), v, now, step) for k, v in metrics.items()]
        for start in range(0, len(batch), 1000):  # MLflow takes at most 1000 metrics per batch
            self.client.log_batch(self.run_id, metrics=batch[start:start + 1000])

    def log_table(self, name: str, step: int, rows: list[dict]) -> None:
        columns = _columns(rows)
        data = {c: [_cell(r.get(c)) for r in rows] for c in columns}
        self.client.log_table(self.run_id, data, artifact_file=f"{name}/step_{step}.json")

    def close(self, failed: bool = False) -> None:
        self.client.set_terminated(self.run_id, status="FAILED" if failed else "FINISHED")

    @staticmethod
    def check_server() -> None:
        """A tracking server or database in ``MLFLOW_TRACKING_URI`` answers (local stores pass)."""
        uri = os.environ.get("MLFLOW_TRACKING_URI")
        if uri:
            services.check_mlflow(uri)

    @staticmethod
    def service_note() -> str:
        if not os.environ.get("MLFLOW_TRACKING_URI"):
            return ""  # the local store: no server
        env = {k: os.environ.get(k, v) for k, v in services.mlflow_env().items()}
        return (f"Each MLflow request gets {env['MLFLOW_HTTP_REQUEST_TIMEOUT']} s and "
                f"{env['MLFLOW_HTTP_REQUEST_MAX_RETRIES']} retries (MLFLOW_HTTP_REQUEST_TIMEOUT, "
                f"MLFLOW_HTTP_REQUEST_MAX_RETRIES, else {services.TIMEOUT_ENV}).")


class TrackioTracker:
    """A trackio run in project ``run.project``, stored locally (``TRACKIO_DIR``, default the
    Hugging Face cache); ``trackio show`` opens its dashboard."""

    def __init__(self, out: Path, project: str, name: str, stage: str, config: dict, resume_id=None):
        import trackio

        self._trackio = trackio
        self.run = trackio.init(project=project, name=resume_id or name, config=config,
                                resume="allow" if resume_id else "never")
        self.run_id = self.run.name

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self.run.log(metrics, step=step)

    def log_table(self, name: str, step: int, rows: list[dict]) -> None:
        columns = _columns(rows)
        table = self._trackio.Table(columns=columns, data=[[_cell(r.get(c)) for c in columns] for r in rows])
        self.run.log({name: table}, step=step)

    def close(self, failed: bool = False) -> None:
        self._trackio.finish()  # finishes the current run (this one) and clears it

    @staticmethod
    def check_server() -> None:
        """A trackio Space (``TRACKIO_SPACE_ID``, through the hub) or server (``TRACKIO_SERVER_URL``) answers."""
        space, server = os.environ.get("TRACKIO_SPACE_ID"), os.environ.get("TRACKIO_SERVER_URL")
        hint = "Unset it to keep the run's trackio logs on this machine (TRACKIO_DIR)."
        if space:
            from huggingface_hub import constants

            services.check("The Hugging Face hub", constants.ENDPOINT, "TRACKIO_SPACE_ID",
                           lambda: services.url_answers(constants.ENDPOINT), hint)
        elif server:
            services.check("The trackio server", services.shown(server), "TRACKIO_SERVER_URL",
                           lambda: services.url_answers(server), hint)  # shown: the query may hold a write token


BACKENDS = {"tensorboard": TensorBoardTracker, "wandb": WandbTracker, "mlflow": MLflowTracker,
            "trackio": TrackioTracker}
