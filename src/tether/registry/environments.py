"""The environment kinds by name: where a multi-turn episode's observations come from.

An environment starts an episode from a prompt row, answers each assistant turn with an
observation (messages), an optional per-turn reward and whether the episode is over. An entry
names its class as ``"module:Class"`` (imported when a run builds it); a plugin is one file that
calls :func:`register_environment`. The table is the place the episode rollouts read; importing it
loads no torch (nor the environments' code). The built-in kinds (:mod:`tether.environments`):
``tools`` (the model calls tools, parsed from ``<tool_call>`` blocks and run bounded, until it
answers) and ``scripted`` (follow-up user turns from the data). An entry's class answers
:class:`tether.environments.base.Environment`.
"""

from __future__ import annotations

from dataclasses import dataclass

from tether.common.errors import ConfigError
from tether.registry.plugins import claim, load_plugins
from tether.common.targets import import_callable


@dataclass(frozen=True)
class EnvironmentSpec:
    """One environment kind: ``name``, ``target`` (``"module:Class"``), a one-line ``summary`` and
    the prompt-row keys it reads (``reads``), checked before a run starts."""

    name: str
    target: str
    summary: str
    reads: tuple[str, ...] = ()

    def load(self) -> type:
        return import_callable(self.target, f"the environment {self.name!r}")


ENVIRONMENTS: dict[str, EnvironmentSpec] = {}
_BUILT_IN: set[str] = set()


def register_environment(spec: EnvironmentSpec) -> EnvironmentSpec:
    """Add an environment kind; a built-in's name, or another module's, is refused."""
    if not spec.name.isidentifier() or ":" not in spec.target:
        raise ConfigError(f"Environment {spec.name!r}: expected an identifier and a 'module:Class' target.")
    claim(ENVIRONMENTS, _BUILT_IN, "Environment", spec)
    ENVIRONMENTS[spec.name] = spec
    return spec


def parse_environment_args(args: list[str], kind: str, key: str = "environment.args") -> dict[str, str]:
    """A plugin kind's ``args`` (``["key=value", ...]``) as a dict; a malformed entry is a ConfigError."""
    out = {}
    for i, item in enumerate(args):
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise ConfigError(f"Config key '{key}[{i}]' = {item!r}: expected key=value (the {kind} environment's "
                              "settings).")
        out[name.strip()] = value.strip()
    return out


def is_built_in(name: str) -> bool:
    """Whether ``name`` is one of tether's own environment kinds (they read no ``args``)."""
    return name in _BUILT_IN


def environment_spec(name: str, key: str = "environment") -> EnvironmentSpec:
    """The entry of ``name`` (plugins loaded); a ConfigError naming ``key`` and the choices otherwise."""
    load_plugins()
    if name not in ENVIRONMENTS:
        raise ConfigError(f"Config key '{key}' = {name!r}: expected a registered environment "
                          f"({', '.join(ENVIRONMENTS) or 'none registered'}).")
    return ENVIRONMENTS[name]


register_environment(EnvironmentSpec(
    "tools", "tether.environments.tool_env:ToolEnvironment",
    "tool calls in <tool_call> blocks, run bounded on a shared pool, until the model answers without one",
    ("messages", "prompt", "tools")))
register_environment(EnvironmentSpec(
    "scripted", "tether.environments.scripted:ScriptedEnvironment",
    "follow-up user turns from the row, one per assistant turn, until they run out",
    ("messages", "prompt", "follow_ups")))
_BUILT_IN.update(ENVIRONMENTS)
