"""Data parallel under torchrun, for real: 2 gloo processes on this CPU against 1 process.

- Equivalence: SFT, RM and PPO with 2 ranks x half the per-rank batch give the metrics and the
  final weights of 1 process x the whole batch (DDP and FSDP2; PPO with LoRA under FSDP too),
  and the same run directory layout. PPO samples with top_k=1 so that the rollouts do not
  depend on which rank's random stream drew them.
- Faults: a rank SIGKILLed mid-run -> the other exits non-zero within 60 s naming it; the run
  resumes from its last checkpoint to the uninterrupted run's metrics and weights, exactly.
- A checkpoint written by 2 ranks resumes in 1 process; a batch that does not split over the
  ranks is a config error naming both numbers.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from run_compare import largest_metric_diff, largest_weight_diff, layout, metrics
from stage_helpers import rm_overrides, sft_overrides

pytestmark = pytest.mark.slow



def torchrun(args: list[str], nproc: int = 2, env: dict | None = None, timeout: float = 300):
    """``torchrun --standalone --nproc-per-node N -m tether.cli ARGS`` (one torch thread per rank)."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
           "-m", "tether.cli", *args]
    full_env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", **(env or {})}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=full_env)


def one_process(args: list[str], timeout: float = 300):
    cmd = [sys.executable, "-m", "tether.cli", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"})


def ok(proc) -> None:
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stderr[-4000:]}"


def report(name: str, metric: tuple[float, str], weight: float) -> None:
    """The largest differences seen (printed with -s, for the docs that quote them)."""
    print(f"\n{name}: largest metric difference {metric[0]:.3g} ({metric[1]}), largest weight difference {weight:.3g}")


# -- SFT and RM ---------------------------------------------------------------------------


SFT_EXTRA = ["optim.grad_accum_steps=2", "run.save_every=4", "run.threads=1"]


@pytest.fixture(scope="module")
def sft_reference(trained, tmp_path_factory):
    out = tmp_path_factory.mktemp("dp") / "sft-1"
    ok(one_process(["sft", *sft_overrides(trained["task"], out, *SFT_EXTRA)]))
    return out


@pytest.fixture(scope="module")
def rm_reference(trained, tmp_path_factory):
    out = tmp_path_factory.mktemp("dp") / "rm-1"
    ok(one_process(["rm", *rm_overrides(trained["task"], trained["sft"], out, "run.save_every=4", "run.threads=1")]))
    return out


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_sft_two_ranks_match_one_process(trained, sft_reference, tmp_path, strategy):
    out = tmp_path / f"sft-2-{strategy}"
    # Trackers: rank 0 alone logs (one TensorBoard writer, one MLflow run), the metrics of metrics.jsonl.
    trackers = ["run.report_to=[tensorboard,mlflow]"] if strategy == "ddp" else []
    proc = torchrun(["sft", *sft_overrides(trained["task"], out, *SFT_EXTRA, f"distributed.strategy={strategy}",
                                           *trackers)])
    ok(proc)
    assert proc.stdout.count('"steps"') == 1  # rank 0 alone reports
    if trackers:
        from tracker_readers import jsonl_metrics, mlflow_run, tensorboard_metrics

        assert len(list((out / "tensorboard").iterdir())) == 1
        assert tensorboard_metrics(out)[0] == pytest.approx(jsonl_metrics(out), rel=1e-6)
        assert mlflow_run(out)[2] == jsonl_metrics(out)  # mlflow_run asserts a single run
    tracker_files = ("tensorboard", "mlflow.db", "mlartifacts", "trackers.json")
    assert [p for p in layout(out) if not p.startswith(tracker_files)] == layout(sft_reference)
    report(f"sft {strategy}", largest_metric_diff(sft_reference, out), largest_weight_diff(sft_reference, out))


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_rm_two_ranks_match_one_process(trained, rm_reference, tmp_path, strategy):
    out = tmp_path / f"rm-2-{strategy}"
    ok(torchrun(["rm", *rm_overrides(trained["task"], trained["sft"], out, "run.save_every=4", "run.threads=1",
                                      f"distributed.strategy={strategy}")]))
    assert layout(out) == layout(rm_reference)
    report(f"rm {strategy}", largest_metric_diff(rm_reference, out), largest_weight_diff(rm_reference, out))


@pytest.mark.parametrize("stage", ["dpo", "simpo", "orpo", "kto"])
def test_a_preference_stage_on_two_ranks_matches_one_process(stage, trained, tmp_path):
    """DPO, SimPO, ORPO and KTO under FSDP: DPO's reference log-probs split over ranks and gathered, then the
    update; SimPO's pairs (no reference) split over ranks, the held-out table gathered; KTO's z₀ of
    each batch from its mismatched pairs split over ranks and gathered before the update."""
    task = trained["task"]

    def args(out, *extra):
        return [stage, f"run.out={out}", "run.progress=false", "run.log_every=1", "run.threads=1",
                f"model.name_or_path={trained['sft']}", f"data.train={task / 'prefs_train.jsonl'}",
                f"data.eval={task / 'prefs_eval.jsonl'}", "data.max_length=64", "optim.lr=1e-3",
                "optim.batch_size=8", "optim.grad_accum_steps=2", "max_steps=4", "eval_every=2", *extra]

    one, two = tmp_path / f"{stage}-1", tmp_path / f"{stage}-2"
    ok(one_process(args(one)))
    ok(torchrun(args(two, "distributed.strategy=fsdp")))
    assert layout(two) == layout(one)
    report(f"{stage} fsdp", largest_metric_diff(one, two), largest_weight_diff(one, two))


# -- PPO -----------------------------------------------------------------------------------


def ppo_args(trained, out: Path, *extra: str) -> list[str]:
    task = trained["task"]
    return ["ppo", f"model.name_or_path={trained['sft']}", f"prompts={task / 'ppo_prompts.jsonl'}",
            f"reward.models=[{trained['rm']}]", "rl.iterations=3", "rollout.batch_size=8", "rl.minibatch_size=4",
            "rl.epochs=2", "rl.grad_accum_steps=2", "rollout.max_new_tokens=8", "rollout.top_k=1",
            "run.save_every=1", "run.progress=false", "run.threads=1", "run.log_every=1",
            f"eval.prompts={task / 'eval_prompts.jsonl'}", "eval.judge=tether.tasks.arith.judge:gold_score",
            f"run.out={out}", *extra]


LORA = ("lora.r=4", "critic.lora.r=4")


@pytest.fixture(scope="module")
def ppo_reference(trained, tmp_path_factory):
    """One-process PPO runs by their extra overrides, made on first use."""
    root, made = tmp_path_factory.mktemp("dp-ppo"), {}

    def get(extra: tuple[str, ...] = ()) -> Path:
        if extra not in made:
            out = root / f"ppo-1-{len(made)}"
            ok(one_process(ppo_args(trained, out, *extra)))
            made[extra] = out
        return made[extra]

    return get


@pytest.fixture(scope="module")
def ppo_ddp(trained, tmp_path_factory):
    """The uninterrupted 2-rank DDP run (also the kill test's reference)."""
    out = tmp_path_factory.mktemp("dp-ppo-ddp") / "ppo-2-ddp"
    ok(torchrun(ppo_args(trained, out, "distributed.strategy=ddp")))
    return out


def test_ppo_ddp_matches_one_process(ppo_reference, ppo_ddp):
    reference = ppo_reference()
    assert layout(ppo_ddp) == layout(reference)
    report("ppo ddp", largest_metric_diff(reference, ppo_ddp), largest_weight_diff(reference, ppo_ddp))


@pytest.mark.parametrize("extra", [(), LORA], ids=["full", "lora"])
def test_ppo_fsdp_matches_one_process(trained, ppo_reference, tmp_path, extra):
    reference = ppo_reference(extra)
    out = tmp_path / "ppo-2-fsdp"
    ok(torchrun(ppo_args(trained, out, "distributed.strategy=fsdp", *extra)))
    assert layout(out) == layout(reference)  # LoRA: the merged model and adapter/, gathered to rank 0
    report(f"ppo fsdp {'+'.join(extra) or 'full'}", largest_metric_diff(reference, out),
           largest_weight_diff(reference, out))


def test_a_critic_free_algorithm_on_two_ranks_matches_one_process(trained, tmp_path):
    """REINFORCE++ with two responses per prompt (rows of a prompt split across ranks) and the
    per-response loss aggregation (micro-batches weighted by responses, over ranks too)."""
    extra = ("group.size=2", "policy_loss.aggregation=sequence_mean", "distributed.strategy=ddp")
    args = ["reinforce_pp", *ppo_args(trained, tmp_path / "rpp-1", *extra)[1:]]
    ok(one_process(args))
    ok(torchrun(["reinforce_pp", *ppo_args(trained, tmp_path / "rpp-2", *extra)[1:]]))
    assert layout(tmp_path / "rpp-2") == layout(tmp_path / "rpp-1")
    report("reinforce_pp ddp", largest_metric_diff(tmp_path / "rpp-1", tmp_path / "rpp-2"),
           largest_weight_diff(tmp_path / "rpp-1", tmp_path / "rpp-2"))


def test_online_dpo_on_two_ranks_keeps_each_pair_on_one_rank(trained, tmp_path):
    """Online DPO under DDP: each rank's share of a micro-batch holds whole prompt groups (the loss
    checks it) and the pairs train. (A micro-batch too small to give each rank a whole group is a
    config error: tests/unit/distributed/test_data_parallel_checks.py.)"""
    name = "online_" + "dpo"  # the registry spells the names
    base = [name, *ppo_args(trained, tmp_path / "od-2", "group.size=2", "rl.minibatch_size=8",
                            "distributed.strategy=ddp")[1:]]
    base.remove("rollout.top_k=1")  # a prompt's two samples must differ to make a pair
    ok(torchrun(base))
    from tether.metrics.logger import read_metrics

    rows = [r for r in read_metrics(tmp_path / "od-2" / "metrics.jsonl") if "pairs/fraction" in r]
    assert len(rows) == 3 and max(r["pairs/fraction"] for r in rows) > 0
    assert all(0.0 <= r["pairs/accuracy"] <= 1.0 for r in rows) and (tmp_path / "od-2" / "model.safetensors").is_file()


def test_asynchronous_ppo_on_two_ranks_matches_one_process(trained, ppo_reference, tmp_path):
    """rollout.max_staleness=1 under torchrun: each rank's sampling worker samples its share of the
    prompts and the shares are joined; top_k=1 draws the same tokens whichever rank samples them,
    so two ranks give the one-process asynchronous run."""
    reference = ppo_reference(("rollout.max_staleness=1",))
    out = tmp_path / "ppo-2-async"
    ok(torchrun(ppo_args(trained, out, "rollout.max_staleness=1", "distributed.strategy=ddp")))
    assert layout(out) == layout(reference)
    assert [r["rollout/staleness_max"] for r in metrics(out) if "rollout/staleness_max" in r] == [0.0, 1.0, 1.0]
    report("ppo ddp, max_staleness=1", largest_metric_diff(reference, out), largest_weight_diff(reference, out))


# -- faults ---------------------------------------------------------------------------------


def test_killed_rank_stops_the_run_and_it_resumes_exactly(trained, ppo_ddp, tmp_path):
    out = tmp_path / "ppo-killed"
    t0 = time.monotonic()
    proc = torchrun(ppo_args(trained, out, "distributed.strategy=ddp"), env={"TETHER_FAULT": "iteration:3@1"})
    elapsed = time.monotonic() - t0
    assert proc.returncode != 0
    assert elapsed < 60, elapsed
    assert re.search(r"rank 0 stops: rank 1 of 2 exited", proc.stderr, re.IGNORECASE), proc.stderr[-3000:]
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step-000001", "step-000002"]
    assert not (out / "tether_checkpoint.json").exists()  # no final model from a broken run

    resumed = torchrun(["ppo", "--resume", str(out)])
    ok(resumed)
    assert "resuming from step 2 of 3" in resumed.stderr
    assert metrics(out) == metrics(ppo_ddp)  # exactly: same ranks, same (seed, iteration, rank) streams
    assert largest_weight_diff(ppo_ddp, out) == 0.0


def test_two_rank_checkpoint_resumes_in_one_process(trained, sft_reference, tmp_path):
    """SFT draws nothing at random: resumed in 1 process it ends where the 1-process run ends."""
    out = tmp_path / "sft-2-then-1"
    killed = torchrun(["sft", *sft_overrides(trained["task"], out, *SFT_EXTRA, "distributed.strategy=fsdp")],
                      env={"TETHER_FAULT": "step:6@0"})
    assert killed.returncode != 0
    assert re.search(r"rank 1 stops: rank 0 of 2 exited", killed.stderr, re.IGNORECASE), killed.stderr[-3000:]
    resumed = one_process(["sft", "--resume", str(out)])
    ok(resumed)
    assert "written by 2 process(es) and resumes in 1" in resumed.stderr
    assert "resuming from step 4 of" in resumed.stderr
    report("sft fsdp 2 ranks -> 1 process", largest_metric_diff(sft_reference, out),
           largest_weight_diff(sft_reference, out))


def test_batch_that_does_not_split_is_a_config_error(trained, tmp_path):
    out = tmp_path / "sft-odd"
    proc = torchrun(["sft", *sft_overrides(trained["task"], out, "optim.batch_size=15", "run.threads=1")])
    assert proc.returncode != 0
    assert "Config key 'optim.batch_size' = 15 does not divide by the world size 2" in proc.stderr
    # One paragraph (local rank 0 speaks for the ranks), no worker traceback (torchrun's agent adds
    # its own failure report; `tether launch` does not: test_launch.py).
    assert proc.stderr.count("does not divide by the world size 2") == 1
    assert not re.search(r"\[rank\d\]:\s*Traceback", proc.stderr), proc.stderr[-3000:]
    assert not out.exists()
    # --dry-run joins the ranks as the run does: the same error, and with a batch that splits, one plan per 2 ranks.
    dry = torchrun(["sft", *sft_overrides(trained["task"], out, "optim.batch_size=15", "run.threads=1"), "--dry-run"])
    assert dry.returncode != 0 and dry.stderr.count("does not divide by the world size 2") == 1
    dry = torchrun(["sft", *sft_overrides(trained["task"], out, "run.threads=1", "distributed.strategy=fsdp"), "--dry-run"])
    assert dry.returncode == 0, dry.stderr[-3000:]
    assert dry.stdout.count("--dry-run: the plan") == 1 and "2 processes (torchrun)" in dry.stdout
    assert "16 = 2 rank(s) x 1 micro-batch(es) x 8 examples" in dry.stdout and "per rank on 2 ranks" in dry.stdout
    assert not out.exists()
