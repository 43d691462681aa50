"""Experiment trackers (``run.report_to``): every ``metrics.jsonl`` row, under the same names and
steps, also goes to TensorBoard, Weights & Biases, MLflow or trackio, and PPO's samples to their tables.

A stage's trackers open when its run directory is prepared (:func:`tether.runs.prepare_run_dir`,
rank 0 alone: data parallel logs once), which returns them with the directory
(:class:`tether.runs.RunDir`); a :class:`tether.metrics.MetricsLogger` built on that directory logs
to them, and ``guarded_run`` closes them when the stage returns or fails. Nothing here keeps
state: whoever opens trackers (:func:`open_trackers`) holds them. Each tracker's package is
optional and imported only when asked for.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import math
import sys
from pathlib import Path

from tether.common.errors import ConfigError, TetherError

#: tracker name -> (module to import, pip package that provides it)
PACKAGES = {
    "tensorboard": ("tensorboard", "tensorboard"),
    "wandb": ("wandb", "wandb"),
    "mlflow": ("mlflow", "mlflow"),  # or mlflow-skinny with sqlalchemy and alembic (its SQLite store)
    "trackio": ("trackio", "trackio"),
}
#: Where a run directory keeps its trackers' run ids, so ``--resume`` continues the same tracker runs.
IDS_FILE = "trackers.json"


def check_installed(names) -> None:
    """A :class:`ConfigError` naming the package of the first tracker in ``names`` that is not installed."""
    for name in names:
        module, package = PACKAGES[name]
        if importlib.util.find_spec(module) is None:
            raise ConfigError(
                f"Config key 'run.report_to' asks for {name}, but its package is not installed in this Python "
                f"({sys.executable}): install it with `pip install {package}` "
                f"(or `pip install 'tether[trackers]'` for all four), or drop '{name}' from run.report_to.")


def check_servers(names) -> None:
    """The servers that ``names``' trackers log to answer within the services' bound
    (:mod:`tether.common.services`): called before a run does any work; local stores pass."""
    from tether.trackers.backends import BACKENDS

    with contextlib.redirect_stdout(sys.stderr):  # stdout is the command's result
        for name in dict.fromkeys(names):
            check = getattr(BACKENDS[name], "check_server", None)
            try:
                if check is not None:
                    check()
            except TetherError:
                raise
            except Exception as err:  # the library could not even say where it logs (a broken settings file)
                reason = " ".join(str(err).split()) or type(err).__name__
                raise ConfigError(f"Config key 'run.report_to': {name} could not read its settings: "
                                  f"{type(err).__name__}: {reason}") from err


class Trackers:
    """The open trackers of one run directory; each call goes to every one of them."""

    def __init__(self, backends: list):
        self.backends = backends
        self.closed = False

    def log(self, step: int, metrics: dict) -> None:
        """``metrics``: name -> value as written to metrics.jsonl; the finite numbers are logged."""
        numbers = {k: float(v) for k, v in metrics.items()
                   if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}
        if numbers:
            for backend in self.backends:
                backend.log(step, numbers)

    def log_table(self, name: str, step: int, rows: list[dict]) -> None:
        if rows:
            for backend in self.backends:
                backend.log_table(name, step, rows)

    def close(self, failed: bool = False) -> None:
        """Finish every tracker's run (marked failed with ``failed``); a second call does nothing."""
        if self.closed:
            return
        self.closed = True
        with contextlib.redirect_stdout(sys.stderr):  # stdout is the command's result
            for backend in self.backends:
                backend.close(failed)


def open_trackers(out: str | Path, cfg, stage: str, resume: bool) -> Trackers | None:
    """Open ``cfg.run.report_to``'s trackers for the run in ``out`` and return them (None when none
    are asked for); the caller owns them and closes them. On ``resume`` a tracker continues the
    run it started before (its id is kept in ``out/trackers.json``)."""
    from tether.config import to_dict
    from tether.trackers.backends import BACKENDS

    out = Path(out).resolve()
    names = list(getattr(cfg.run, "report_to", []) or [])
    if not names:
        return None
    ids_path = out / IDS_FILE
    ids = json.loads(ids_path.read_text(encoding="utf-8")) if resume and ids_path.is_file() else {}
    run_name = cfg.run.name or out.name
    config = {"stage": stage, **to_dict(cfg)}
    backends = []
    try:
        for name in names:
            try:
                with contextlib.redirect_stdout(sys.stderr):  # trackers' banners: stdout is the command's result
                    backends.append(BACKENDS[name](out=out, project=cfg.run.project, name=run_name, stage=stage,
                                                   config=config, resume_id=ids.get(name)))
            except Exception as err:  # the tracker's own reason, in one paragraph, and its library's bound
                reason = " ".join(str(err).split()) or type(err).__name__
                note = getattr(BACKENDS[name], "service_note", lambda: "")()
                if note:
                    reason = f"{reason.rstrip('.')}. {note}"
                raise ConfigError(f"Config key 'run.report_to': {name} could not start a run for '{out}': "
                                  f"{reason}") from err
    except BaseException:
        for backend in backends:
            backend.close(failed=True)
        raise
    ids = {name: b.run_id for name, b in zip(names, backends) if b.run_id is not None}
    ids_path.write_text(json.dumps(ids, indent=1), encoding="utf-8")
    return Trackers(backends)
