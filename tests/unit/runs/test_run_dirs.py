"""Which directories hold "the same run" (resume from anywhere, keys renamed since a run was saved)."""

from __future__ import annotations

import os

import pytest
import yaml

from tether.config import RLConfig, load_config, to_dict
from tether.common.errors import ConfigError
from tether.runs import check_run_dir

BASE = ["model.name_or_path=m", "prompts=p.jsonl", "reward.models=[r]"]


def saved(out, data: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.yaml").write_text(yaml.safe_dump(data))


def test_a_run_saved_before_keys_moved_is_still_the_same_run(tmp_path):
    """A config.yaml written before those keys moved (ppo.autocast, ppo.linear_backend, run.retain_memory,
    ppo.balance_roles, ppo.iterations and the loop's other rl.* keys; no run.device, run.precision or
    cpu:) matches the same run today."""
    cfg = load_config(RLConfig, None, [*BASE, f"run.out={tmp_path / 'run'}"])
    old = {"stage": "ppo", "workdir": os.getcwd(), **to_dict(cfg)}
    del old["cpu"]
    del old["run"]["device"], old["run"]["precision"]
    old["run"]["retain_memory"] = True
    old["ppo"] = {**old.pop("rl"), **old["ppo"]}  # the loop's keys (rl.*) were ppo.*
    old["ppo"].update({"autocast": "none", "linear_backend": "auto", "parallel_roles": True, "balance_roles": True})
    saved(tmp_path / "run", old)
    check_run_dir(tmp_path / "run", cfg, "ppo", resume=True)
    other = load_config(RLConfig, None, [*BASE, f"run.out={tmp_path / 'run'}", "run.precision=bf16"])
    with pytest.raises(ConfigError, match="different run"):
        check_run_dir(tmp_path / "run", other, "ppo", resume=True)


def test_a_moved_run_is_the_same_run_and_relative_inputs_compare_as_paths(tmp_path, monkeypatch):
    (tmp_path / "a" / "data").mkdir(parents=True)
    (tmp_path / "a" / "data" / "p.jsonl").write_text("{}\n")
    monkeypatch.chdir(tmp_path / "a")
    cfg = load_config(RLConfig, None, ["model.name_or_path=m", "prompts=data/p.jsonl", "reward.models=[r]",
                                        "run.out=somewhere/else"])
    saved(tmp_path / "copy", {"stage": "ppo", "workdir": str(tmp_path / "a"), **to_dict(cfg)})
    (tmp_path / "b").mkdir()
    monkeypatch.chdir(tmp_path / "b")  # from elsewhere, the same inputs are given as absolute paths
    moved = load_config(RLConfig, None, ["model.name_or_path=m", f"prompts={tmp_path / 'a' / 'data' / 'p.jsonl'}",
                                          "reward.models=[r]", f"run.out={tmp_path / 'copy'}"])
    check_run_dir(tmp_path / "copy", moved, "ppo", resume=True)
