"""The dry run's Ray lines show the resources the run reserves: a group takes its primary role's
(the first role of its ``placement.ray.colocate`` entry), whatever the default role order."""

from __future__ import annotations

from tether.config import RLConfig, load_config
from tether.placement.ray_placement import primary_role
from tether.plan.dry_run import Plan, _placement
from tether.roles.groups import role_groups


def test_a_colocated_group_shows_its_primary_roles_resources():
    cfg = load_config(RLConfig, None, [
        "model.name_or_path=m", "prompts=p.jsonl", "reward.models=[rm]", "placement.backend=ray",
        "placement.ray.colocate=[[reward, critic]]",
        "placement.ray.roles={reward: {num_cpus: 0.5}, critic: {num_cpus: 2}}"])
    plan = Plan("ppo")
    _placement(plan, cfg)
    line = next(row for row in plan.sections["placement"] if "critic + reward" in row)
    group = next(g for g in role_groups(cfg, cfg.placement.ray.colocate) if "critic" in g)
    assert primary_role(group, cfg.placement.ray.colocate) == "reward"
    assert "(placement.ray.roles.reward)" in line and "0.5 CPU" in line, line
