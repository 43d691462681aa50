"""Where roles run. The loops hold a :class:`~tether.placement.base.Placement` and role proxies;
this package decides what is behind them: every role in this process
(:class:`~tether.placement.local.LocalPlacement`), or in every process of a torchrun launch,
each taking its share of the batch (:class:`~tether.placement.data_parallel.DataParallelPlacement`)."""

from __future__ import annotations

import logging

from tether.placement.base import Placement, RoleProxy, role
from tether.placement.data_parallel import DataParallelPlacement
from tether.placement.local import LocalPlacement
from tether.common.runtime import world_size

log = logging.getLogger(__name__)


def local_placement(cfg, roles) -> LocalPlacement:
    """The roles of ``roles`` (:class:`tether.roles.build.Roles`) in this process. The actor's and
    the critic's updates run side by side when ``cpu.parallel_roles`` is on and they run on a CPU
    (two threads compiling at once deadlocked in dynamo: not with ``rl.compile``)."""
    on_cpu = roles.actor.engine.device.type == "cpu"
    parallel = cfg.cpu.parallel_roles and on_cpu and world_size() == 1
    if parallel and cfg.rl.compile:
        log.warning("rl.compile is on: the actor's and the critic's update passes run one after the "
                    "other (cpu.parallel_roles ignored; torch.compile in two threads at once can deadlock).")
        parallel = False
    return LocalPlacement(roles.placed(), parallel=parallel)


def place_roles(cfg, roles):
    """The placement of built roles: in this process, or (under torchrun) on every rank, each
    taking its share of every batch."""
    placement = local_placement(cfg, roles)
    if world_size() > 1:
        placement = DataParallelPlacement(placement, roles.tokenizer.pad_token_id, roles.actor.engine.gathered)
    return placement


def _refuse_torchrun() -> None:
    from tether.common.errors import ConfigError

    if world_size() > 1:
        raise ConfigError("Config key 'placement.backend' = 'ray' under torchrun: a Ray placement starts its own "
                          "processes (placement.ray.roles.<role>.num_workers make data-parallel groups); launch it "
                          "without torchrun.")


def make_ray_placement(cfg, checkpoint=None):
    """(the Ray placement of ``cfg``'s roles, the policy's tokenizer, the models' context lengths)."""
    from tether.models import load_tokenizer
    from tether.placement.ray_placement import RayPlacement

    _refuse_torchrun()
    tokenizer = load_tokenizer(cfg.model.tokenizer or cfg.model.name_or_path,
                               key="model.tokenizer" if cfg.model.tokenizer else "model.name_or_path")
    placement = RayPlacement(cfg, checkpoint, tokenizer.pad_token_id)
    return placement, tokenizer, placement.contexts


def make_stage_placement(cfg, role_name: str, build: str, checkpoint=None, pad_id: int = 0):
    """The Ray placement of a supervised stage's one trained role (``role_name``: one group of
    ``placement.ray.roles.<role_name>.num_workers`` workers), each worker building it with
    ``build`` ('module:function', :class:`tether.loops.stage.StageBody`'s) from ``cfg`` and,
    when resuming, ``checkpoint``."""
    from tether.placement.ray_placement import RayPlacement

    _refuse_torchrun()
    return RayPlacement(cfg, checkpoint, pad_id, groups=[(role_name,)], build=build)


def make_placement(cfg, checkpoint=None):
    """The placement of an RL config's roles, built from ``checkpoint`` when resuming; returns
    (placement, the policy's tokenizer, each model's context length by name)."""
    from tether.roles.build import build_roles

    if cfg.placement.backend == "ray":
        return make_ray_placement(cfg, checkpoint)
    roles = build_roles(cfg, checkpoint)
    return place_roles(cfg, roles), roles.tokenizer, roles.contexts


__all__ = ["DataParallelPlacement", "LocalPlacement", "Placement", "RoleProxy", "local_placement", "make_placement",
           "make_stage_placement", "place_roles", "role"]
