"""The Python API: each stage as a function, for notebooks and scripts (``tether.sft``, ...).

Every function takes the stage's config as a config object (``tether.config.SFTConfig``, ...), a
dict (nested, ``{"optim": {"lr": 1e-4}}``, or dotted, ``{"optim.lr": 1e-4}``) or a YAML preset's
path, plus optional overrides (a dict of dotted keys or ``"key=value"`` strings, applied on top),
and returns a :class:`RunResult`. It runs the same code as the command of the same name: a bad
key or value raises the :class:`tether.common.errors.ConfigError` the command prints, bad data a
:class:`tether.common.errors.DataError`, and so on (all :class:`tether.common.errors.TetherError`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

from tether.common.errors import ConfigError

ConfigLike = Union[Mapping, str, os.PathLike, Any]
Overrides = Union[Mapping[str, Any], Sequence[str], None]


def check_arguments(caller: str, overrides: Overrides = None, resume: bool = False, on_iteration=None) -> None:
    """The arguments of ``tether.CALLER()`` other than the config, by type, before anything runs: a
    :class:`ConfigError` naming the argument (a wrong type would otherwise surface as a TypeError
    from deep inside, or be taken for something else: ``resume="no"`` is true)."""
    def refuse(name: str, value, expected: str):
        raise ConfigError(f"tether.{caller}(): argument '{name}' = {value!r}: expected {expected}.")

    if overrides is not None and not isinstance(overrides, (Mapping, str)):
        if not isinstance(overrides, Sequence) or isinstance(overrides, (bytes, bytearray)):
            refuse("overrides", overrides, "a dict of dotted keys, a list of 'key=value' strings, or None")
        for item in overrides:
            if not isinstance(item, str):
                refuse("overrides", overrides, f"'key=value' strings in the list, but it holds {item!r}")
    if isinstance(overrides, Mapping):
        for key in overrides:
            if not isinstance(key, str):
                refuse("overrides", overrides, f"dotted keys as strings, but it holds the key {key!r}")
    if not isinstance(resume, bool):
        refuse("resume", resume, "True or False")
    if on_iteration is not None and not callable(on_iteration):
        refuse("on_iteration", on_iteration, "a function on_iteration(iteration, stats, trainer), or None")


@dataclass
class RunResult:
    """What a stage returns.

    ``out``: the run directory, a Hugging Face checkpoint (``from_pretrained(result.out)``) with
    ``config.yaml``, ``metrics.jsonl`` and a model card (``README.md``). ``metrics``: the final
    numbers (held-out metrics; RL: the last iteration's). ``config``: the resolved config the run
    used. RL only: ``history``, every iteration's metrics; ``alarms``, the health monitor's alarms
    (as in ``alarms.jsonl``); ``stopped_by``, the rule that stopped the run early (None: it ran out).
    """

    stage: str
    out: Path
    metrics: dict[str, float]
    config: Any
    history: list[dict] = field(default_factory=list)
    alarms: list[dict] = field(default_factory=list)
    stopped_by: str | None = None

    def __getitem__(self, name: str) -> float:
        return self.metrics[name]


def resolve_config(cls: type, config: ConfigLike, overrides: Overrides = None, forced: Mapping | None = None,
                   caller: str | None = None):
    """A validated ``cls`` from a config object, a dict or a YAML path, with ``overrides`` (then
    ``forced``, dotted keys) on top; ``caller`` (e.g. "sft") names the function in errors."""
    from tether.config import from_dict, to_dict
    from tether.config.base import merge_override, parse_override
    from tether.config.moved import merge_setting
    from tether.config.saved import check_saved_stage, read_preset

    where = f"tether.{caller}(): argument 'config'" if caller else "The config"
    check_arguments(caller or "resolve_config", overrides)
    saved = None  # the stage that saved a run's config.yaml given as the config
    if isinstance(config, cls):
        data = to_dict(config)
    elif dataclasses.is_dataclass(config) and not isinstance(config, type):
        raise ConfigError(f"{where} is a {type(config).__name__}: expected a {cls.__name__} (or a dict or a YAML "
                          "path).")
    elif isinstance(config, (str, os.PathLike)):
        data, saved = read_preset(cls, config)  # a run's own config.yaml too
    elif isinstance(config, Mapping):
        data = {}
        for key, value in config.items():  # dotted keys and nested blocks alike
            parts = str(key).split(".")
            if isinstance(value, Mapping) and len(parts) == 1 and isinstance(data.get(key), dict):
                data[key].update(value)
            else:
                merge_override(data, parts, dict(value) if isinstance(value, Mapping) else value)
    elif config is None:
        data = {}
    else:
        raise ConfigError(f"{where} = {config!r}: expected a {cls.__name__}, a dict or a YAML path.")
    given: list = []  # the overrides merged so far: both spellings of a moved key among them are an error
    if isinstance(overrides, Mapping):
        for key, value in overrides.items():
            merge_setting(cls, data, str(key).split("."), value, given)
    elif overrides:
        if isinstance(overrides, str):
            overrides = [overrides]
        for text in overrides:
            merge_setting(cls, data, *parse_override(text), given)
    for key, value in (forced or {}).items():
        merge_setting(cls, data, key.split("."), value, given)
    if saved is not None:
        check_saved_stage(cls, saved, data, config)
    return from_dict(cls, data)


@contextlib.contextmanager
def _quiet_transformers():
    """transformers' per-load progress bars and load reports off for the stage (as the command has
    them), the caller's settings back afterwards."""
    from transformers.utils import logging as hf_logging

    verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()


def _numbers(result: Mapping) -> dict[str, float]:
    return {k: v for k, v in result.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and not (isinstance(v, float) and math.isnan(v))}


def run(stage: str, config: ConfigLike = None, overrides: Overrides = None, *, resume: bool = False,
        on_iteration=None) -> RunResult:
    """Run the stage ``stage`` (``tether STAGE``): any of :func:`tether.registry.stages.stages` — sft, rm,
    dpo or a registered RL algorithm, a plugin's included — with its config (object, dict or YAML
    path) and overrides -> :class:`RunResult`. ``on_iteration(iteration, stats, trainer)``: RL only."""
    from tether.registry.stages import stage_spec

    spec = stage_spec(stage, "run")
    caller = spec.api
    check_arguments(caller, overrides, resume, on_iteration)
    if spec.algorithm is None:
        if on_iteration is not None:
            raise ConfigError(f"tether.{caller}(): argument 'on_iteration' is for the RL stages; {stage} has no "
                              "iterations.")
        cfg = resolve_config(spec.config_class(), config, overrides, caller=caller)
        with _quiet_transformers():
            return RunResult(stage, Path(cfg.run.out), _numbers(spec.run_function()(cfg, resume=resume)), cfg)
    algorithm = spec.algorithm
    for given in given_algorithms(config, overrides):  # the function names the algorithm, as the command does
        if given != algorithm:
            raise ConfigError(f"Config key 'algorithm' = {given!r} given to tether.{algorithm}(): "
                              f"call tether.{given}() (or drop the key).")
    cfg = resolve_config(spec.config_class(), config, overrides, forced={"algorithm": algorithm}, caller=caller)
    with _quiet_transformers():
        result = spec.run_function()(cfg, on_iteration=on_iteration, resume=resume)
    history = result["history"]
    metrics = {**(_numbers(history[-1]) if history else {}), "time_s": result["time_s"]}
    return RunResult(algorithm, Path(cfg.run.out), metrics, cfg, history, result.get("alarms", []),
                     result.get("stopped_by"))


def _stage_function(spec):
    """``tether.<api>(config, overrides, resume=[, on_iteration=])``: :func:`run` of that stage."""
    if spec.algorithm:
        def call(config: ConfigLike = None, overrides: Overrides = None, *, resume: bool = False,
                 on_iteration=None) -> RunResult:
            return run(spec.name, config, overrides, resume=resume, on_iteration=on_iteration)

        what = ("with every iteration's metrics in ``history``. ``resume``: continue the run in ``run.out``; "
                "``on_iteration(iteration, stats, trainer)`` is called after every iteration.")
    else:
        def call(config: ConfigLike = None, overrides: Overrides = None, *, resume: bool = False) -> RunResult:
            return run(spec.name, config, overrides, resume=resume)

        what = "with its final metrics. ``resume``: continue the run in ``run.out``."
    config = spec.config.rpartition(":")[2]
    call.__name__ = call.__qualname__ = spec.api
    call.__doc__ = (f"Run {spec.title or spec.name} (``tether {spec.name}``): a :class:`tether.config.{config}` (or "
                    f"a dict or YAML path) and overrides -> :class:`RunResult` {what}")
    return call


def given_algorithms(config, overrides) -> list[str]:
    """Every ``algorithm`` a caller set explicitly: in ``overrides`` (a dict or ``key=value``
    strings), in ``config`` (a dict, a YAML preset's path, or a config object whose value is not
    the default). ``tether grpo`` and ``tether.grpo()`` refuse any that is not theirs."""
    from tether.registry.algorithms import DEFAULT_ALGORITHM

    given = []
    for source in (overrides, config):
        if isinstance(source, Mapping) and "algorithm" in source:
            given.append(str(source["algorithm"]))
        elif isinstance(source, Sequence) and not isinstance(source, str):
            given += [t.split("=", 1)[1].strip() for t in source
                      if isinstance(t, str) and t.split("=", 1)[0].strip() == "algorithm"]
    if dataclasses.is_dataclass(config) and config.algorithm != DEFAULT_ALGORITHM:  # the default is no choice
        given.append(config.algorithm)
    if isinstance(config, (str, os.PathLike)):
        from tether.config.base import read_yaml

        data = read_yaml(config)
        if isinstance(data, dict) and "algorithm" in data:
            given.append(str(data["algorithm"]))
    return given


def dry_run(stage: str, config: ConfigLike = None, overrides: Overrides = None, *, resume: bool = False):
    """``tether STAGE --dry-run`` from Python: the :class:`tether.plan.Plan` (``print(plan.render())``;
    ``plan.memory``: estimated bytes per role), after the run's own checks of the config, the run
    directory, the tokenizer, the models' configs and the data. Reads no weights, writes nothing."""
    from tether.plan import dry_run as plan
    from tether.registry.stages import stage_spec

    check_arguments("dry_run", overrides, resume)
    spec = stage_spec(stage, "dry_run")
    forced = {"algorithm": spec.algorithm} if spec.algorithm else None
    with _quiet_transformers():
        return plan(stage, resolve_config(spec.config_class(), config, overrides, forced, caller="dry_run"),
                    resume=resume)


def api_names() -> dict[str, str]:
    """API function name -> its stage, for every stage of the table (``tether.sft``,
    ``tether.reward_model``, ``tether.ppo``, a plugin's)."""
    from tether.registry.stages import stages

    return {spec.api: name for name, spec in stages().items()}


def __getattr__(name: str):
    """``tether.api.NAME`` for every registered stage: its API function (``sft``, ``reward_model``,
    ``ppo``, ``grpo``, a plugin's)."""
    if name.startswith("__"):  # the import system's probes (__path__, ...) load no plugin
        raise AttributeError(f"module 'tether.api' has no attribute {name!r}")
    from tether.registry.stages import STAGES, stage_spec

    # The supervised stages registered so far answer without loading the plugins (a broken plugin
    # then leaves tether.sft alone); any other name asks the whole table, plugins loaded.
    stage = {spec.api: n for n, spec in STAGES.items()}.get(name) or api_names().get(name)
    if stage is not None:
        return _stage_function(stage_spec(stage))
    raise AttributeError(f"module 'tether.api' has no attribute {name!r}")
