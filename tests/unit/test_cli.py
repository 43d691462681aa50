"""The `tether` command line: help text, config keys, errors without tracebacks, --print-config."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tether.cli import main
from tether.config import RLConfig, SFTConfig, describe, load_config, to_dict

ROOT = Path(__file__).resolve().parents[2]
SFT_PRESET = str(ROOT / "configs" / "demo" / "sft.yaml")
PPO_PRESET = str(ROOT / "configs" / "demo" / "ppo.yaml")


def run_help(argv, capsys) -> str:
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 0
    return capsys.readouterr().out


def test_top_level_help_lists_commands(capsys):
    out = run_help(["--help"], capsys)
    for command in ("demo", "sft", "rm", "ppo"):
        assert command in out


def test_ppo_help_lists_every_config_key(capsys):
    out = run_help(["ppo", "--help"], capsys)
    for key, _, _ in describe(RLConfig):
        assert f"  {key} (default" in out, key
    assert "--print-config" in out and "--config" in out


def test_sft_help_lists_every_config_key(capsys):
    out = run_help(["sft", "--help"], capsys)
    for key, _, _ in describe(SFTConfig):
        assert f"  {key} (default" in out, key


def test_unknown_override_exits_2_without_traceback(capsys):
    code = main(["sft", "--config", SFT_PRESET, "optim.lrr=0.1"])
    err = capsys.readouterr().err
    assert code == 2
    assert "Unknown config key 'optim.lrr'" in err and "optim.lr" in err
    assert "Traceback" not in err
    assert err.startswith("tether sft: error:")


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["ppo", "--config", PPO_PRESET, "kl.coef=-1"], "kl.coef"),
        (["sft", "--config", "/no/such/preset.yaml"], "does not exist"),
        (["sft", "--config", SFT_PRESET, "noequals"], "key.path=value"),
        (["ppo", "--config", str(ROOT / "configs" / "reference" / "ppo.yaml")], "model.name_or_path"),
    ],
)
def test_config_errors_exit_2(argv, needle, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err


def test_print_config_prints_resolved_yaml(capsys):
    code = main(["sft", "--config", SFT_PRESET, "--print-config", "optim.lr=0.002", "run.seed=7"])
    assert code == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    expected = load_config(SFTConfig, SFT_PRESET, ["optim.lr=0.002", "run.seed=7"])
    assert printed == to_dict(expected)
    assert printed["optim"]["lr"] == 0.002 and printed["run"]["seed"] == 7


def test_print_config_ppo_has_every_section(capsys):
    assert main(["ppo", "--config", PPO_PRESET, "--print-config"]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    for section in ("run", "model", "reward", "critic", "rollout", "kl", "ppo", "eval"):
        assert isinstance(printed[section], dict), section
    assert printed["kl"]["coef"] == 0.2


def test_bad_demo_set_exits_2(capsys):
    assert main(["demo", "--set", "nostage"]) == 2
    assert "STAGE:KEY=VALUE" in capsys.readouterr().err


def test_missing_command_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as info:
        main([])
    assert info.value.code == 2
