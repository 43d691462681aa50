"""The RL config's checks of the KL block and the policy loss (config/rl_blocks.py, config/stages.py)."""

from __future__ import annotations

import pytest

from tether.config import RLConfig, load_config, save_config
from tether.common.errors import ConfigError

MINIMAL = ["model.name_or_path=m", "prompts=p", "reward.models=[r]"]


def ppo(*overrides):
    return load_config(RLConfig, None, [*MINIMAL, *overrides])


def test_k1_as_a_loss_term_is_refused_with_the_reason_and_the_fix():
    with pytest.raises(ConfigError) as err:
        ppo("kl.placement=loss", "kl.estimator=k1")
    msg = str(err.value)
    assert "'kl.estimator'" in msg and "kl.placement=loss" in msg
    assert "zero expected gradient" in msg
    assert "k3" in msg and "k2" in msg and "kl.placement=reward" in msg


def test_the_estimator_default_follows_the_placement():
    assert ppo().kl.estimator == "k1"  # in the reward, as before
    assert ppo("kl.placement=loss").kl.estimator == "k3"  # GRPO's: a loss term that pulls
    assert ppo("kl.estimator=null").kl.estimator == "k1"


@pytest.mark.parametrize("placement, estimator", [("loss", "k2"), ("loss", "k3"), ("reward", "k1"),
                                                  ("reward", "k2"), ("reward", "k3")])
def test_every_other_pairing_is_accepted(placement, estimator):
    assert ppo(f"kl.placement={placement}", f"kl.estimator={estimator}").kl.estimator == estimator


def test_the_saved_config_names_the_estimator_used(tmp_path):
    path = tmp_path / "config.yaml"
    save_config(ppo("kl.placement=loss"), path)
    assert load_config(RLConfig, path).kl.estimator == "k3"


def test_ratio_level():
    assert ppo().policy_loss.ratio_level == "token"
    assert ppo("algorithm=grpo", "policy_loss.ratio_level=sequence").policy_loss.ratio_level == "sequence"
    with pytest.raises(ConfigError, match="policy_loss.ratio_level"):
        ppo("algorithm=grpo", "policy_loss.ratio_level=response")


def test_min_lr_ratio_with_a_constant_schedule_is_refused():
    """A constant schedule never decays: its min_lr_ratio would do nothing, in every optimiser block."""
    from tether.config import RLConfig, SFTConfig, load_config

    with pytest.raises(ConfigError, match=r"'critic.optim.min_lr_ratio' = 0.5 is set with critic.optim.schedule=constant"):
        load_config(RLConfig, None, ["model.name_or_path=m", "prompts=p", "reward.models=[r]",
                                      "critic.optim.min_lr_ratio=0.5"])
    with pytest.raises(ConfigError, match=r"'optim.min_lr_ratio'"):
        load_config(SFTConfig, None, ["model.name_or_path=m", "data.train=t", "optim.schedule=constant",
                                      "optim.min_lr_ratio=0.5"])
    cfg = load_config(RLConfig, None, ["model.name_or_path=m", "prompts=p", "reward.models=[r]",
                                        "optim.schedule=cosine", "optim.min_lr_ratio=0.5"])
    assert cfg.optim.min_lr_ratio == 0.5


def test_off_policy_correction_needs_an_engine_with_its_own_weights():
    cfg = ppo("rollout.engine=vllm", "rollout.is_correction=tis", "rollout.is_cap=3")
    assert (cfg.rollout.is_correction, cfg.rollout.is_cap) == ("tis", 3.0)
    with pytest.raises(ConfigError, match="rollout.engine=lean: that engine samples with the actor's own weights"):
        ppo("rollout.is_correction=tis")
    with pytest.raises(ConfigError, match="rollout.use_engine_logprobs=true: pi_old would then be"):
        ppo("rollout.engine=vllm", "rollout.use_engine_logprobs=true", "rollout.is_correction=mis")
    with pytest.raises(ConfigError, match="rollout.is_cap"):
        ppo("rollout.engine=vllm", "rollout.is_cap=3")  # no correction: the cap would do nothing
    with pytest.raises(ConfigError, match="is_cap"):
        ppo("rollout.engine=vllm", "rollout.is_correction=tis", "rollout.is_cap=0.5")


def test_max_staleness_runs_an_engine_that_samples_a_model_in_a_worker():
    cfg = ppo("rollout.max_staleness=2", "rollout.worker_threads=2", "rollout.is_correction=tis")
    assert (cfg.rollout.max_staleness, cfg.rollout.worker_threads, cfg.rollout.is_correction) == (2, 2, "tis")
    assert ppo().rollout.max_staleness == 0  # the synchronous loop by default
    assert ppo("rollout.engine=vllm", "rollout.max_staleness=1").rollout.max_staleness == 1
    with pytest.raises(ConfigError, match="a thread drives the engine's own processes"):
        ppo("rollout.engine=vllm", "rollout.max_staleness=1", "rollout.worker_threads=2")
    with pytest.raises(ConfigError, match="use_engine_logprobs=true: the engine's log-probs are of weights up to 1"):
        ppo("rollout.engine=vllm", "rollout.max_staleness=1", "rollout.use_engine_logprobs=true")
    with pytest.raises(ConfigError, match="check_sync=true: the engine is busy sampling ahead"):
        ppo("rollout.engine=vllm", "rollout.max_staleness=1", "rollout.vllm.check_sync=true")
    assert ppo("rollout.max_staleness=1", "placement.backend=ray").rollout.max_staleness == 1
    with pytest.raises(ConfigError, match="placement.ray.roles.actor.num_workers=2"):
        ppo("rollout.max_staleness=1", "placement.backend=ray", "placement.ray.roles={actor: {num_workers: 2}}")
    with pytest.raises(ConfigError, match="rollout.worker_threads"):
        ppo("rollout.worker_threads=2")  # no worker: the threads would do nothing
    with pytest.raises(ConfigError, match="max_staleness"):
        ppo("rollout.max_staleness=-1")
    # Without a worker the lean engine's log-probs are pi_old: the correction stays refused.
    with pytest.raises(ConfigError, match="or for asynchronous sampling"):
        ppo("rollout.is_correction=mis")


def test_episodes_run_on_every_engine_and_asynchronously_but_need_a_chat_template():
    episodes = ["environment.kind=scripted", "environment.max_turns=3"]
    assert ppo(*episodes, "rollout.engine=vllm").environment.kind == "scripted"
    assert ppo(*episodes, "rollout.max_staleness=1").rollout.max_staleness == 1
    with pytest.raises(ConfigError) as err:
        ppo(*episodes, "model.chat_template=never")
    assert "model.chat_template=never" in str(err.value) and "chat_template=auto" in str(err.value)
