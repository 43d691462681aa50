"""Settings that would do nothing under another setting, contradictions between settings, and
paths given as Path objects from Python: each refused or taken with a clear message."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tether.config import RLConfig, SFTConfig, from_dict, load_config, to_dict
from tether.common.errors import ConfigError

from tests.unit.config.test_config import SFT_MIN, error_of, ppo, sft

DPO_MIN = SFT_MIN


def dpo(*overrides):
    from tether.config import DPOConfig

    return load_config(DPOConfig, None, [*DPO_MIN, *overrides])


def kto(*overrides):
    from tether.config import KTOConfig

    return load_config(KTOConfig, None, [*DPO_MIN, *overrides])


# (stage, overrides, what the error names): each setting does nothing under the other setting(s).
INERT = [
    (ppo, ["algorithm=grpo", "critic.lora.r=4"], ["'critic.lora.r' = 4", "algorithm=grpo", "trains no critic"]),
    (ppo, ["algorithm=rloo", "critic.path=c"], ["'critic.path'", "trains no critic"]),
    (ppo, ["algorithm=reinforce_pp", "ppo.whiten_advantages=false"], ["'ppo.whiten_advantages'", "trains no critic"]),
    (ppo, ["algorithm=grpo", "placement.backend=ray", "placement.ray.roles.critic.num_cpus=2"],
     ["'placement.ray.roles.critic.num_cpus'", "trains no critic"]),
    (ppo, ["algorithm=rloo", "health.value_loss_explode_factor=5"], ["'health.value_loss_explode_factor'"]),
    (ppo, ["algorithm=rloo", "group.scale_by_std=false"], ["'group.scale_by_std'", "algorithm=rloo"]),
    (ppo, ["algorithm=grpo", "rl.gamma=0.99"], ["'rl.gamma'", "algorithm=grpo"]),
    (ppo, ["critic.shared_trunk=true", "critic.init=policy"], ["'critic.init'", "critic.shared_trunk=true"]),
    (ppo, ["critic.shared_trunk=true", "critic.strategy=fsdp"], ["'critic.strategy'", "critic.shared_trunk=true"]),
    (ppo, ["kl.target=3"], ["'kl.target' = 3.0", "kl.controller=fixed"]),
    (ppo, ["kl.horizon=500"], ["'kl.horizon'", "kl.controller=fixed"]),
    (ppo, ["reward.combine=min"], ["'reward.combine'", "fewer than two reward.models"]),
    (ppo, ["reward.models=[a,b]", "reward.std_coef=2"], ["'reward.std_coef'", "reward.combine=mean"]),
    (ppo, ["reward.api_key=k"], ["'reward.api_key'", "no reward.url"]),
    (ppo, ["eval.judge=m:f"], ["'eval.judge'", "no eval.prompts"]),
    (ppo, ["eval.every=5"], ["'eval.every'", "no eval.prompts"]),
    (ppo, ["rl.compile_mode=max-autotune"], ["'rl.compile_mode'", "rl.compile=false"]),
    (ppo, ["rollout.vllm.gpu_memory_utilization=0.5"], ["'rollout.vllm.gpu_memory_utilization'", "rollout.engine=lean"]),
    (ppo, ["rollout.engine=vllm", "rollout.capture_logprobs=false"], ["'rollout.capture_logprobs'", "use_engine_logprobs"]),
    (ppo, ["placement.ray.address=auto"], ["'placement.ray.address'", "placement.backend=local"]),
    (ppo, ["health.enabled=false", "health.kl_low=0.5"], ["'health.kl_low'", "health.enabled=false"]),
    (ppo, ["critic.lora.alpha=8"], ["'critic.lora.alpha'", "LoRA is off (critic.lora.r = 0"]),
    (ppo, ["lora.modules_to_save=[norm]"], ["'lora.modules_to_save'", "LoRA is off"]),
    (sft, ["lora.adapter=a", "lora.target_modules=[q_proj]"], ["'lora.target_modules'", "lora.adapter, whose own"]),
    (sft, ["run.name=x"], ["'run.name'", "no tracker in run.report_to"]),
    (sft, ["run.keep_checkpoints=5"], ["'run.keep_checkpoints'", "run.save_every = 0"]),
    (sft, ["data.eval=e.jsonl", "data.eval_size=10"], ["'data.eval_size'", "data.eval given"]),
    (sft, ["data.eval_size=0", "eval_every=10"], ["'eval_every'", "no held-out data"]),
    (sft, ["data.eval_split=validation"], ["'data.eval_split'", "no data.eval"]),
    (dpo, ["dpo.loss=ipo", "dpo.label_smoothing=0.1"], ["'dpo.label_smoothing' = 0.1", "dpo.loss='ipo'"]),
    (kto, ["data.eval=e.jsonl", "data.eval_size=10"], ["'data.eval_size'", "data.eval given"]),
    (kto, ["lora.alpha=8"], ["'lora.alpha'", "LoRA is off"]),
]


@pytest.mark.parametrize("stage, overrides, needles", INERT, ids=[" ".join(case[1]) for case in INERT])
def test_a_setting_that_would_do_nothing_is_refused(stage, overrides, needles):
    msg = error_of(stage, *overrides)
    for needle in needles:
        assert needle in msg, (needle, msg)
    assert "\n" not in msg


@pytest.mark.parametrize("stage, overrides", [
    (ppo, ["critic.lora.r=4", "critic.lora.alpha=8"]),
    (ppo, ["algorithm=reinforce_pp", "rl.gamma=0.99"]),
    (ppo, ["algorithm=grpo", "group.scale_by_std=false"]),
    (ppo, ["kl.controller=adaptive", "kl.target=3", "kl.horizon=500"]),
    (ppo, ["reward.models=[a,b]", "reward.combine=mean_minus_std", "reward.std_coef=2"]),
    (ppo, ["reward.models=[]", "reward.url=http://x", "reward.api_key=k", "critic.init=policy"]),
    (ppo, ["eval.prompts=e.jsonl", "eval.every=5", "eval.judge=m:f"]),
    (ppo, ["placement.backend=ray", "placement.ray.address=auto"]),
    (ppo, ["rollout.engine=vllm", "rollout.vllm.gpu_memory_utilization=0.5"]),
    (sft, ["run.report_to=[tensorboard]", "run.name=x"]),
    (sft, ["run.save_every=2", "run.keep_checkpoints=5"]),
    (sft, ["lora.r=4", "lora.modules_to_save=[embed_tokens]"]),
    (dpo, ["dpo.label_smoothing=0.1"]),
    (kto, ["lora.r=4", "lora.alpha=8", "kto.desirable_weight=1.33"]),
])
def test_those_settings_where_they_apply(stage, overrides):
    stage(*overrides)


def test_a_tracker_named_twice_and_nccl_on_a_cpu_are_refused():
    msg = error_of(sft, "run.report_to=[tensorboard,wandb,tensorboard]")
    assert "'run.report_to'" in msg and "tensorboard twice" in msg
    msg = error_of(ppo, "distributed.backend=nccl", "run.device=cpu")
    assert "'distributed.backend' = 'nccl'" in msg and "gloo" in msg
    assert ppo("distributed.backend=nccl", "run.device=cuda").distributed.backend == "nccl"


def test_needs_critic_is_the_algorithms_registry_entry():
    from tether.algorithms import ALGORITHMS

    for name, spec in ALGORITHMS.items():
        overrides = [f"algorithm={name}", f"group.size={max(2, spec.min_group_size)}", "rl.minibatch_size=2",
                     "rollout.batch_size=2"]
        if not spec.needs_reward:  # distill: no reward block, a teacher instead
            cfg = load_config(RLConfig, None, ["model.name_or_path=m", "prompts=p.jsonl", "reference=t", *overrides])
        else:
            cfg = ppo(*overrides)
        assert cfg.needs_critic is spec.needs_critic


def test_an_unregistered_algorithm_names_the_registered_ones():
    with pytest.raises(ConfigError) as err:
        ppo("algorithm=nope")
    assert "'algorithm' = 'nope'" in str(err.value) and "grpo" in str(err.value)


def test_paths_may_be_path_objects(tmp_path):
    """A pathlib.Path (any os.PathLike) is taken wherever a string is: config dicts from Python."""
    data = {"run": {"out": tmp_path / "run"}, "model": {"name_or_path": Path("m")}, "data": {"train": Path("t.jsonl")}}
    cfg = from_dict(SFTConfig, data)
    assert (cfg.run.out, cfg.model.name_or_path, cfg.data.train) == (str(tmp_path / "run"), "m", "t.jsonl")
    cfg = from_dict(RLConfig, {"model": {"name_or_path": "m"}, "prompts": Path("p.jsonl"),
                                "reward": {"models": [Path("a"), "b"]}})
    assert cfg.prompts == "p.jsonl" and cfg.reward.models == ["a", "b"]
    assert yaml.safe_load(yaml.safe_dump(to_dict(cfg)))["reward"]["models"] == ["a", "b"]  # saves as plain text
    assert "expected a string" in error_of(from_dict, SFTConfig, {**data, "model": {"name_or_path": 5}})
