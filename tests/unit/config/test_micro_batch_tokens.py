"""optim.micro_batch_tokens and rl.micro_batch_tokens: a token budget per micro-batch, at
least one token, and never together with a row count (grad_accum_steps > 1)."""

from __future__ import annotations

import pytest

from tether.config import DPOConfig, RLConfig, RewardModelConfig, SFTConfig, load_config
from tether.common.errors import ConfigError

SUPERVISED_MIN = ["model.name_or_path=m", "data.train=t.jsonl"]
PPO_MIN = ["model.name_or_path=m", "prompts=p.jsonl", "reward.models=[r]"]


@pytest.mark.parametrize("stage", [SFTConfig, RewardModelConfig, DPOConfig])
def test_a_supervised_budget_is_off_by_default_and_set_by_its_key(stage):
    assert load_config(stage, None, SUPERVISED_MIN).optim.micro_batch_tokens is None
    cfg = load_config(stage, None, [*SUPERVISED_MIN, "optim.micro_batch_tokens=512"])
    assert cfg.optim.micro_batch_tokens == 512


def test_the_rl_budget_is_off_by_default_and_set_by_its_key():
    assert load_config(RLConfig, None, PPO_MIN).rl.micro_batch_tokens is None
    assert load_config(RLConfig, None, [*PPO_MIN, "rl.micro_batch_tokens=256"]).rl.micro_batch_tokens == 256


@pytest.mark.parametrize("stage, base, key", [(SFTConfig, SUPERVISED_MIN, "optim"), (RLConfig, PPO_MIN, "rl")])
def test_a_budget_below_one_token_is_refused(stage, base, key):
    with pytest.raises(ConfigError, match=f"{key}.micro_batch_tokens"):
        load_config(stage, None, [*base, f"{key}.micro_batch_tokens=0"])


@pytest.mark.parametrize("stage, base, key", [(SFTConfig, SUPERVISED_MIN, "optim"),
                                              (DPOConfig, SUPERVISED_MIN, "optim"), (RLConfig, PPO_MIN, "rl")])
def test_a_budget_with_a_row_count_is_refused_naming_both_keys(stage, base, key):
    with pytest.raises(ConfigError) as info:
        load_config(stage, None, [*base, f"{key}.micro_batch_tokens=64", f"{key}.grad_accum_steps=2"])
    text = str(info.value)
    assert f"'{key}.micro_batch_tokens' = 64" in text and f"{key}.grad_accum_steps = 2" in text
    assert "no effect" in text
    # grad_accum_steps = 1 (its default) sizes nothing: allowed with a budget.
    cfg = load_config(stage, None, [*base, f"{key}.micro_batch_tokens=64", f"{key}.grad_accum_steps=1"])
    assert getattr(cfg, key).micro_batch_tokens == 64
