"""Asynchronous RL (``rollout.max_staleness`` >= 1): a worker process with its own copy of the
weights samples the next rollouts while the trainer trains, and a killed run resumes to the
uninterrupted one.

Runs use the tiny task with the base model as policy and the gold judge as a callable reward
(no SFT/RM training), as ``test_resume.py`` does.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tether.runs.checkpoint import complete_checkpoints
from tether.config import RLConfig, load_config
from tether.loops.rl_run import run_rl
from tether.runs import MANIFEST

from tests.integration.test_resume import _cli, comparable, kill_at_first_checkpoint, ppo_overrides, same_weights


def async_overrides(task_dir: Path, out: Path, *extra: str) -> list[str]:
    return [*ppo_overrides(task_dir, out), "rollout.max_staleness=1", *extra]


def metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def async_run(tiny_task, tmp_path_factory):
    """An uninterrupted PPO run at max_staleness=1 (4 iterations, a checkpoint after each)."""
    out = tmp_path_factory.mktemp("ppo-async") / "run"
    result = run_rl(load_config(RLConfig, None, async_overrides(tiny_task["dir"], out)))
    return out, result


def test_staleness_is_bounded_and_reported(async_run):
    out, result = async_run
    history = result["history"]
    lags = [row["rollout/staleness_max"] for row in history]
    # The first rollout is sampled by the first weights; each later one by the weights one update older.
    assert lags == [0.0, 1.0, 1.0, 1.0]
    assert [row["rollout/staleness_mean"] for row in history] == lags
    for row in history:
        assert row["timing/engine_generate"] > 0
        assert row["timing/engine_wait"] >= 0 and row["timing/rollout_wait"] >= 0
        # pi_old is the actor's recomputed log-probs: the first minibatch's ratio is 1.
        assert row["ppo/policy/ratio_mean"] == pytest.approx(1.0, abs=0.2)
    logged = metrics(out)
    assert any("rollout/staleness_max" in row for row in logged)


def test_async_run_differs_from_the_synchronous_one(async_run, tiny_task, tmp_path):
    """At staleness 1 iteration 2 trains on responses the first weights sampled, not the second:
    the runs part after iteration 1 (and the actor recomputes pi_old, so iteration 1 agrees)."""
    out, result = async_run
    sync = run_rl(load_config(RLConfig, None, ppo_overrides(tiny_task["dir"], tmp_path / "sync")))
    a, s = result["history"], sync["history"]
    assert a[0]["objective/score"] == pytest.approx(s[0]["objective/score"], abs=1e-6)
    assert a[0]["response/length_mean"] == s[0]["response/length_mean"]
    assert any(x["objective/kl"] != y["objective/kl"] for x, y in zip(a[1:], s[1:]))


class Interrupt(Exception):
    pass


def test_interrupted_async_run_resumes_bitwise(async_run, tiny_task, tmp_path):
    """Interrupted after iteration 3 (its checkpoint not written): the resumed run trains on the
    rollout saved in flight with checkpoint 2 and ends where the uninterrupted run ended."""
    reference, _ = async_run
    out = tmp_path / "run"
    cfg = load_config(RLConfig, None, async_overrides(tiny_task["dir"], out))

    def crash_after_third(it, stats, trainer):
        if it == 3:
            raise Interrupt

    with pytest.raises(Interrupt):
        run_rl(cfg, on_iteration=crash_after_third)
    assert [p.name for p in complete_checkpoints(out)] == ["step-000001", "step-000002"]
    run_rl(cfg, resume=True)
    assert comparable(out) == comparable(reference)
    assert same_weights(out, reference)


def test_sigkilled_async_run_resumes_to_the_uninterrupted_one(async_run, tiny_task, tmp_path):
    """SIGKILL of the trainer once its first checkpoint is complete (the worker process is left
    without a parent and exits), then `tether ppo --resume`."""
    reference, _ = async_run
    out = tmp_path / "run"
    kill_at_first_checkpoint(async_overrides(tiny_task["dir"], out), out)
    resumed = _cli(["ppo", "--resume", str(out)])
    assert resumed.returncode == 0, resumed.stderr
    assert (out / MANIFEST).exists()
    assert comparable(out) == comparable(reference)
    assert same_weights(out, reference)


@pytest.mark.parametrize("algorithm", ["grpo", "rloo"])
def test_critic_free_algorithms_train_asynchronously_with_the_correction(algorithm, tiny_task, tmp_path):
    """Every algorithm takes the worker's rollouts; with is_correction the worker's log-probs (of
    weights one update old) weigh the actor's recomputed pi_old."""
    from tether.algorithms import ALGORITHMS

    assert algorithm in ALGORITHMS
    overrides = [o for o in async_overrides(tiny_task["dir"], tmp_path / "run", "rollout.is_correction=tis",
                                            "rollout.is_cap=2.0", "group.size=2") if o != "critic.init=policy"]
    result = run_rl(load_config(RLConfig, None, [f"algorithm={algorithm}", *overrides, "rl.iterations=3",
                                                   "run.save_every=0"]))
    history = result["history"]
    assert [row["rollout/staleness_max"] for row in history] == [0.0, 1.0, 1.0]
    # At staleness 0 the worker holds the actor's weights: the weights are 1 up to float rounding.
    assert history[0]["rollout/is_weight_mean"] == pytest.approx(1.0, abs=1e-3)
    # At staleness 1 they are not all 1: the worker sampled from the weights before the last update.
    assert history[2]["rollout/is_weight_mean"] != pytest.approx(1.0, abs=1e-7)
    assert 0.5 < history[2]["rollout/is_weight_mean"] < 2.0


def test_the_dry_run_names_the_sampling_worker_and_starts_none(tiny_task, tmp_path, capsys):
    from tether.cli import main

    code = main(["ppo", *async_overrides(tiny_task["dir"], tmp_path / "run", "rollout.worker_threads=2"), "--dry-run"])
    out = capsys.readouterr().out
    assert code == 0
    assert "sampling worker (rollout.max_staleness=1): a process of its own with another copy of the policy" in out
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("extra", [
    ("lora.r=4", "lora.alpha=8"),  # the worker gets the merged weights under the base model's names
    ("critic.shared_trunk=true", "critic.optim.lr=1e-4"),  # the actor's weights without the value head
    ("rollout.engine=hf",),
], ids=["lora", "shared-trunk", "hf"])
def test_the_worker_samples_every_actor_kind(extra, tiny_task, tmp_path):
    """The first rollout is sampled by the actor's starting weights, so at staleness 0 the worker's
    log-probs are the actor's own: TIS weights of 1 up to rounding prove the worker holds them."""
    overrides = [o for o in async_overrides(tiny_task["dir"], tmp_path / "run", "rollout.is_correction=tis", *extra)
                 if not (o == "critic.init=policy" and "critic.shared_trunk=true" in extra)]
    result = run_rl(load_config(RLConfig, None, [*overrides, "rl.iterations=2", "run.save_every=0"]))
    first, second = result["history"]
    assert (first["rollout/staleness_max"], second["rollout/staleness_max"]) == (0.0, 1.0)
    assert first["rollout/is_weight_mean"] == pytest.approx(1.0, abs=1e-4)
    assert first["rollout/is_clipped_frac"] == 0.0


@pytest.mark.slow
def test_under_ray_the_worker_samples_beside_the_actor_and_gives_the_local_run(async_run, tiny_task, tmp_path):
    """placement.backend=ray: the sampler lives in the actor's Ray worker (its own child process), the
    loop in this process; the run is the local asynchronous run, bit for bit."""
    ray = pytest.importorskip("ray")
    reference, _ = async_run
    if ray.is_initialized():
        ray.shutdown()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    try:
        half = [f"placement.ray.roles={{{', '.join(f'{r}: {{num_cpus: 0.5}}' for r in ('actor', 'reference', 'critic', 'reward'))}}}"]
        out = tmp_path / "ray"
        result = run_rl(load_config(RLConfig, None, async_overrides(tiny_task["dir"], out, "placement.backend=ray",
                                                                      *half)))
        nodes = result["trainer"].placement.nodes()
        assert nodes["sampler"][0]["pid"] == nodes["actor"][0]["pid"] != os.getpid()
    finally:
        ray.shutdown()
    assert [row["rollout/staleness_max"] for row in result["history"]] == [0.0, 1.0, 1.0, 1.0]
    assert comparable(out) == comparable(reference)
    assert same_weights(out, reference)
