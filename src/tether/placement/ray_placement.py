"""The Ray placement: each role group as Ray actors on a cluster, the loop in this process.

``placement.backend: ray``. The roles are grouped (:func:`tether.roles.groups.role_groups`: the
rollout engine lives with the actor, and so do a LoRA actor's reference and a shared-trunk
critic; ``placement.ray.colocate`` adds groups); each group is ``num_workers`` Ray actors
(:class:`~tether.placement.ray_worker.RoleWorker`) in a placement group of its own, so a
cluster that cannot hold it says so instead of waiting forever. A group of several workers is
a torch.distributed process group: the actor and the critic train data parallel over it.

Calls are the local placement's: synchronous, or submitted and waited for together (then the
actor's and the critic's updates run at once, on their own workers). Reading calls (sampling,
log-probs, values, scores) split their batch over the group's workers and gather the results in
order; other calls (updates, checkpoints, state) go to every worker of the group and return
the first worker's answer (data-parallel engines agree). Which is which is the role method's
own declaration (:mod:`tether.common.dispatch`); this driver holds no role objects, so each group's
first worker reports its roles' declarations when it has built them. Arguments travel once through Ray's
object store per call, whatever the number of workers.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import torch

from tether.common.dispatch import ALL, PROMPTS, ROWS, split_prompts
from tether.distributed.shard import concat, head, shard_rows
from tether.common.errors import ConfigError, TetherError, TrainingError, one_line
from tether.rollout.base import concat_rollouts
from tether.common.services import RAY_HINT, bound_text, check_ray, ray_env, scoped_env
from tether.common.runtime import rank_seed

RAY_VERSION = "2.60.0"
PRIORITY = ("actor", "critic", "reference", "reward")


def _notice(text: str) -> None:
    import sys

    print(f"tether: {text}", file=sys.stderr, flush=True)


def import_ray():
    """``ray``, or one paragraph saying how to install it."""
    try:
        import ray
    except ImportError as err:
        raise ConfigError(
            "Config key 'placement.backend' = 'ray', but Ray is not installed in this environment. Install it with "
            f"`pip install 'ray=={RAY_VERSION}'` (the version tether is tested with; requirements.lock pins it), "
            "or run with placement.backend=local.") from err
    return ray


@dataclass
class Group:
    """The workers of one role group and where they run."""

    roles: tuple[str, ...]
    primary: str  # whose placement.ray.roles.<role> resources it uses
    workers: list = field(default_factory=list)
    nodes: list[dict] = field(default_factory=list)
    placement_group: object = None


def primary_role(group: tuple[str, ...], colocate) -> str:
    for entry in colocate:
        if entry and entry[0] in group:
            return entry[0]
    return next((name for name in PRIORITY if name in group), group[0])


def bundle(res) -> dict:
    out = {"CPU": float(res.num_cpus)}
    if res.num_gpus:
        out["GPU"] = float(res.num_gpus)
    out.update({k: float(v) for k, v in res.resources.items()})
    return out


def missing_resources(needed: dict, cluster: dict) -> dict:
    """Resource name -> (needed, the cluster's total) for each the cluster cannot cover at all."""
    return {k: (v, cluster.get(k, 0.0)) for k, v in needed.items() if v > cluster.get(k, 0.0) + 1e-9}


def describe(resources: dict) -> str:
    return ", ".join(f"{k}: {v:g}" for k, v in sorted(resources.items())) or "nothing"


class RayPlacement:
    """The roles of a stage's config on a Ray cluster (see the module).

    ``groups``: the role groups (default: an RL config's, :func:`tether.roles.groups.role_groups`);
    ``build``: 'module:function' that builds a group's roles in its workers, called as
    ``build(cfg, checkpoint, needed=group)`` (default: the RL roles' ``build_roles``)."""

    def __init__(self, cfg, checkpoint=None, pad_id: int = 0, groups: list[tuple[str, ...]] | None = None,
                 build: str = "tether.roles.build:build_roles"):
        # Ray reads its GCS client's connect timeout when it is first imported: bound it before then.
        with scoped_env(ray_env() if cfg.placement.ray.address.strip() else {}):
            self.ray = import_ray()
        from tether.config import to_dict
        from tether.roles.groups import role_groups

        self.cfg, rcfg = cfg, cfg.placement.ray
        self.pad_id = pad_id
        self.timeout = cfg.distributed.timeout_s
        names = groups if groups is not None else role_groups(cfg, rcfg.colocate)
        groups = [Group(group, primary_role(group, rcfg.colocate)) for group in names]
        # What a worker builds: the stage's config (by class) and its roles builder.
        self.build = (f"{type(cfg).__module__}:{type(cfg).__qualname__}", build)
        self.started = self._connect(groups)
        self.groups: list[Group] = []
        self.route: dict[str, Group] = {}
        self.contexts: dict = {}
        self.dispatch: dict[str, dict[str, str]] = {}  # role -> {method: kind}, as its workers declare
        self._puts: dict[int, tuple[object, object]] = {}
        cfg_dict = to_dict(cfg)
        try:
            self._check_cluster(groups)
            for group in groups:
                self._start(group, cfg_dict, checkpoint)
                self.groups.append(group)
                for name in group.roles:
                    self.route[name] = group
                if "actor" in group.roles:  # the engine, and a sampling worker (rollout.max_staleness), live with it
                    self.route["rollout"] = group
                    self.route["sampler"] = group
        except BaseException:
            self.close()
            raise

    # -- cluster -------------------------------------------------------------------------------
    def _connect(self, groups: list[Group]) -> bool:
        """Join the configured cluster, or start a local one; True when this call started it."""
        ray, address = self.ray, self.cfg.placement.ray.address
        if ray.is_initialized():
            return False
        quiet = dict(include_dashboard=False, log_to_driver=False, logging_level="ERROR")
        if address:
            self._join(address, quiet)
            return True
        wanted = sum(self._resources(g).num_cpus * self._resources(g).num_workers for g in groups)
        cores = os.cpu_count() or 1
        cpus = max(cores, int(-(-wanted // 1)))
        if cpus > cores:
            _notice(f"starting a local Ray cluster with {cpus} logical CPUs on {cores} cores: the role groups "
                   f"reserve {wanted:g} (placement.ray.roles.<role>.num_cpus x num_workers).")
        ray.init(num_cpus=cpus, **quiet)
        return True

    def _join(self, address: str, quiet: dict) -> None:
        """``ray.init(address)`` within the services' bound (:mod:`tether.common.services`): the cluster is
        checked first (a refused, dropped or silent address fails in at most T s, where Ray alone
        retries for minutes), then Ray gets one connection attempt."""
        ray = self.ray
        check_ray(address, ray.util.get_node_ip_address)
        with scoped_env(ray_env()):
            try:
                ray.init(address=address, **quiet)
            except Exception as err:  # ConnectionError, RuntimeError, ValueError: Ray's reason, in one paragraph
                reason = one_line(err, 300) or type(err).__name__
                raise ConfigError(f"Could not join the Ray cluster at {address!r} (placement.ray.address): "
                                  f"{type(err).__name__}: {reason}. {RAY_HINT} {bound_text()}") from None

    def _resources(self, group: Group):
        """``placement.ray.roles.<primary role>``: what each of the group's workers reserves."""
        return self.cfg.placement.ray.resources(group.primary)

    def _check_cluster(self, groups: list[Group]) -> None:
        """Every group's resources, added up, against the cluster's: what it cannot hold at all is
        an error before any worker starts (a placement group would wait for it forever)."""
        cluster, taken = self.ray.cluster_resources(), {}
        for group in groups:
            res = self._resources(group)
            need = {k: v * res.num_workers for k, v in bundle(res).items()}
            lacking = missing_resources({k: taken.get(k, 0.0) + v for k, v in need.items()}, cluster)
            if lacking:
                key = f"placement.ray.roles.{group.primary}"
                before = f" after the groups before it ({describe(taken)})" if taken else ""
                raise ConfigError(
                    f"The Ray cluster cannot hold the {'+'.join(group.roles)} group ({key}: {res.num_workers} "
                    f"worker(s) x {{{describe(bundle(res))}}}){before}: "
                    + ", ".join(f"{k}: the cluster has {have:g}, {need_:g} needed" for k, (need_, have) in lacking.items())
                    + f". Lower {key}.num_cpus / num_gpus / num_workers, drop {key}.resources, colocate roles "
                      "(placement.ray.colocate), or add nodes.")
            for k, v in need.items():
                taken[k] = taken.get(k, 0.0) + v

    def _start(self, group: Group, cfg_dict: dict, checkpoint) -> None:
        ray = self.ray
        from ray.util.placement_group import placement_group, remove_placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        from tether.placement.ray_worker import RoleWorker

        rcfg = self.cfg.placement.ray
        res = self._resources(group)
        one = bundle(res)
        key = f"placement.ray.roles.{group.primary}"
        what = f"the {'+'.join(group.roles)} group ({key}: {res.num_workers} worker(s) x {{{describe(one)}}})"
        pg = placement_group([dict(one) for _ in range(res.num_workers)], strategy="PACK")
        group.placement_group = pg
        ready, _ = ray.wait([pg.ready()], timeout=rcfg.resource_timeout_s)
        if not ready:
            remove_placement_group(pg)
            group.placement_group = None
            raise ConfigError(
                f"The Ray cluster did not grant {what} within placement.ray.resource_timeout_s = "
                f"{rcfg.resource_timeout_s:g} s: it has {describe(ray.cluster_resources())} in all and "
                f"{describe(ray.available_resources())} free (other groups or jobs hold the rest, or no single node "
                f"has a worker's {{{describe(one)}}}).")
        threads = self.cfg.run.threads or max(1, int(res.num_cpus))
        env = {"OMP_NUM_THREADS": str(threads), "TOKENIZERS_PARALLELISM": "false",
               **{k: os.environ[k] for k in ("HF_HUB_OFFLINE", "TETHER_FAULT", "HF_HOME") if k in os.environ}}
        actor_cls = ray.remote(RoleWorker)
        group.workers = [
            actor_cls.options(num_cpus=res.num_cpus, num_gpus=res.num_gpus, resources=dict(res.resources) or None,
                              scheduling_strategy=PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=i),
                              runtime_env={"env_vars": env}, max_concurrency=1)
            .remote(group.roles, i, res.num_workers, env)
            for i in range(res.num_workers)
        ]
        group.nodes = self._get(group, "start", [w.node.remote() for w in group.workers])
        master = self._get(group, "start", group.workers[0].address.remote()) if res.num_workers > 1 else None
        checkpoint = str(checkpoint) if checkpoint is not None else None
        infos = self._get(group, "build", [w.build.remote(cfg_dict, checkpoint, threads, master, *self.build)
                                           for w in group.workers])
        self.contexts.update(infos[0]["contexts"])
        self.dispatch.update(infos[0]["dispatch"])

    # -- the placement interface -----------------------------------------------------------------
    def has(self, role: str) -> bool:
        return role in self.route

    def call(self, role: str, method: str, *args, **kwargs):
        return self.wait([self.submit(role, method, *args, **kwargs)])[0]

    def submit(self, role: str, method: str, *args, **kwargs):
        group = self.route.get(role)
        if group is None:
            raise KeyError(f"no role {role!r} is placed (placed: {sorted(self.route)})")
        n = len(group.workers)
        kind = self.dispatch.get(role, {}).get(method, ALL)
        if kind == PROMPTS:
            return self._generate(group, role, method, *args, **kwargs)
        if kind == ROWS and n > 1:
            rows = len(args[0])
            refs = [w.call.remote(role, method, None, kwargs, shard_rows(args[0], rows, r, n)[0],
                                  *[self._put(a) for a in args[1:]])
                    for r, w in enumerate(group.workers)]
            return (group, f"{role}.{method}", refs, lambda parts: head(concat(parts), rows))
        put = [self._put(a) for a in args]
        refs = [w.call.remote(role, method, None, kwargs, *put) for w in group.workers]
        return (group, f"{role}.{method}", refs, lambda parts: parts[0])

    def wait(self, handles: list) -> list:
        out = []
        try:
            for group, what, refs, finish in handles:
                out.append(finish(self._get(group, what, refs)))
        finally:
            self._puts.clear()
        return out

    def parallel(self) -> bool:
        """The actor's and the critic's updates run at once (on their own workers)."""
        actor, critic = self.route.get("actor"), self.route.get("critic")
        return critic is not None and actor is not critic

    def nodes(self) -> dict[str, list[dict]]:
        """Role -> where each of its group's workers runs (ip, host, pid, node_id)."""
        return {role: group.nodes for role, group in self.route.items()}

    def close(self) -> None:
        ray = self.ray
        for group in getattr(self, "groups", []):
            for worker in group.workers:
                try:
                    ray.kill(worker)
                except Exception:  # already dead
                    pass
            if group.placement_group is not None:
                try:
                    from ray.util.placement_group import remove_placement_group

                    remove_placement_group(group.placement_group)
                except Exception:
                    pass
        self.groups = []
        if getattr(self, "started", False) and ray.is_initialized():
            ray.shutdown()
            self.started = False

    # -- helpers ---------------------------------------------------------------------------------
    def _generate(self, group: Group, role: str, method: str, prompt_ids, prompts, params, seed=None,
                  chunk_size=None, on_step=None, **extra):
        """``role.method`` (declared ``@prompts``): each worker samples its share of the prompts (and
        of the prompt-aligned keyword arguments: :func:`tether.common.dispatch.split_prompts`); the
        rollouts come back as one, in order.
        Without ``seed`` the worker starts from this process's current torch seed (the loop's
        iteration seed): the same draws as a local run. Per-step hooks cannot run in a worker."""
        if on_step is not None:
            raise ValueError("placement.backend=ray cannot run per-step generation hooks (stop sequences) in a "
                             "worker: use placement.backend=local")
        n, workers = len(prompt_ids), group.workers
        base = torch.initial_seed() if seed is None else seed
        refs = []
        for r, w in enumerate(workers):
            share = (lambda v, r=r: shard_rows(v, n, r, len(workers))[0]) if len(workers) > 1 else (lambda v: v)
            ids, texts, aligned = split_prompts(share, prompt_ids, prompts, extra)  # an episode engine's rows too
            s = base if r == 0 else rank_seed(base, 0, r)
            # No seed: the worker seeds torch with s first; a seed: the engine's own private stream.
            kwargs = {"chunk_size": chunk_size, **aligned, **({} if seed is None else {"seed": s})}
            refs.append(w.call.remote(role, method, s if seed is None else None, kwargs, ids, texts, params))

        def finish(parts):
            if len(parts) == 1:
                return parts[0]
            whole = concat_rollouts(parts, self.pad_id)
            return head(whole, n)

        return (group, f"{role}.{method}", refs, finish)

    def _put(self, value):
        """``value`` in the object store once per call batch (an experience sent to both updates)."""
        if isinstance(value, (int, float, str, bool, type(None))):
            return value
        key = id(value)
        if key not in self._puts:
            self._puts[key] = (value, self.ray.put(value))
        return self._puts[key][1]

    def _get(self, group: Group, what: str, refs):
        """``ray.get`` with the run's timeout; a dead worker or an error in it named by role and node."""
        ray = self.ray
        from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

        try:
            return ray.get(refs, timeout=self.timeout)
        except RayTaskError as err:
            cause = getattr(err, "cause", None)
            if isinstance(cause, TetherError):
                raise cause from None
            raise
        except RayActorError as err:
            where = "; ".join(f"worker {i} on {n['host']} ({n['ip']})" for i, n in enumerate(group.nodes)) \
                or "a worker being started"
            raise TrainingError(
                f"The {'+'.join(group.roles)} role group's Ray worker died during {what} ({where}): "
                f"{one_line(str(err).splitlines()[0], 200).rstrip('.')}. The last complete checkpoint in run.out stays valid; continue "
                "with --resume RUN_DIR.") from None
        except GetTimeoutError:
            raise TrainingError(
                f"The {'+'.join(group.roles)} role group did not answer {what} within distributed.timeout_s = "
                f"{self.timeout:g} s. The last complete checkpoint in run.out stays valid.") from None
