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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

from tether.errors import ConfigError

ConfigLike = Union[Mapping, str, Path, Any]
Overrides = Union[Mapping[str, Any], Sequence[str], None]


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


def resolve_config(cls: type, config: ConfigLike, overrides: Overrides = None, forced: Mapping | None = None):
    """A validated ``cls`` from a config object, a dict or a YAML path, with ``overrides`` (then
    ``forced``, dotted keys) on top."""
    from tether.config import from_dict, to_dict
    from tether.config.base import merge_override, parse_override, read_yaml

    if isinstance(config, cls):
        data = to_dict(config)
    elif dataclasses.is_dataclass(config) and not isinstance(config, type):
        raise ConfigError(f"Expected a {cls.__name__} (or a dict or a YAML path), got a {type(config).__name__}.")
    elif isinstance(config, (str, Path)):
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
        raise ConfigError(f"Expected a {cls.__name__}, a dict or a YAML path as the config, got {config!r}.")
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

        for given in given_algorithms(config, overrides):  # the function names the algorithm, as the command does
            if given != algorithm:
                raise ConfigError(f"Config key 'algorithm' = {given!r} given to tether.{algorithm}(): "
                                  f"call tether.{given}() (or drop the key).")
        cfg = resolve_config(PPOConfig, config, overrides, forced={"algorithm": algorithm})
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
    if isinstance(config, (str, Path)):
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

    cfg = resolve_config(SFTConfig, config, overrides)
    with _quiet_transformers():
        return RunResult("sft", Path(cfg.run.out), _numbers(run_sft(cfg, resume=resume)), cfg)


def reward_model(config: ConfigLike = None, overrides: Overrides = None, *, resume: bool = False) -> RunResult:
    """The Bradley-Terry reward model (``tether rm``): a :class:`tether.config.RewardModelConfig` (or a
    dict or YAML path) and overrides -> :class:`RunResult` (metrics: ``eval/accuracy``, ...)."""
    from tether.config import RewardModelConfig
    from tether.loops.reward_model import run_reward_model

    cfg = resolve_config(RewardModelConfig, config, overrides)
    with _quiet_transformers():
        return RunResult("rm", Path(cfg.run.out), _numbers(run_reward_model(cfg, resume=resume)), cfg)


def dpo(config: ConfigLike = None, overrides: Overrides = None, *, resume: bool = False) -> RunResult:
    """DPO or IPO (``tether dpo``): a :class:`tether.config.DPOConfig` (or a dict or YAML path) and
    overrides -> :class:`RunResult`."""
    from tether.config import DPOConfig
    from tether.loops.dpo import run_dpo

    cfg = resolve_config(DPOConfig, config, overrides)
    with _quiet_transformers():
        return RunResult("dpo", Path(cfg.run.out), _numbers(run_dpo(cfg, resume=resume)), cfg)


def dry_run(stage: str, config: ConfigLike = None, overrides: Overrides = None, *, resume: bool = False):
    """``tether STAGE --dry-run`` from Python: the :class:`tether.plan.Plan` (``print(plan.render())``;
    ``plan.memory``: estimated bytes per role), after the run's own checks of the config, the run
    directory, the tokenizer, the models' configs and the data. Reads no weights, writes nothing."""
    from tether.commands.stage import RL_COMMANDS, _config_class
    from tether.plan import dry_run as plan

    if stage not in ("sft", "rm", "dpo", *RL_COMMANDS):
        raise ConfigError(f"tether.dry_run: unknown stage {stage!r}; expected sft, rm, dpo or one of {list(RL_COMMANDS)}.")
    forced = {"algorithm": stage} if stage in RL_COMMANDS else None
    with _quiet_transformers():
        return plan(stage, resolve_config(_config_class(stage), config, overrides, forced), resume=resume)


ppo = _rl("ppo")
grpo = _rl("grpo")
rloo = _rl("rloo")
reinforce_pp = _rl("reinforce_pp")
