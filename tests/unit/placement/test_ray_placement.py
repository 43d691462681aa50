"""The Ray placement's pure parts: which roles share a process, what a group asks the cluster
for, what is missing, and the paragraph when Ray is not installed (no cluster needed)."""

from __future__ import annotations

import sys

import pytest

from tether.config import RLConfig, load_config
from tether.common.errors import ConfigError
from tether.placement.ray_placement import bundle, describe, import_ray, missing_resources, primary_role
from tether.roles.groups import role_groups

BASE = ["model.name_or_path=m", "prompts=p.jsonl", "reward.models=[rm]"]


def cfg(*extra: str) -> RLConfig:
    ray = ["placement.backend=ray"] if any(e.startswith("placement.ray.") for e in extra) else []
    return load_config(RLConfig, None, [*BASE, *ray, *extra])


def test_every_role_alone_by_default():
    assert role_groups(cfg()) == [("actor",), ("critic",), ("reference",), ("reward",)]


def test_forced_colocations():
    # A LoRA actor's base is the reference; a LoRA critic from the one RM has it as its base.
    assert role_groups(cfg("lora.r=4", "critic.lora.r=4")) == [("actor", "reference"), ("critic", "reward")]
    # A shared-trunk critic is a head on the actor.
    assert role_groups(cfg("critic.shared_trunk=true")) == [("actor", "critic"), ("reference",), ("reward",)]
    # A separate reference checkpoint keeps the LoRA actor's reference its own.
    assert role_groups(cfg("lora.r=4", "reference=ref")) == [("actor",), ("critic",), ("reference",), ("reward",)]


def test_colocate_joins_groups_and_its_first_role_gives_the_resources():
    c = cfg("placement.ray.colocate=[[reward, critic], [actor, reference]]")
    groups = role_groups(c, c.placement.ray.colocate)
    assert groups == [("actor", "reference"), ("critic", "reward")]
    assert [primary_role(g, c.placement.ray.colocate) for g in groups] == ["actor", "reward"]
    assert primary_role(("critic", "reference"), []) == "critic"


def test_bundle_and_missing_resources():
    c = cfg("placement.ray.roles.critic.num_gpus=0.5", "placement.ray.roles.critic.resources={node_b: 1}")
    assert bundle(c.placement.ray.resources("critic")) == {"CPU": 1.0, "GPU": 0.5, "node_b": 1.0}
    assert bundle(c.placement.ray.resources("actor")) == {"CPU": 1.0}
    cluster = {"CPU": 2.0, "memory": 1e9}
    assert missing_resources({"CPU": 2.0, "GPU": 0.5, "node_b": 1.0}, cluster) == {"GPU": (0.5, 0.0),
                                                                                   "node_b": (1.0, 0.0)}
    assert missing_resources({"CPU": 2.5}, cluster) == {"CPU": (2.5, 2.0)}
    assert missing_resources({"CPU": 2.0}, cluster) == {}
    assert describe({"GPU": 1.0, "CPU": 0.5}) == "CPU: 0.5, GPU: 1"


def test_config_names_bad_colocate_and_resources():
    with pytest.raises(ConfigError, match=r"placement.ray.colocate\[0\]' names 'policy'"):
        cfg("placement.ray.colocate=[[policy, critic]]")
    with pytest.raises(ConfigError, match="placement.ray.roles.reward.resources"):
        cfg("placement.ray.roles.reward.resources={node_b: -1}")


def test_ray_not_installed_is_one_paragraph(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now raises ImportError
    with pytest.raises(ConfigError) as err:
        import_ray()
    text = str(err.value)
    assert "placement.backend' = 'ray'" in text and "pip install 'ray==" in text and "placement.backend=local" in text
