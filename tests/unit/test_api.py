"""The Python API's config handling: objects, nested and dotted dicts, YAML paths, overrides,
and the command's errors (no stage runs here; the README example test runs them)."""

from __future__ import annotations

import pytest

import tether
from tether.api import resolve_config
from tether.config import RLConfig, SFTConfig, from_dict


def test_dotted_and_nested_keys_merge_and_overrides_win(tmp_path):
    cfg = resolve_config(SFTConfig, {"model.name_or_path": "m", "optim": {"lr": 1e-4}, "optim.batch_size": 8,
                                     "data": {"train": "t.jsonl"}}, {"optim.lr": 2e-4})
    assert (cfg.model.name_or_path, cfg.optim.lr, cfg.optim.batch_size, cfg.data.train) == ("m", 2e-4, 8, "t.jsonl")
    cfg = resolve_config(SFTConfig, cfg, ["optim.batch_size=16", "max_steps=3"])
    assert (cfg.optim.lr, cfg.optim.batch_size, cfg.max_steps) == (2e-4, 16, 3)
    preset = tmp_path / "sft.yaml"
    preset.write_text("model:\n  name_or_path: m\ndata:\n  train: t.jsonl\noptim:\n  lr: 3.0e-4\n")
    cfg = resolve_config(SFTConfig, preset, {"optim.batch_size": 4})
    assert (cfg.optim.lr, cfg.optim.batch_size) == (3e-4, 4)


def test_config_errors_are_the_commands():
    with pytest.raises(tether.ConfigError, match=r"Unknown config key 'optim.lrr'. Did you mean 'optim.lr'\?"):
        resolve_config(SFTConfig, {"model.name_or_path": "m", "data.train": "t", "optim.lrr": 1})
    with pytest.raises(tether.ConfigError, match=r"'optim.batch_size' = 0"):
        resolve_config(SFTConfig, {"model.name_or_path": "m", "data.train": "t"}, ["optim.batch_size=0"])
    with pytest.raises(tether.ConfigError, match="is a RLConfig: expected a SFTConfig"):
        resolve_config(SFTConfig, from_dict(RLConfig, {"model": {"name_or_path": "m"}, "prompts": "p",
                                                        "reward": {"models": ["r"]}}))
    with pytest.raises(tether.ConfigError, match=r"tether.grpo\(\)"):
        tether.ppo({"model.name_or_path": "m", "prompts": "p", "reward.models": ["r"], "algorithm": "grpo"})


def test_the_function_names_the_algorithm(monkeypatch):
    seen = {}

    def fake_run(cfg, on_iteration=None, resume=False):
        seen["cfg"] = cfg
        return {"history": [{"objective/kl": 0.5, "note": "x"}], "time_s": 1.0}

    monkeypatch.setattr("tether.loops.rl_run.run_rl", fake_run)
    base = {"model.name_or_path": "m", "prompts": "p", "reward.models": ["r"], "run.out": "runs/x"}
    result = tether.rloo(base)
    assert seen["cfg"].algorithm == "rloo" and seen["cfg"].samples_per_prompt == 4
    assert result.stage == "rloo" and result["objective/kl"] == 0.5 and "note" not in result.metrics
    assert str(result.out) == "runs/x" and result.history == [{"objective/kl": 0.5, "note": "x"}]
    tether.ppo(from_dict(RLConfig, {"model": {"name_or_path": "m"}, "prompts": "p", "reward": {"models": ["r"]}}))
    assert seen["cfg"].algorithm == "ppo"


def test_importing_tether_stays_light():
    import subprocess
    import sys

    code = "import sys, tether; print('torch' in sys.modules, 'transformers' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


SFT_DICT = {"model.name_or_path": "m", "data.train": "t.jsonl"}


@pytest.mark.parametrize("call, needle", [
    (lambda: tether.dpo(SFT_DICT, 42), "tether.dpo(): argument 'overrides' = 42"),  # was a TypeError
    (lambda: tether.sft(SFT_DICT, ["max_steps=2", 3]), "tether.sft(): argument 'overrides'"),
    (lambda: tether.reward_model(SFT_DICT, {1: 2}), "tether.reward_model(): argument 'overrides'"),
    (lambda: tether.sft(SFT_DICT, b"max_steps=2"), "tether.sft(): argument 'overrides'"),
    (lambda: tether.sft(SFT_DICT, resume="no"), "tether.sft(): argument 'resume' = 'no'"),  # "no" is true
    (lambda: tether.grpo({}, resume=1), "tether.grpo(): argument 'resume' = 1"),
    (lambda: tether.ppo({}, on_iteration="print"), "tether.ppo(): argument 'on_iteration'"),
    (lambda: tether.sft(42), "tether.sft(): argument 'config' = 42"),
    (lambda: tether.rloo(3.5), "tether.rloo(): argument 'config' = 3.5"),
    (lambda: tether.dry_run("sft", SFT_DICT, 7), "tether.dry_run(): argument 'overrides' = 7"),
    (lambda: tether.dry_run(5), "unknown stage 5"),
])
def test_arguments_of_the_wrong_type_are_config_errors(call, needle):
    with pytest.raises(tether.ConfigError) as info:
        call()
    assert needle in str(info.value)


def test_path_objects_are_accepted_as_paths(monkeypatch, tmp_path):
    from pathlib import Path

    seen = {}

    def fake_run(cfg, resume=False):
        seen["cfg"] = cfg
        return {}

    monkeypatch.setattr("tether.objectives.sft.run_sft", fake_run)
    preset = tmp_path / "sft.yaml"
    preset.write_text("optim:\n  lr: 3.0e-4\n")
    result = tether.sft(preset, {"model.name_or_path": tmp_path / "model", "data": {"train": Path("t.jsonl")},
                                 "run.out": tmp_path / "out"})
    cfg = seen["cfg"]
    assert (cfg.optim.lr, cfg.model.name_or_path, cfg.data.train) == (3e-4, str(tmp_path / "model"), "t.jsonl")
    assert result.out == tmp_path / "out"
