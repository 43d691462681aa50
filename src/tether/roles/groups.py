"""Which RL roles a config runs and which must share a process: the rollout engine samples from
the actor's weights, a LoRA actor's base is the reference, a shared-trunk critic is a head on the
actor, a LoRA critic's base is the reward model. The Ray placement starts one group of workers
per group here; the dry run prints their resources."""

from __future__ import annotations

from tether.config import RLConfig
from tether.roles.sources import shares_reward_base

ROLE_NAMES = ("actor", "reference", "critic", "reward")


def role_names(cfg: RLConfig) -> tuple[str, ...]:
    """The roles ``cfg``'s algorithm runs: all four, no critic (grpo, rloo, reinforce_pp), or
    neither critic nor reward (distill: its registry entry's ``needs_reward``)."""
    from tether.registry.algorithms import algorithm_spec

    skip = {*(() if cfg.needs_critic else ("critic",)), *(() if algorithm_spec(cfg.algorithm).needs_reward else ("reward",))}
    return tuple(n for n in ROLE_NAMES if n not in skip)


def role_groups(cfg: RLConfig, colocate: list[list[str]] = ()) -> list[tuple[str, ...]]:
    """The roles that must share a process, plus ``colocate``'s groups: the rollout engine samples
    from the actor's weights; a LoRA actor's base is the reference; a shared-trunk critic is a head
    on the actor; a LoRA critic's base is the reward model. Returns the groups (roles in
    :data:`ROLE_NAMES` order), the actor's group first."""
    names = role_names(cfg)
    parent = {name: name for name in names}

    def find(x):
        while parent[x] != x:
            x = parent[x]
        return x

    def join(a, b):
        parent[find(a)] = find(b)

    if cfg.lora.enabled and not cfg.reference and not cfg.distill.teacher_url:
        join("reference", "actor")
    if cfg.critic.shared_trunk and "critic" in names:
        join("critic", "actor")
    if shares_reward_base(cfg) and "critic" in names:
        join("reward", "critic")
    for group in colocate:
        group = [name for name in group if name in names]
        for name in group[1:]:
            join(name, group[0])
    groups: dict[str, list[str]] = {}
    for name in names:
        groups.setdefault(find(name), []).append(name)
    return sorted((tuple(g) for g in groups.values()), key=lambda g: ("actor" not in g, g))
