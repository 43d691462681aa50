"""One process of a role group on a Ray cluster: it builds its group's roles and runs their
methods for the driver (:mod:`tether.placement.ray_placement`).

A plain class: the placement makes it a Ray actor (``ray.remote(RoleWorker)``), so importing
this module needs no Ray. A group of several workers is a torch.distributed process group of
its own (gloo on CPUs, NCCL on GPUs; the address comes from the group's first worker): the
actor's and the critic's engines wrap their models in DDP or FSDP2 over it, as under torchrun.
"""

from __future__ import annotations

import inspect
import os
import socket

import torch


class RoleWorker:
    """Builds the roles of ``group`` (names among actor, reference, critic, reward; a supervised
    stage's trained role) from a stage's config dict and, with ``checkpoint``, a run's checkpoint."""

    def __init__(self, group: tuple[str, ...], rank: int, world: int, env: dict[str, str]):
        os.environ.update(env)
        self.group, self.rank, self.world = group, rank, world
        self.roles: dict = {}
        self.session = None

    # -- set-up ------------------------------------------------------------------------------
    def address(self) -> tuple[str, int]:
        """This node's address and a free port: the rendezvous of the group's process group."""
        import ray

        with socket.socket() as s:
            s.bind(("", 0))
            port = s.getsockname()[1]
        return ray.util.get_node_ip_address(), port

    def node(self) -> dict:
        import ray

        return {"ip": ray.util.get_node_ip_address(), "host": socket.gethostname(), "pid": os.getpid(),
                "node_id": ray.get_runtime_context().get_node_id()}

    def build(self, cfg_dict: dict, checkpoint: str | None, threads: int, master: tuple[str, int] | None,
              config_class: str = "tether.config:RLConfig", build: str = "tether.roles.build:build_roles") -> dict:
        """Join the group's process group (several workers), build the roles with ``build``
        ('module:function', called as ``build(cfg, checkpoint, needed=group)``) from a config of
        ``config_class``; returns what the driver needs: each model's context length, the placed
        role names and how each role's methods are dispatched (:func:`tether.common.dispatch.declarations`:
        the driver holds no roles)."""
        from pathlib import Path

        from tether.config import from_dict
        from tether.common.dispatch import declarations
        from tether.distributed.process import DistributedSession
        from tether.common.targets import import_callable
        from tether.runs import seed_everything

        cfg = from_dict(import_callable(config_class, "the stage's config class"), cfg_dict)
        build_roles = import_callable(build, "the stage's roles builder")
        torch.set_num_threads(max(1, threads))
        seed_everything(cfg.run.seed)
        if self.world > 1:
            os.environ.update({"MASTER_ADDR": master[0], "MASTER_PORT": str(master[1]), "RANK": str(self.rank),
                               "LOCAL_RANK": "0", "WORLD_SIZE": str(self.world)})
            self.session = DistributedSession(cfg.run.device, cfg.distributed.timeout_s, cfg.distributed.backend)
            self.session.__enter__()
        roles = build_roles(cfg, Path(checkpoint) if checkpoint else None, needed=self.group)
        self.roles = roles.placed()
        return {"contexts": roles.contexts, "roles": sorted(self.roles), "dispatch": declarations(self.roles)}

    # -- calls ---------------------------------------------------------------------------------
    def call(self, role: str, method: str, seed: int | None, kwargs: dict, *args):
        """``role.method(*args, **kwargs)``; ``seed``: seed torch first (the driver's iteration seed,
        so that sampling draws what a local run draws). Tensors come back on the CPU, generators
        as lists."""
        from tether.common.dispatch import PROMPTS, dispatch_of
        from tether.runs import fault_point
        from tether.types import to_device

        fault_point(f"ray-{role}-{method}")
        if seed is not None:
            torch.manual_seed(seed)
        target = self.roles[role]
        if dispatch_of(target, method) == PROMPTS and "actor" in self.roles:
            with self.roles["actor"].engine.gathered():  # FSDP: whole weights for uneven decode steps
                out = getattr(target, method)(*args, **kwargs)
        else:
            out = getattr(target, method)(*args, **kwargs)
        if inspect.isgenerator(out):
            out = list(out)
        return to_device(out, "cpu")

    def close(self) -> None:
        if self.session is not None:
            self.session.__exit__(None, None, None)
            self.session = None
