"""Experiment trackers (``run.report_to``): every ``metrics.jsonl`` row, under the same names and
steps, also goes to TensorBoard, Weights & Biases, MLflow or trackio, and PPO's samples to their tables.

A stage's trackers open when its run directory is prepared (rank 0 alone: data parallel logs
once) and close when the stage returns or fails (:func:`stage_session`, entered by
``guarded_run``). :class:`tether.metrics.MetricsLogger` finds them by run directory, so the
loops never see a tracker. Each tracker's package is optional and imported only when asked for.
"""

from __future__ import annotations

import contextlib
import contextvars
import importlib.util
import json
import math
import sys
from pathlib import Path

from tether.errors import ConfigError, TetherError

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
    (:mod:`tether.services`): called before a run does any work; local stores pass."""
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
        with contextlib.redirect_stdout(sys.stderr):  # stdout is the command's result
            for backend in self.backends:
                backend.close(failed)


_OPEN: dict[Path, Trackers] = {}
_SESSION: contextvars.ContextVar[list | None] = contextvars.ContextVar("tether_tracker_session", default=None)


def open_for_run(out: Path, cfg, stage: str, resume: bool) -> None:
    """Open ``cfg.run.report_to``'s trackers for the run in ``out`` (called once, on rank 0, when the
    run directory is prepared). On ``resume`` a tracker continues the run it started before."""
    from tether.config import to_dict
    from tether.trackers.backends import BACKENDS

    out = Path(out).resolve()
    close_for_run(out)
    names = list(getattr(cfg.run, "report_to", []) or [])
    if not names:
        return
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
    _OPEN[out] = Trackers(backends)
    session = _SESSION.get()
    if session is not None:
        session.append(out)


def for_run(out: str | Path) -> Trackers | None:
    """The open trackers of the run in ``out`` (None: none asked for, or not rank 0)."""
    if not _OPEN:
        return None
    return _OPEN.get(Path(out).resolve())


def close_for_run(out: str | Path, failed: bool = False) -> None:
    trackers = _OPEN.pop(Path(out).resolve(), None)
    if trackers is not None:
        trackers.close(failed)


@contextlib.contextmanager
def stage_session():
    """Close, when the block ends, the trackers opened inside it (marked failed on an exception)."""
    opened: list[Path] = []
    token = _SESSION.set(opened)
    failed = True
    try:
        yield
        failed = False
    finally:
        _SESSION.reset(token)
        for out in opened:
            close_for_run(out, failed)
