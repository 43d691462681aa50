"""The Python API: each stage as a function, for notebooks and scripts (``tether.sft``, ...).

Every function takes the stage's config as a config object (``tether.config.SFTConfig``, ...), a
dict (nested, ``{"optim": {"lr": 1e-4}}``, or dotted, ``{"optim.lr": 1e-4}``) or a YAML preset's
path, plus optional overrides (a dict of dotted keys or ``"key=value"`` strings, applied on top),
and returns a :class:`RunResult`. It runs the same code as the command of the same name: a bad
key or value raises the :class:`tether.errors.ConfigError` the command prints, bad data a
:class:`tether.errors.DataError`, and so on (all :class:`tether.errors.TetherError`).
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

from tether.errors import ConfigError

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
    from tether.config.base import merge_override, parse_override, read_yaml

    where = f"tether.{caller}(): argument 'config'" if caller else "The config"
    check_arguments(caller or "resolve_config", overrides)
    if isinstance(config, cls):
        data = to_dict(config)
    elif dataclasses.is_dataclass(config) and not isinstance(config, type):
        raise ConfigError(f"{where} is a {type(config).__name__}: expected a {cls.__name__} (or a dict or a YAML "
                          "path).")
    elif isinstance(config, (str, os.PathLike)):
        data = read_yaml(config)
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
    if isinstance(overrides, Mapping):
        for key, value in overrides.items():
            merge_override(data, str(key).split("."), value)
    elif overrides:
        if isinstance(overrides, str):
            overrides = [overrides]
        for text in overrides:
            merge_override(data, *parse_override(text))
    for key, value in (forced or {}).items():
        merge_override(data, key.split("."), value)
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


def _rl(algorithm: str):
    def run(config: ConfigLike = None, overrides: Overrides = None, *, resume: bool = False,
            on_iteration=None) -> RunResult:
        from tether.config import PPOConfig
        from tether.loops.ppo import run_ppo

        check_arguments(algorithm, overrides, resume, on_iteration)
        for given in given_algorithms(config, overrides):  # the function names the algorithm, as the command does
            if given != algorithm:
                raise ConfigError(f"Config key 'algorithm' = {given!r} given to tether.{algorithm}(): "
                                  f"call tether.{given}() (or drop the key).")
        cfg = resolve_config(PPOConfig, config, overrides, forced={"algorithm": algorithm}, caller=algorithm)
        with _quiet_transformers():
            result = run_ppo(cfg, on_iteration=on_iteration, resume=resume)
        history = result["history"]
        metrics = {**(_numbers(history[-1]) if history else {}), "time_s": result["time_s"]}
        return RunResult(algorithm, Path(cfg.run.out), metrics, cfg, history, result.get("alarms", []),
                         result.get("stopped_by"))

    run.__name__ = run.__qualname__ = algorithm
    run.__doc__ = (f"Run {algorithm.upper() if algorithm != 'reinforce_pp' else 'REINFORCE++'} (``tether {algorithm}``): "
                   "a :class:`tether.config.PPOConfig` (or a dict or YAML path) and overrides -> :class:`RunResult` "
                   "with every iteration's metrics in ``history``. ``resume``: continue the run in ``run.out``; "
                   "``on_iteration(iteration, stats, trainer)`` is called after every iteration.")
    return run


def given_algorithms(config, overrides) -> list[str]:
    """Every ``algorithm`` a caller set explicitly: in ``overrides`` (a dict or ``key=value``
    strings), in ``config`` (a dict, a YAML preset's path, or a config object whose value is not
    the default). ``tether grpo`` and ``tether.grpo()`` refuse any that is not theirs."""
    given = []
    for source in (overrides, config):
        if isinstance(source, Mapping) and "algorithm" in source:
            given.append(str(source["algorithm"]))
        elif isinstance(source, Sequence) and not isinstance(source, str):
            given += [t.split("=", 1)[1].strip() for t in source
                      if isinstance(t, str) and t.split("=", 1)[0].strip() == "algorithm"]
    if dataclasses.is_dataclass(config) and config.algorithm != "ppo":  # a config object's default is no choice
        given.append(config.algorithm)
    if isinstance(config, (str, os.PathLike)):
        from tether.config.base import read_yaml

        data = read_yaml(config)
        if isinstance(data, dict) and "algorithm" in data:
            given.append(str(data["algorithm"]))
    return given


def sft(config: ConfigLike = None, overrides: Overrides = None, *, resume: bool = False) -> RunResult:
    """Supervised fine-tuning (``tether sft``): a :class:`tether.config.SFTConfig` (or a dict or YAML
    path) and overrides -> :class:`RunResult` (metrics: ``eval/loss``, ``steps``, ``time_s``)."""
    from tether.config import SFTConfig
    from tether.loops.sft import run_sft

    check_arguments("sft", overrides, resume)
    cfg = resolve_config(SFTConfig, config, overrides, caller="sft")
    with _quiet_transformers():
        return RunResult("sft", Path(cfg.run.out), _numbers(run_sft(cfg, resume=resume)), cfg)


def reward_model(config: ConfigLike = None, overrides: Overrides = None, *, resume: bool = False) -> RunResult:
    """The Bradley-Terry reward model (``tether rm``): a :class:`tether.config.RewardModelConfig` (or a
    dict or YAML path) and overrides -> :class:`RunResult` (metrics: ``eval/accuracy``, ...)."""
    from tether.config import RewardModelConfig
    from tether.loops.reward_model import run_reward_model

    check_arguments("reward_model", overrides, resume)
    cfg = resolve_config(RewardModelConfig, config, overrides, caller="reward_model")
    with _quiet_transformers():
        return RunResult("rm", Path(cfg.run.out), _numbers(run_reward_model(cfg, resume=resume)), cfg)


def dpo(config: ConfigLike = None, overrides: Overrides = None, *, resume: bool = False) -> RunResult:
    """DPO or IPO (``tether dpo``): a :class:`tether.config.DPOConfig` (or a dict or YAML path) and
    overrides -> :class:`RunResult`."""
    from tether.config import DPOConfig
    from tether.loops.dpo import run_dpo

    check_arguments("dpo", overrides, resume)
    cfg = resolve_config(DPOConfig, config, overrides, caller="dpo")
    with _quiet_transformers():
        return RunResult("dpo", Path(cfg.run.out), _numbers(run_dpo(cfg, resume=resume)), cfg)


def dry_run(stage: str, config: ConfigLike = None, overrides: Overrides = None, *, resume: bool = False):
    """``tether STAGE --dry-run`` from Python: the :class:`tether.plan.Plan` (``print(plan.render())``;
    ``plan.memory``: estimated bytes per role), after the run's own checks of the config, the run
    directory, the tokenizer, the models' configs and the data. Reads no weights, writes nothing."""
    from tether.commands.stage import RL_COMMANDS, _config_class
    from tether.plan import dry_run as plan

    check_arguments("dry_run", overrides, resume)
    if not isinstance(stage, str) or stage not in ("sft", "rm", "dpo", *RL_COMMANDS):
        raise ConfigError(f"tether.dry_run: unknown stage {stage!r}; expected sft, rm, dpo or one of {list(RL_COMMANDS)}.")
    forced = {"algorithm": stage} if stage in RL_COMMANDS else None
    with _quiet_transformers():
        return plan(stage, resolve_config(_config_class(stage), config, overrides, forced, caller="dry_run"),
                    resume=resume)


ppo = _rl("ppo")
grpo = _rl("grpo")
rloo = _rl("rloo")
reinforce_pp = _rl("reinforce_pp")
