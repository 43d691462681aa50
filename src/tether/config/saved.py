"""A run's own ``config.yaml`` as a preset: it holds the run's bookkeeping beside the config keys
(the stage that ran it, the directory it was started from), read here instead of refused, and it
loads only for the stage that saved it. ``--resume``, ``--config RUN/config.yaml`` and the Python
API's ``tether.STAGE("RUN/config.yaml")`` all read it through :func:`read_preset`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tether.config.base import rebase_paths, read_yaml
from tether.common.errors import ConfigError

#: The keys a run adds to the config it saves as ``RUN/config.yaml`` (tether.runs.prepare_run_dir):
#: the stage that ran it and the directory it was started from. They are no config keys, but a
#: saved config is a preset like any other, so :func:`tether.config.load_config` reads them instead of refusing.
SAVED_STAGE, SAVED_WORKDIR = "stage", "workdir"


def read_preset(cls: type, path: str | Path) -> tuple[dict, Any]:
    """(the preset's keys, the stage that saved it or None). A run's saved ``config.yaml`` holds
    the run's bookkeeping (:data:`SAVED_STAGE`, :data:`SAVED_WORKDIR`): both are taken out, and its
    relative input paths are read from the directory that run was started from, as ``--resume``
    reads them."""
    data = read_yaml(path)
    if SAVED_STAGE not in data:
        return data, None
    saved = data.pop(SAVED_STAGE)
    workdir = data.pop(SAVED_WORKDIR, None)
    if isinstance(workdir, str) and Path(workdir).is_dir():
        data = rebase_paths(cls, data, workdir)
    return data, saved


def check_saved_stage(cls: type, saved: Any, data: dict, path: str | Path) -> None:
    """A saved run's config is loaded only for the stage that saved it: another stage's keys would
    be refused one by one (or, between RL algorithms, run the wrong algorithm)."""
    from tether.registry.algorithms import DEFAULT_ALGORITHM, PLUGINS_ENV
    from tether.registry.stages import stages

    table = stages()
    spec = table.get(saved) if isinstance(saved, str) else None
    if spec is None:
        raise ConfigError(f"Config file '{path}' has key '{SAVED_STAGE}' = {saved!r}: expected the stage of the run "
                          f"that saved it, one of {', '.join(table)} (a plugin algorithm's stage exists only while "
                          f"{PLUGINS_ENV} loads it).")
    runs = data.get("algorithm", DEFAULT_ALGORITHM)  # an RL config's stage is its algorithm
    if spec.config_class() is not cls or (spec.algorithm and runs != spec.algorithm):
        ran = [name for name, other in table.items() if other.config_class() is cls and (
            other.algorithm is None or other.algorithm == runs)]
        here = f" (this is `tether {ran[0]}`)" if len(ran) == 1 else ""
        raise ConfigError(f"Config file '{path}' was saved by `tether {saved}` (its key '{SAVED_STAGE}'){here}; run "
                          f"it with `tether {saved} --config {path}`, or start from a preset of this stage.")
