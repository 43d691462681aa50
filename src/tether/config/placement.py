"""Where a stage's roles run: the ``placement`` block (local, or Ray with per-role resources)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tether.config.base import option, section
from tether.common.errors import ConfigError

ROLES = ("actor", "reference", "critic", "reward")  # the RL stages' roles
FIELDS = ("num_workers", "num_cpus", "num_gpus", "resources")  # of each role's entry in placement.ray.roles


@dataclass(frozen=True)
class RoleResources:
    """What each Ray worker of one role's group reserves."""

    num_workers: int = option(
        1, "Workers (processes) of the group: data-parallel ranks for the actor and the critic "
           "(distributed.strategy), replicas that split each batch for the reference and the reward model.", ge=1)
    num_cpus: float = option(1.0, "CPUs each worker reserves (fractions let workers share a core).", ge=0)
    num_gpus: float = option(0.0, "GPUs each worker reserves (fractions let colocated groups share a GPU).", ge=0)
    resources: dict = option(
        factory=dict, help="Custom Ray resources each worker needs, e.g. {node_b: 1} to pin the group to a node "
                           "started with `ray start --resources '{\"node_b\": 1}'`.")


@dataclass(frozen=True)
class RayPlacementConfig:
    """The Ray cluster and where each role's group runs on it (docs/distributed.md)."""

    address: str = option(
        "", "The cluster: '' = start a local one on this machine, auto = the one `ray start` runs here, "
            "host:port or ray://host:10001 = a remote one.")
    colocate: list[list[str]] = option(
        factory=list, help="Roles that share worker processes (and so their resources: the first role's), e.g. "
                           "[[actor, reference], [critic, reward]]. Always together: the actor and a LoRA actor's "
                           "reference or a shared-trunk critic; a LoRA critic and the reward model it starts from.")
    resource_timeout_s: float = option(
        60.0, "Seconds to wait for the cluster to grant a group's resources before stopping with an error "
              "naming the role and what is missing.", gt=0)
    roles: dict = option(
        factory=dict, help="What each role's group reserves, by role: {ROLE: {num_workers, num_cpus, num_gpus, "
                           "resources}}, e.g. {actor: {num_workers: 2}, reward: {num_gpus: 0.5}}; a role or key left "
                           "out takes the default (1 worker, 1 CPU, 0 GPUs, no custom resources). num_workers: "
                           "processes of the group (data-parallel ranks for a trained model, replicas that split each "
                           "batch for a frozen one); num_cpus / num_gpus: what each worker reserves (fractions share "
                           "a core or a GPU); resources: custom Ray resources each worker needs, e.g. {node_b: 1} to "
                           "pin the group to a node started with `ray start --resources '{\"node_b\": 1}'`. The "
                           "actor's group also runs the rollout engine; the reward's serves a callable or URL "
                           "reward too.")

    def validate(self) -> None:
        from tether.config.base import from_dict

        if not all(isinstance(name, str) for name in self.roles):
            raise ConfigError(f"Config key 'placement.ray.roles' = {self.roles!r}: expected role names as keys.")
        for name, entry in self.roles.items():
            key = f"placement.ray.roles.{name}"
            if not isinstance(entry, dict):
                raise ConfigError(f"Config key '{key}' = {entry!r}: expected a mapping of {', '.join(FIELDS)}.")
            from_dict(RoleResources, entry, key + ".")  # unknown keys, types and ranges, named
            res = entry.get("resources") or {}
            for rkey, value in res.items():
                if not isinstance(rkey, str) or isinstance(value, bool) or not isinstance(value, (int, float)) \
                        or value < 0:
                    raise ConfigError(f"Config key '{key}.resources' = {res!r}: expected a mapping of resource "
                                      "names to non-negative numbers.")

    def resources(self, role: str) -> RoleResources:
        """What each worker of ``role``'s group reserves (the defaults for a role not listed)."""
        from tether.config.base import from_dict

        return from_dict(RoleResources, self.roles.get(role), f"placement.ray.roles.{role}.")

    def check_roles(self, names: tuple[str, ...]) -> None:
        """``colocate`` and ``roles`` name only the stage's roles ``names``."""
        for i, group in enumerate(self.colocate):
            for name in group:
                if name not in names:
                    raise ConfigError(f"Config key 'placement.ray.colocate[{i}]' names {name!r}: expected roles among "
                                      f"{list(names)}.")
        for name in self.roles:
            if name not in names:
                raise ConfigError(f"Config key 'placement.ray.roles' names {name!r}: expected roles among "
                                  f"{list(names)}.")


@dataclass(frozen=True)
class PlacementConfig:
    """Where the roles run."""

    backend: Literal["local", "ray"] = option(
        "local", "local = every role in this process (or in each torchrun rank); ray = each role's group as Ray "
                 "actors on a Ray cluster, the loop in this process.")
    ray: RayPlacementConfig = section(RayPlacementConfig, "The Ray placement (placement.backend=ray).")
