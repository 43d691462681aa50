"""A run's own saved ``config.yaml`` is a preset: ``tether STAGE --config RUN/config.yaml`` loads
it for the stage that saved it (the run's bookkeeping keys read, not refused) and refuses it, in
one paragraph naming the right command, for any other stage."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from tether.registry.algorithms import ALGORITHMS
from tether.cli import main
from tether.config import load_config, to_dict
from tether.common.errors import ConfigError
from tether.runs import prepare_run_dir
from tether.registry.stages import stages

RL_REQUIRED = ["prompts={data}", "reward.callable=tether.tasks.arith.judge:gold_reward"]


def _stage_overrides(name: str, data: Path, out: Path) -> list[str]:
    """Enough keys for a valid config of stage ``name`` (what `tether NAME` adds for an RL stage included)."""
    spec = stages()[name]
    keys = [f"model.name_or_path={data.parent / 'model'}", f"run.out={out}"]
    if spec.algorithm:
        critic = ["critic.init=policy"] if ALGORITHMS[name].needs_critic else []
        required = RL_REQUIRED if ALGORITHMS[name].needs_reward else ["prompts={data}", f"reference={data.parent / 't'}"]
        return [*keys, *(k.format(data=data) for k in required), *critic, f"algorithm={name}"]
    return [*keys, f"data.train={data}"]


def _saved(name: str, tmp_path: Path) -> tuple[object, Path]:
    """(the resolved config, the config.yaml its run wrote), written as a run writes it."""
    data = tmp_path / "rows.jsonl"
    data.write_text("{}\n")
    out = tmp_path / "runs" / name
    cfg = load_config(stages()[name].config_class(), None, _stage_overrides(name, data, out))
    prepare_run_dir(out, cfg, name)
    return cfg, out / "config.yaml"


def _forced(name: str) -> list[str]:
    """What `tether NAME` adds to the overrides (an RL command names its algorithm)."""
    return [f"algorithm={name}"] if stages()[name].algorithm else []


STAGES = list(stages())


@pytest.mark.parametrize("name", STAGES)
def test_a_saved_config_loads_back_for_its_own_stage(name, tmp_path):
    cfg, saved = _saved(name, tmp_path)
    raw = yaml.safe_load(saved.read_text())
    assert raw["stage"] == name and "workdir" in raw  # the bookkeeping the run adds, read below
    assert load_config(type(cfg), saved, _forced(name)) == cfg
    assert load_config(type(cfg), saved, [*_forced(name), "run.seed=9"]).run.seed == 9  # overrides still apply


@pytest.mark.parametrize("name", STAGES)
def test_a_saved_config_is_refused_for_another_stage_naming_the_right_command(name, tmp_path):
    _, saved = _saved(name, tmp_path)
    others = [n for n in STAGES if n != name]
    # the next stage of another kind and, for an RL stage, another RL stage too (same config class)
    picks = {others[STAGES.index(name) % len(others)]}
    picks |= {n for n in others if stages()[n].algorithm and stages()[name].algorithm}
    for other in sorted(picks):
        with pytest.raises(ConfigError) as info:
            load_config(stages()[other].config_class(), saved, _forced(other))
        text = str(info.value)
        assert f"'{saved}' was saved by `tether {name}`" in text and f"`tether {name} --config {saved}`" in text
        assert f"this is `tether {other}`" in text and "\n" not in text


def test_relative_inputs_of_a_saved_config_are_read_from_where_its_run_started(tmp_path, monkeypatch):
    started = tmp_path / "project"
    started.mkdir()
    (started / "train.jsonl").write_text("{}\n")
    monkeypatch.chdir(started)
    cfg = load_config(stages()["sft"].config_class(), None,
                      ["model.name_or_path=some/hub-id", "data.train=train.jsonl", f"run.out={tmp_path / 'run'}"])
    prepare_run_dir(tmp_path / "run", cfg, "sft")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    again = load_config(type(cfg), tmp_path / "run" / "config.yaml")
    assert again.data.train == str(started / "train.jsonl")
    assert again.model.name_or_path == "some/hub-id"  # not a path there: left alone


def test_an_unknown_saved_stage_is_named(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"stage": "not_a_stage", "workdir": str(tmp_path),
                                    "model": {"name_or_path": "m"}, "data": {"train": "t.jsonl"}}))
    with pytest.raises(ConfigError, match="key 'stage' = 'not_a_stage': expected the stage .* sft, rm"):
        load_config(stages()["sft"].config_class(), path)
    # Only a preset file's own bookkeeping is read: 'stage' stays no override (nor a key of a dict).
    with pytest.raises(ConfigError, match="Unknown config key 'stage'"):
        load_config(stages()["sft"].config_class(), None, ["stage=sft", "model.name_or_path=m", "data.train=t"])


def test_the_cli_reruns_a_saved_config_and_refuses_it_under_another_command(tmp_path, capsys):
    cfg, saved = _saved("sft", tmp_path)
    assert main(["sft", "--config", str(saved), "--print-config"]) == 0
    assert yaml.safe_load(capsys.readouterr().out) == to_dict(cfg)
    assert main(["dpo", "--config", str(saved), "--print-config"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tether dpo: error:") and f"run it with `tether sft --config {saved}`" in err
    assert err.strip().count("\n") == 0 and "Traceback" not in err and "Unknown config key" not in err


def test_the_cli_refuses_one_rl_algorithms_saved_config_under_another(tmp_path, capsys):
    cfg, saved = _saved("grpo", tmp_path)
    assert main(["grpo", "--config", str(saved), "--print-config"]) == 0
    assert yaml.safe_load(capsys.readouterr().out) == to_dict(cfg)
    assert main(["ppo", "--config", str(saved), "--print-config"]) == 2
    err = capsys.readouterr().err
    assert "tether grpo" in err and err.strip().count("\n") == 0 and "Traceback" not in err
    assert os.path.isfile(saved)


@pytest.mark.parametrize("name", ["sft", "dpo", "grpo"])
def test_the_python_api_takes_a_saved_config_for_its_own_stage_only(name, tmp_path):
    from tether.api import resolve_config

    cfg, saved = _saved(name, tmp_path)
    forced = {"algorithm": name} if stages()[name].algorithm else None
    assert resolve_config(type(cfg), str(saved), None, forced) == cfg
    other = "kto" if name != "kto" else "sft"
    with pytest.raises(ConfigError, match=rf"was saved by `tether {name}`"):
        resolve_config(stages()[other].config_class(), saved, None)


def _before_the_rl_block(saved: Path) -> Path:
    """``saved`` rewritten as a run saved it while the loop's keys were ``ppo.*`` (no ``rl`` block)."""
    raw = yaml.safe_load(saved.read_text())
    raw["ppo"] = {**raw.pop("rl"), **raw["ppo"]}
    saved.write_text(yaml.safe_dump(raw, sort_keys=False))
    return saved


@pytest.mark.parametrize("name", ["ppo", "grpo", "rs"])
def test_a_config_saved_with_the_loop_keys_under_ppo_loads_and_resumes_as_the_same_run(name, tmp_path, caplog):
    from tether.runs import check_run_dir

    cfg, saved = _saved(name, tmp_path)
    _before_the_rl_block(saved)
    with caplog.at_level("WARNING", logger="tether.config"):
        assert load_config(type(cfg), saved, _forced(name)) == cfg  # --config RUN/config.yaml
    assert "config key 'ppo.iterations' is now 'rl.iterations'" in caplog.text
    assert "config key 'ppo.epochs' is now 'rl.epochs'" in caplog.text
    assert check_run_dir(saved.parent, cfg, name, resume=True) == saved.parent  # --resume: the same run
    with pytest.raises(ConfigError, match="different run"):
        check_run_dir(saved.parent, load_config(type(cfg), saved, [*_forced(name), "rl.iterations=7"]), name,
                      resume=True)


def test_the_cli_reads_a_config_saved_with_the_loop_keys_under_ppo_and_prints_the_new_names(tmp_path, capsys):
    cfg, saved = _saved("grpo", tmp_path)
    _before_the_rl_block(saved)
    assert main(["grpo", "--config", str(saved), "--print-config", "ppo.iterations=3"]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["rl"]["iterations"] == 3 and "iterations" not in printed["ppo"]
    assert printed == to_dict(load_config(type(cfg), None, [*_stage_overrides("grpo", tmp_path / "rows.jsonl",
                                                                                 tmp_path / "runs" / "grpo"),
                                                             "rl.iterations=3"]))
