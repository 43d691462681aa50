"""The Ray placement, on real local Ray clusters: the same loop gives the local placement's run.

- one node, ``ray.init(num_cpus=2)``: a fixed-seed PPO run under ``placement.backend=ray``
  (every role its own Ray actor) gives the local run's metrics and weights, and its run
  directory has the same layout; with 2-worker actor and critic groups (FSDP inside) too;
- two nodes (``ray.cluster_utils.Cluster``): the critic pinned to the second node by a custom
  resource runs there, and the run is the same;
- faults: the critic's worker SIGKILLed mid-run stops the run with an error naming the role and
  the node, and ``--resume`` completes to the uninterrupted run's metrics; a cluster without the
  requested resources is an error naming the role and what is missing, before any wait.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from run_compare import largest_metric_diff, largest_weight_diff, layout, metrics

pytestmark = pytest.mark.slow

ray = pytest.importorskip("ray")  # requirements.lock installs it; a bare `pip install -e .` may not

HALF_CPU = [f"placement.ray.{role}.num_cpus=0.5" for role in ("actor", "reference", "critic", "reward")]


def ppo_overrides(trained, out: Path, *extra: str) -> list[str]:
    task = trained["task"]
    return [f"model.name_or_path={trained['sft']}", f"prompts={task / 'ppo_prompts.jsonl'}",
            f"reward.models=[{trained['rm']}]", "rl.iterations=3", "rollout.batch_size=8", "rl.minibatch_size=4",
            "rl.epochs=2", "rl.grad_accum_steps=2", "rollout.max_new_tokens=8", "run.save_every=1",
            "run.progress=false", "run.threads=1", "run.log_every=1",
            f"eval.prompts={task / 'eval_prompts.jsonl'}", "eval.judge=tether.tasks.arith.judge:gold_score",
            f"run.out={out}", *extra]


def run_rl_in_process(overrides: list[str]) -> dict:
    from tether.config import RLConfig, load_config
    from tether.loops.rl_run import run_rl

    return run_rl(load_config(RLConfig, None, overrides))


@pytest.fixture(scope="module")
def local_run(trained, tmp_path_factory):
    out = tmp_path_factory.mktemp("ray") / "local"
    run_rl_in_process(ppo_overrides(trained, out))
    return out


@pytest.fixture(scope="module")
def ray_run(trained, local_run, one_node, tmp_path_factory):
    out = tmp_path_factory.mktemp("ray") / "ray"
    result = run_rl_in_process(ppo_overrides(trained, out, "placement.backend=ray", *HALF_CPU))
    return out, result


def test_ray_placement_gives_the_local_run(local_run, ray_run):
    out, result = ray_run
    assert layout(out) == layout(local_run)
    # Every role ran in a worker of its own, not in this process.
    nodes = result["trainer"].placement.nodes()
    assert {"actor", "rollout", "reference", "critic", "reward"} <= set(nodes)
    pids = {role: info[0]["pid"] for role, info in nodes.items()}
    assert os.getpid() not in pids.values()
    assert len({pids["actor"], pids["reference"], pids["critic"], pids["reward"]}) == 4
    assert pids["rollout"] == pids["actor"]
    assert largest_metric_diff(local_run, out)[0] == 0.0  # the same draws, the same maths: bitwise
    assert largest_weight_diff(local_run, out) == 0.0


def test_online_dpo_under_ray_gives_the_local_run(trained, one_node, tmp_path):
    """Online DPO on the RL roles as Ray actors: sampled pairs, the reference's log-probs and the
    grouped update in workers give the local run bit for bit."""
    name = "online_" + "dpo"  # the registry spells the names
    extra = [f"algorithm={name}", "group.size=2", "rl.iterations=2", "rl.minibatch_size=8",
             "rl.grad_accum_steps=1", "run.save_every=0"]
    local, out = tmp_path / "od-local", tmp_path / "od-ray"
    run_rl_in_process(ppo_overrides(trained, local, *extra))
    run_rl_in_process(ppo_overrides(trained, out, *extra, "placement.backend=ray",
                                     *(c for c in HALF_CPU if ".critic." not in c)))
    assert layout(out) == layout(local)
    assert any(r.get("pairs/fraction", 0) > 0 for r in metrics(out))
    assert largest_metric_diff(local, out)[0] == 0.0 and largest_weight_diff(local, out) == 0.0


def test_data_parallel_groups_inside_ray(trained, one_node, tmp_path):
    """Actor and critic groups of 2 workers each (FSDP over their own process group) against one
    process; greedy-like sampling (top_k=1) so that the split of the prompts draws the same."""
    local = tmp_path / "local-topk1"
    run_rl_in_process(ppo_overrides(trained, local, "rollout.top_k=1"))
    out = tmp_path / "ray-groups"
    quarter = [f"placement.ray.{role}.num_cpus=0.25" for role in ("actor", "reference", "critic", "reward")]
    result = run_rl_in_process(ppo_overrides(
        trained, out, "rollout.top_k=1", "placement.backend=ray", *quarter, "placement.ray.roles.actor.num_workers=2",
        "placement.ray.roles.critic.num_workers=2", "distributed.strategy=fsdp"))
    assert len(result["trainer"].placement.nodes()["critic"]) == 2
    assert layout(out) == layout(local)
    largest_metric_diff(local, out)
    largest_weight_diff(local, out)


def test_cluster_without_the_resources_is_refused_at_once(trained, one_node, tmp_path):
    from tether.common.errors import ConfigError

    out = tmp_path / "no-gpu"
    with pytest.raises(ConfigError) as err:
        run_rl_in_process(ppo_overrides(trained, out, "placement.backend=ray", *HALF_CPU,
                                         "placement.ray.roles.critic.num_gpus=1"))
    text = str(err.value)
    assert "critic group (placement.ray.roles.critic" in text and "GPU: the cluster has 0, 1 needed" in text
    assert not out.exists()
    with pytest.raises(ConfigError, match="placement.ray.roles.actor.*CPU: the cluster has 2"):
        run_rl_in_process(ppo_overrides(trained, out, "placement.backend=ray", "placement.ray.roles.actor.num_cpus=3"))


def test_critic_on_the_second_node(trained, local_run, tmp_path):
    """Two Ray nodes on this machine; the critic needs a resource only the second one has."""
    from ray.cluster_utils import Cluster

    if ray.is_initialized():
        ray.shutdown()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2})
    second = cluster.add_node(num_cpus=1, resources={"second_node": 1})
    try:
        cluster.wait_for_nodes()
        out = tmp_path / "two-nodes"
        result = run_rl_in_process(ppo_overrides(
            trained, out, "placement.backend=ray", f"placement.ray.address={cluster.address}", *HALF_CPU,
            "placement.ray.roles.critic.resources={second_node: 1}"))
        nodes = result["trainer"].placement.nodes()
        assert nodes["critic"][0]["node_id"] == second.node_id
        assert nodes["actor"][0]["node_id"] != second.node_id
        assert metrics(out) == metrics(local_run)
        assert largest_weight_diff(local_run, out) == 0.0
    finally:
        if ray.is_initialized():
            ray.shutdown()
        cluster.shutdown()


def test_killed_role_worker_is_named_and_the_run_resumes(trained, local_run, tmp_path):
    """Subprocesses (each starts its own local cluster): a run whose critic worker SIGKILLs itself at
    its third values call, resumed, ends as the uninterrupted run (the local one: a Ray run is that
    run bit for bit, test_ray_placement_gives_the_local_run)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    full, killed = local_run, tmp_path / "killed"
    args = lambda out: [sys.executable, "-m", "tether.cli", "ppo",  # noqa: E731
                        *ppo_overrides(trained, out, "placement.backend=ray", *HALF_CPU)]
    stopped = subprocess.run(args(killed), capture_output=True, text=True, timeout=600,
                             env={**env, "TETHER_FAULT": "ray-critic-values:3"})
    assert stopped.returncode != 0
    assert "The critic role group's Ray worker died during critic.values (worker 0 on" in stopped.stderr
    assert "Traceback" not in stopped.stderr
    assert sorted(p.name for p in (killed / "checkpoints").iterdir()) == ["step-000001", "step-000002"]
    resumed = subprocess.run([sys.executable, "-m", "tether.cli", "ppo", "--resume", str(killed)],
                             capture_output=True, text=True, timeout=600, env=env)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resuming from step 2 of 3" in resumed.stderr
    assert metrics(killed) == metrics(full)
    assert largest_weight_diff(full, killed) == 0.0
