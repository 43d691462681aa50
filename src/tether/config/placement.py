"""Where the RL roles run: the ``placement`` block (local, or Ray with per-role resources)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tether.config.base import option, section
from tether.errors import ConfigError

ROLES = ("actor", "reference", "critic", "reward")


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
    actor: RoleResources = section(RoleResources, "The actor's group (with the rollout engine).")
    reference: RoleResources = section(RoleResources, "The reference's group.")
    critic: RoleResources = section(RoleResources, "The critic's group.")
    reward: RoleResources = section(RoleResources, "The reward model's group (a callable or URL reward too).")

    def validate(self) -> None:
        for i, group in enumerate(self.colocate):
            for name in group:
                if name not in ROLES:
                    raise ConfigError(f"Config key 'placement.ray.colocate[{i}]' names {name!r}: expected roles among "
                                      f"{list(ROLES)}.")
        for role in ROLES:
            res = getattr(self, role).resources
            for key, value in res.items():
                if not isinstance(key, str) or isinstance(value, bool) or not isinstance(value, (int, float)) \
                        or value < 0:
                    raise ConfigError(f"Config key 'placement.ray.{role}.resources' = {res!r}: expected a mapping of "
                                      "resource names to non-negative numbers.")


@dataclass(frozen=True)
class PlacementConfig:
    """Where the roles run."""

    backend: Literal["local", "ray"] = option(
        "local", "local = every role in this process (or in each torchrun rank); ray = each role's group as Ray "
                 "actors on a Ray cluster, the loop in this process.")
    ray: RayPlacementConfig = section(RayPlacementConfig, "The Ray placement (placement.backend=ray).")
