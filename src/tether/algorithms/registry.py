"""The RL algorithms by name: the one place an algorithm's name and its metadata are known.

Config validation, role building, the commands (one per entry), their help, model cards,
``tether compare``, the Python API (``tether.grpo``, ``tether.run``) and the tests read this
table. It imports no torch: ``tether --help`` lists the commands from it without loading an
algorithm's maths. An entry names its class as ``"module:Class"`` (imported when a run builds
it) or holds the class itself.

A third-party algorithm is one file that defines a class with the
:class:`~tether.algorithms.base.Algorithm` protocol and calls :func:`register_algorithm`; the
``TETHER_PLUGINS`` environment variable (comma-separated module names or ``.py`` paths) or an
installed package's ``tether.plugins`` entry point makes the CLI import it before it builds its
commands (:func:`load_plugins`).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from tether.errors import ConfigError, one_line
from tether.targets import import_callable

#: The environment variable naming plugin modules (or ``.py`` files) to import before a run.
PLUGINS_ENV = "TETHER_PLUGINS"
#: The entry-point group an installed package registers its plugin module under.
PLUGINS_GROUP = "tether.plugins"


@dataclass(frozen=True)
class AlgorithmSpec:
    """One RL algorithm on the shared roles.

    ``target``: the class (``"module:Class"`` or the class); its constructor takes the resolved
    :class:`~tether.config.RLConfig`. ``title``: its name in prose and charts. ``summary``: the
    command's one-line help. ``purpose``: what a model trained with it is, for its model card.
    ``needs_critic``: whether it trains a value model (the critic role and its keys exist only
    then). ``default_group_size`` / ``min_group_size``: responses sampled per prompt when
    ``group.size`` is unset, and the fewest it can learn from. ``trains_on``: the data key it
    reads. ``inert_keys``: config keys (or blocks) it never reads — set to anything but their
    default, the config is refused rather than silently ignored. ``config_block``: a block of the
    RL config only this algorithm reads (refused under the others). ``whole_groups``: its loss
    compares a prompt's responses with each other, so minibatches and micro-batches hold whole
    groups (the update shuffles groups, not rows). ``policy_loss``: the (ratio level, aggregation)
    that ``policy_loss.ratio_level`` and ``policy_loss.aggregation`` take when left null.
    """

    name: str
    target: object
    title: str
    summary: str
    purpose: str
    needs_critic: bool
    default_group_size: int = 1
    min_group_size: int = 1
    trains_on: str = "prompts"
    inert_keys: tuple[str, ...] = field(default_factory=tuple)
    config_block: str | None = None
    whole_groups: bool = False
    policy_loss: tuple[str, str] = ("token", "token_mean")

    def load(self) -> type:
        """The algorithm's class (its module imported on first use)."""
        if not isinstance(self.target, str):
            return self.target
        return import_callable(self.target, f"the algorithm {self.name!r}")


ALGORITHMS: dict[str, AlgorithmSpec] = {}
_BUILT_IN: set[str] = set()  # the names registered below, in this module: no plugin may take one

#: The algorithm of the demo pipeline, the preset and ``tether.ppo``'s default config.
DEFAULT_ALGORITHM = "ppo"

#: Names the RL commands cannot take: the other commands and stages.
RESERVED = frozenset({"demo", "sft", "rm", "dpo", "simpo", "orpo", "kto", "eval", "compare", "pairs", "label", "iterate",
                      "sweep", "report", "serve", "bench", "launch", "run", "dry_run", "reward_model"})


def register_algorithm(spec: AlgorithmSpec) -> AlgorithmSpec:
    """Add ``spec`` to :data:`ALGORITHMS`. Its name becomes a command (``tether NAME``), an API
    function and a value of the config key ``algorithm``.

    A name is owned by the module that first registered it: the same module registering it again
    replaces its entry (a reloaded plugin), but a built-in algorithm's name, or another plugin's,
    is refused, so a plugin can never silently change what ``tether ppo`` runs."""
    if not spec.name.isidentifier() or spec.name in RESERVED:
        raise ConfigError(f"Algorithm name {spec.name!r}: expected a Python identifier that is not one of tether's "
                          f"commands ({', '.join(sorted(RESERVED))}).")
    if spec.min_group_size < 1 or spec.default_group_size < spec.min_group_size:
        raise ConfigError(f"Algorithm {spec.name!r}: default_group_size {spec.default_group_size} must be at least "
                          f"min_group_size {spec.min_group_size} (>= 1).")
    held = ALGORITHMS.get(spec.name)
    if held is not None and (spec.name in _BUILT_IN or _owner(held) != _owner(spec)):
        whose = f"tether's built-in {held.title}" if spec.name in _BUILT_IN else f"the plugin {_owner(held)!r}"
        raise ConfigError(f"Algorithm name {spec.name!r} is already registered by {whose} ({_target(held)}); "
                          f"{_owner(spec)!r} ({_target(spec)}) may not replace it: expected a name no registered "
                          f"algorithm has (registered: {', '.join(ALGORITHMS)}).")
    ALGORITHMS[spec.name] = spec
    return spec


def _owner(spec: AlgorithmSpec) -> str:
    """The module an entry's class lives in: who registered the name."""
    if isinstance(spec.target, str):
        return spec.target.partition(":")[0]
    return str(getattr(spec.target, "__module__", None) or type(spec.target).__module__)


def _target(spec: AlgorithmSpec) -> str:
    if isinstance(spec.target, str):
        return spec.target
    return f"{_owner(spec)}:{getattr(spec.target, '__qualname__', type(spec.target).__qualname__)}"


def algorithm_spec(name: str) -> AlgorithmSpec:
    """The registered entry of ``name``; a :class:`ConfigError` listing the choices otherwise."""
    load_plugins()
    if name not in ALGORITHMS:
        raise ConfigError(f"Config key 'algorithm' = {name!r}: expected one of {', '.join(ALGORITHMS)} (a plugin "
                          f"algorithm registers itself: see {PLUGINS_ENV} in docs/algorithms.md).")
    return ALGORITHMS[name]


def build_algorithm(name: str, cfg):
    """An instance of algorithm ``name`` for the resolved config ``cfg``."""
    return algorithm_spec(name).load()(cfg)


_loaded: set[str] = set()  # plugin modules, files and entry points imported so far
_installed: list | None = None  # the installed packages' plugin entry points, read once per process


def _installed_plugins() -> list:
    """The ``tether.plugins`` entry points of the installed packages (scanned on first use only:
    the scan reads every distribution's metadata, and config validation asks the registry often)."""
    global _installed
    if _installed is None:
        try:
            from importlib.metadata import entry_points

            _installed = list(entry_points(group=PLUGINS_GROUP))
        except Exception:  # a broken installed distribution must not stop tether itself
            _installed = []
    return _installed


def _import_plugin(name: str) -> None:
    """Import the plugin ``name``: a module name, or a ``.py`` file's path."""
    if not name.endswith(".py"):
        importlib.import_module(name)
        return
    path = Path(name).expanduser().resolve()
    spec = importlib.util.spec_from_file_location(path.stem, path)
    if spec is None or not path.is_file():
        raise FileNotFoundError(f"No such file {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        # A half-run module must not stay importable: the next load_plugins (or an import of it
        # by name) would find it there and skip the error.
        if sys.modules.get(path.stem) is module:
            del sys.modules[path.stem]
        raise


def _cause(err: BaseException, name: str) -> str:
    """What went wrong importing plugin ``name``, in one line: where a syntax error is, which
    module is missing, or the exception and the line that raised it."""
    if isinstance(err, SyntaxError):
        where = Path(err.filename).name if err.filename else name
        return f"{type(err).__name__} at line {err.lineno} of {where}: {one_line(err.msg, 200)}"
    if isinstance(err, FileNotFoundError) and str(err).startswith("No such file "):
        return str(err)
    if isinstance(err, ModuleNotFoundError) and err.name and (name == err.name or name.startswith(err.name + ".")):
        # the plugin itself (or its package) is not importable, not one of its own imports
        return f"No module named {err.name!r} on sys.path (a .py file is named by its path, ending in .py)"
    text = f"{type(err).__name__}: {one_line(err, 300)}" if str(err) else type(err).__name__
    frames = traceback.extract_tb(err.__traceback__)
    if frames and not isinstance(err, ImportError):
        text += f" (raised at {Path(frames[-1].filename).name} line {frames[-1].lineno})"
    return text


def _plugin_error(which: str, err: Exception, name: str, fix: str) -> ConfigError:
    """The one-paragraph error for plugin ``which`` (how the user named it) that raised ``err``."""
    if isinstance(err, ConfigError):  # it imported, but tether refused what it registers (a taken name, ...)
        return ConfigError(f"{which} was refused while it imported: {one_line(err).rstrip('.')} ({fix}).")
    return ConfigError(f"{which} failed to import: {_cause(err, name)}; expected a module that imports without "
                       f"error and registers its algorithms with register_algorithm ({fix}).")


def load_plugins() -> None:
    """Import the plugin modules of ``TETHER_PLUGINS`` and the ``tether.plugins`` entry points
    (once each); a plugin that fails to import is a one-paragraph :class:`ConfigError` naming it,
    the cause and what was expected (the CLI prints it and exits 2). Nothing calls this at
    ``import tether``: the registry's users (the CLI's command list, ``tether.NAME``, a run's
    config checks) call it on first use, where a broken plugin is an error they report."""
    for name in (n.strip() for n in os.environ.get(PLUGINS_ENV, "").split(",")):
        if not name or name in _loaded:
            continue
        try:
            _import_plugin(name)
        except Exception as err:
            raise _plugin_error(f"{PLUGINS_ENV} names {name!r}, which", err, name,
                                f"fix it, or remove it from {PLUGINS_ENV}") from err
        _loaded.add(name)
    for point in _installed_plugins():
        if point.value in _loaded:
            continue
        try:
            point.load()
        except Exception as err:
            dist = getattr(getattr(point, "dist", None), "name", None)
            of = f" of the installed package {dist!r}" if dist else ""
            raise _plugin_error(f"The '{PLUGINS_GROUP}' entry point {point.name!r} ({point.value}){of}", err,
                                point.module, "fix or uninstall the package") from err
        _loaded.add(point.value)


register_algorithm(AlgorithmSpec(
    "ppo", "tether.algorithms.ppo:PPO", "PPO",
    summary="PPO-RLHF: actor, reference, reward model and critic.",
    purpose="PPO-RLHF against a reward model, with a KL penalty to the starting policy",
    needs_critic=True, inert_keys=("policy_loss", "group.scale_by_std")))
register_algorithm(AlgorithmSpec(
    "grpo", "tether.algorithms.grpo:GRPO", "GRPO",
    summary="GRPO: a group of responses per prompt, the group's mean reward as baseline; no critic.",
    purpose="GRPO against a reward model (group-mean baseline, no critic)",
    needs_critic=False, default_group_size=4, min_group_size=2, inert_keys=("rl.gamma",)))
register_algorithm(AlgorithmSpec(
    "rloo", "tether.algorithms.rloo:RLOO", "RLOO",
    summary="RLOO: k responses per prompt, each one's baseline the others' mean reward; no critic.",
    purpose="RLOO against a reward model (leave-one-out baseline, no critic)",
    needs_critic=False, default_group_size=4, min_group_size=2, inert_keys=("rl.gamma", "group.scale_by_std"),
    policy_loss=("sequence_product", "sequence_mean")))  # the paper's estimator: one ratio and one loss per response
register_algorithm(AlgorithmSpec(
    "reinforce_pp", "tether.algorithms.reinforce_pp:ReinforcePP", "REINFORCE++",
    summary="REINFORCE++: PPO's per-token reward, returns normalised over the batch; no critic.",
    purpose="REINFORCE++ against a reward model (batch-normalised returns, no critic)",
    needs_critic=False, inert_keys=("group.scale_by_std",)))
register_algorithm(AlgorithmSpec(
    "online_dpo", "tether.algorithms.online_dpo:OnlineDPO", "Online DPO",
    summary="Online DPO: the best and worst of k samples per prompt, ranked by the reward, as a DPO pair.",
    purpose="online (iterative) DPO on its own samples ranked by a reward, against the reference (beta = kl.coef)",
    needs_critic=False, default_group_size=2, min_group_size=2, whole_groups=True,
    inert_keys=("rl.gamma", "group.scale_by_std", "policy_loss", "kl.placement", "kl.estimator", "rl.clip",
                "rl.entropy_coef", "rl.micro_batch_tokens", "rollout.is_correction")))
register_algorithm(AlgorithmSpec(
    "rs", "tether.algorithms.rejection_sampling:RejectionSampling", "Rejection sampling",
    summary="Rejection sampling: fine-tune on the best of N samples per prompt, scored by the reward.",
    purpose="rejection-sampling fine-tuning (best-of-N samples of the policy, scored by a reward, as SFT targets)",
    needs_critic=False, default_group_size=4, min_group_size=2, config_block="selection",
    inert_keys=("rl.gamma", "group.scale_by_std", "policy_loss", "rl.clip", "rl.entropy_coef",
                "rollout.is_correction")))
_BUILT_IN.update(ALGORITHMS)
