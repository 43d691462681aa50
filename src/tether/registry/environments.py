"""The environment kinds by name: where a multi-turn episode's observations come from.

An environment starts an episode from a prompt row, answers each assistant turn with an
observation (messages), an optional per-turn reward and whether the episode is over. An entry
names its class as ``"module:Class"`` (imported when a run builds it); a plugin is one file that
calls :func:`register_environment`. The table is the place the episode rollouts read; it has no
built-in entry yet, and importing it loads no torch.
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


def environment_spec(name: str, key: str = "environment") -> EnvironmentSpec:
    """The entry of ``name`` (plugins loaded); a ConfigError naming ``key`` and the choices otherwise."""
    load_plugins()
    if name not in ENVIRONMENTS:
        raise ConfigError(f"Config key '{key}' = {name!r}: expected a registered environment "
                          f"({', '.join(ENVIRONMENTS) or 'none registered'}).")
    return ENVIRONMENTS[name]
