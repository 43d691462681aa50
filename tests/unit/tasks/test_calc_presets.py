"""The tool demo's presets (configs/demo/*_tools.yaml, *_notool.yaml) load as written, point at the
calc task, and the tool runs' episodes fit the model's context."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tether.config import RLConfig, SFTConfig, load_config, to_dict
from tether.config.environment import episode_budget
from tether.tasks.calc import JUDGE, REWARD, TOOL
from tether.tasks.calc.tokenizer import MODEL_MAX_LENGTH

DEMO = Path(__file__).resolve().parents[3] / "configs" / "demo"
PROMPT_TOKENS = 11  # <bos> user : what is A times B ? assistant :
EPISODE_TOKENS = 20 + 5 + 20 + 5 + 7  # call, result, call again, result, answer


def flatten(d: dict, prefix: str = "") -> dict:
    """Dotted keys of a config dict (an empty mapping is a leaf)."""
    out = {}
    for k, v in d.items():
        if isinstance(v, dict) and v:
            out.update(flatten(v, prefix + k + "."))
        else:
            out[prefix + k] = v
    return out


@pytest.mark.parametrize(("name", "cls"), [("sft_tools", SFTConfig), ("sft_notool", SFTConfig),
                                           ("grpo_tools", RLConfig), ("ppo_tools", RLConfig),
                                           ("grpo_notool", RLConfig)])
def test_a_preset_loads_as_written(name, cls):
    cfg = load_config(cls, DEMO / f"{name}.yaml")
    assert cfg.run.out == f"runs/calc/{name}"
    flat = flatten(to_dict(cfg))
    for key, value in flatten(yaml.safe_load((DEMO / f"{name}.yaml").read_text())).items():
        assert flat[key] == value, key


@pytest.mark.parametrize("name", ["grpo_tools", "ppo_tools"])
def test_the_tool_runs_call_the_calculator_within_the_context(name):
    cfg = load_config(RLConfig, DEMO / f"{name}.yaml")
    env = cfg.environment
    assert (env.kind, env.tool_targets(), env.max_turns) == ("tools", {"calculator": TOOL}, 3)
    assert EPISODE_TOKENS <= episode_budget(cfg) and PROMPT_TOKENS + episode_budget(cfg) <= MODEL_MAX_LENGTH
    assert cfg.rollout.max_new_tokens >= 20  # a call with its <eos>
    assert (cfg.reward.callable, cfg.eval.judge) == (REWARD, JUDGE)
    assert cfg.model.name_or_path == "runs/calc/sft_tools"


def test_the_baseline_is_the_same_grpo_single_turn_from_the_no_tool_model():
    tools = flatten(to_dict(load_config(RLConfig, DEMO / "grpo_tools.yaml")))
    notool = flatten(to_dict(load_config(RLConfig, DEMO / "grpo_notool.yaml")))
    differ = {k for k in tools if tools[k] != notool.get(k)}
    assert {k for k in differ if not k.startswith("environment.")} == {"run.out", "model.name_or_path"}
    assert notool["environment.kind"] == "none"
