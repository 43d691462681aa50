"""Config checks of a data-parallel run: every global batch divides by the world size, FSDP
takes no fp16; a one-process run is never refused. And the rank filter of fault injection."""

from __future__ import annotations

import pytest

from tether import runs
from tether.config import RLConfig, SFTConfig, load_config
from tether.common.errors import ConfigError
from tether.loops import common
from tether.loops.common import check_data_parallel


def sft(*extra):
    # The paths are only read when a stage runs, not when its config loads.
    return load_config(SFTConfig, None, ["model.name_or_path=/nonexistent/base_model",
                                         "data.train=/nonexistent/sft_train.jsonl", *extra])


def ppo(*extra):
    return load_config(RLConfig, None, ["model.name_or_path=/nonexistent/base_model",
                                         "prompts=/nonexistent/ppo_prompts.jsonl",
                                         "reward.callable=tether.tasks.arith.judge:gold_reward",
                                         "critic.init=policy", *extra])


@pytest.fixture
def world(monkeypatch):
    def set_world(n: int) -> None:
        monkeypatch.setattr(common, "world_size", lambda: n)
    set_world(2)
    return set_world


def test_sft_batch_size_not_dividing_names_key_value_and_world(world):
    with pytest.raises(ConfigError) as info:
        check_data_parallel(sft("optim.batch_size=15"), "sft")
    text = str(info.value)
    assert "'optim.batch_size' = 15" in text and "world size 2" in text and "multiple of 2" in text


def test_sft_micro_batch_not_dividing(world):
    # 16 rows in 8 micro-batches of 2 divides over 2 ranks; in 16 micro-batches of 1 it does not.
    check_data_parallel(sft("optim.batch_size=16", "optim.grad_accum_steps=8"), "sft")
    with pytest.raises(ConfigError, match=r"'optim.batch_size / optim.grad_accum_steps' = 1 .*world size 2"):
        check_data_parallel(sft("optim.batch_size=16", "optim.grad_accum_steps=16"), "sft")


def test_sft_world_of_three(world):
    world(3)
    check_data_parallel(sft("optim.batch_size=12", "optim.grad_accum_steps=2"), "sft")  # 12 and 6
    with pytest.raises(ConfigError, match=r"'optim.batch_size' = 16 does not divide by the world size 3"):
        check_data_parallel(sft("optim.batch_size=16"), "sft")
    with pytest.raises(ConfigError, match=r"'optim.batch_size / optim.grad_accum_steps' = 4 .*world size 3"):
        check_data_parallel(sft("optim.batch_size=12", "optim.grad_accum_steps=3"), "sft")


def test_ppo_micro_batch_not_dividing_names_both_keys(world):
    cfg = ppo("rollout.batch_size=8", "rl.minibatch_size=4", "rl.grad_accum_steps=4")
    with pytest.raises(ConfigError) as info:
        check_data_parallel(cfg, "ppo")
    text = str(info.value)
    assert "'rl.minibatch_size / rl.grad_accum_steps' = 1" in text and "world size 2" in text


def test_ppo_rollout_and_minibatch_sizes(world):
    with pytest.raises(ConfigError, match=r"'rollout.batch_size' = 9 does not divide by the world size 2"):
        check_data_parallel(ppo("rollout.batch_size=9", "rl.minibatch_size=3"), "ppo")
    with pytest.raises(ConfigError, match=r"'rl.minibatch_size' = 3 does not divide by the world size 2"):
        check_data_parallel(ppo("rollout.batch_size=6", "rl.minibatch_size=3"), "ppo")
    check_data_parallel(ppo("rollout.batch_size=8", "rl.minibatch_size=4", "rl.grad_accum_steps=2"), "ppo")


def test_fsdp_with_fp16_is_refused(world):
    with pytest.raises(ConfigError, match=r"'run.precision' = 'fp16'.*'fsdp'"):
        check_data_parallel(sft("optim.batch_size=16", "distributed.strategy=fsdp", "run.precision=fp16"), "sft")
    # bf16 under FSDP and fp16 under DDP are fine.
    check_data_parallel(sft("optim.batch_size=16", "distributed.strategy=fsdp", "run.precision=bf16"), "sft")
    check_data_parallel(sft("optim.batch_size=16", "distributed.strategy=ddp", "run.precision=fp16"), "sft")


def test_ppo_critic_fsdp_with_fp16_is_refused(world):
    base = ("rollout.batch_size=8", "rl.minibatch_size=4", "run.precision=fp16")
    with pytest.raises(ConfigError, match="fp16"):
        check_data_parallel(ppo(*base, "distributed.strategy=ddp", "critic.strategy=fsdp"), "ppo")
    with pytest.raises(ConfigError, match="fp16"):  # the critic follows distributed.strategy when unset
        check_data_parallel(ppo(*base, "distributed.strategy=fsdp"), "ppo")
    check_data_parallel(ppo(*base, "distributed.strategy=ddp"), "ppo")


def test_divisible_sizes_pass(world):
    assert check_data_parallel(sft("optim.batch_size=16", "optim.grad_accum_steps=4"), "sft") is None
    assert check_data_parallel(ppo("rollout.batch_size=8", "rl.minibatch_size=4"), "ppo") is None


def test_world_size_one_never_raises(world):
    world(1)
    check_data_parallel(sft("optim.batch_size=15"), "sft")
    check_data_parallel(sft("optim.batch_size=15", "distributed.strategy=fsdp", "run.precision=fp16"), "sft")
    check_data_parallel(ppo("rollout.batch_size=8", "rl.minibatch_size=4", "rl.grad_accum_steps=4"), "ppo")


def test_the_real_world_size_here_is_one():
    check_data_parallel(sft("optim.batch_size=15"), "sft")  # no monkeypatch: one process


# -- fault_point's rank filter (the kill path itself is not exercised here) -------------------------


@pytest.fixture
def counts(monkeypatch):
    fresh: dict = {}
    monkeypatch.setattr(runs, "_FAULT_COUNTS", fresh)
    return fresh


def test_fault_point_for_another_rank_does_nothing(monkeypatch, counts):
    monkeypatch.setenv("TETHER_FAULT", "step:1@1")
    monkeypatch.setenv("RANK", "0")
    for _ in range(3):
        runs.fault_point("step")  # would SIGKILL this process if the rank filter failed
    assert counts == {}  # another rank's fault is not even counted here


def test_fault_point_counts_this_ranks_visits(monkeypatch, counts):
    monkeypatch.setenv("TETHER_FAULT", "step:3@0")
    monkeypatch.setenv("RANK", "0")
    runs.fault_point("step")
    runs.fault_point("step")
    assert counts == {"step": 2}  # the third visit would kill: not made
    runs.fault_point("other")
    assert counts == {"step": 2}


def test_fault_point_without_rank_defaults_to_rank_zero(monkeypatch, counts):
    monkeypatch.setenv("TETHER_FAULT", "step:5@1")
    monkeypatch.delenv("RANK", raising=False)
    runs.fault_point("step")
    assert counts == {}
    monkeypatch.setenv("TETHER_FAULT", "step:5")
    runs.fault_point("step")
    assert counts == {"step": 1}


def test_online_dpo_needs_whole_groups_on_every_rank(world):
    name = "online_" + "dpo"  # the registry spells the names

    def cfg(group: int):
        return load_config(RLConfig, None, ["model.name_or_path=/nonexistent/base_model", f"algorithm={name}",
                                             "prompts=/nonexistent/ppo_prompts.jsonl", "reward.callable=m:f",
                                             f"group.size={group}", "rollout.batch_size=8", "rl.minibatch_size=4"])

    check_data_parallel(cfg(2), name)
    with pytest.raises(ConfigError, match=r"each rank's share of a micro-batch .* 4 / 2\) must hold whole groups of "
                                          r"group.size = 4"):
        check_data_parallel(cfg(4), name)
