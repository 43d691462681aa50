"""model.attn_implementation and model.padding_free: in every stage's model block, their
defaults (sdpa, packed), their choices, and the engine settings they reach."""

from __future__ import annotations

import pytest

from tether.config import DPOConfig, RLConfig, RewardModelConfig, SFTConfig, describe, load_config
from tether.engines import engine_settings
from tether.common.errors import ConfigError

SUPERVISED_MIN = ["model.name_or_path=m", "data.train=t.jsonl"]
PPO_MIN = ["model.name_or_path=m", "prompts=p.jsonl", "reward.models=[r]"]
STAGES = [(SFTConfig, SUPERVISED_MIN), (RewardModelConfig, SUPERVISED_MIN), (DPOConfig, SUPERVISED_MIN),
          (RLConfig, PPO_MIN)]


@pytest.mark.parametrize("stage, base", STAGES)
def test_the_defaults_are_sdpa_and_packed(stage, base):
    cfg = load_config(stage, None, base)
    assert cfg.model.attn_implementation == "sdpa"
    assert cfg.model.padding_free is True


@pytest.mark.parametrize("stage, base", STAGES)
@pytest.mark.parametrize("name", ["sdpa", "eager", "flash_attention_2", "flex_attention"])
def test_each_implementation_is_a_choice(stage, base, name):
    # The package and the device are checked when a stage starts, not when a config is read
    # (a saved config is read where neither may be present).
    assert load_config(stage, None, [*base, f"model.attn_implementation={name}"]).model.attn_implementation == name


def test_another_implementation_is_refused_listing_the_choices():
    with pytest.raises(ConfigError) as info:
        load_config(SFTConfig, None, [*SUPERVISED_MIN, "model.attn_implementation=flash_attention_3"])
    text = str(info.value)
    assert "model.attn_implementation" in text
    assert all(name in text for name in ("sdpa", "eager", "flash_attention_2", "flex_attention"))


@pytest.mark.parametrize("stage, base", STAGES)
def test_padding_free_can_be_turned_off(stage, base):
    assert load_config(stage, None, [*base, "model.padding_free=false"]).model.padding_free is False


def test_both_keys_are_described_with_help():
    rows = {row[0]: row for row in describe(RLConfig)}
    assert "model.attn_implementation" in rows and "model.padding_free" in rows
    assert "flash_attention_2" in str(rows["model.attn_implementation"])
    assert "padding" in str(rows["model.padding_free"])


def test_padding_free_reaches_the_engine_settings():
    on_cfg = load_config(SFTConfig, None, [*SUPERVISED_MIN, "run.device=cpu"])
    on = engine_settings(on_cfg.run, on_cfg.model, on_cfg.cpu)
    off_cfg = load_config(SFTConfig, None, [*SUPERVISED_MIN, "run.device=cpu", "model.padding_free=false"])
    off = engine_settings(off_cfg.run, off_cfg.model, off_cfg.cpu)
    assert on.padding_free is True and off.padding_free is False


def test_engine_settings_refuse_flash_attention_on_a_cpu_run_naming_the_key(monkeypatch):
    import tether.models.attn_implementation as attention

    monkeypatch.setattr(attention, "check_installed", lambda name, key=attention.KEY: None)  # as if installed
    cfg = load_config(SFTConfig, None, [*SUPERVISED_MIN, "run.device=cpu", "model.attn_implementation=flash_attention_2"])
    with pytest.raises(ConfigError, match=r"model.attn_implementation' = 'flash_attention_2' with the stage on cpu"):
        engine_settings(cfg.run, cfg.model, cfg.cpu)
