"""docs/architecture.md's "how to add" row for an environment kind, held by adding one: a file outside
``src/`` (tests/integration/plugins/quiz_env.py) loaded with ``TETHER_PLUGINS``, whose per-turn
rewards reach PPO per token and GRPO as the episode's total, through the dry run and training."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tether.cli import main
from tether.metrics.logger import read_metrics
from tether.registry.environments import ENVIRONMENTS
from tether.registry.plugins import PLUGINS_ENV

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
PLUGIN = HERE / "plugins" / "quiz_env.py"


@pytest.fixture
def plugin(monkeypatch):
    from tether.registry import plugins as registry

    monkeypatch.syspath_prepend(str(HERE))
    monkeypatch.setenv(PLUGINS_ENV, str(PLUGIN))
    yield
    ENVIRONMENTS.pop("quiz", None)
    registry._loaded.discard(str(PLUGIN))
    sys.modules.pop(PLUGIN.stem, None)


def args(trained, out, *extra):
    task = trained["task"]
    return [f"run.out={out}", "run.progress=false", "run.log_every=1", "run.seed=3", "run.threads=1",
            f"model.name_or_path={trained['sft']}", f"prompts={task / 'ppo_prompts.jsonl'}",
            "reward.callable=reward_fns:brief", "rl.iterations=2", "rollout.batch_size=2", "rl.minibatch_size=4",
            "group.size=2", "rollout.max_new_tokens=6", "rl.epochs=1", "environment.kind=quiz",
            "environment.args=[questions=2]", "environment.max_turns=3", "environment.max_tokens=40",
            "rl.on_invariant=error", *extra]


@pytest.mark.parametrize("algorithm, extra", [("ppo", ["critic.init=policy"]), ("grpo", []),
                                               ("grpo", ["group.advantage=process"])])  # turns as GRPO's steps
def test_a_plugin_environment_with_per_turn_rewards_trains(algorithm, extra, plugin, trained, tmp_path, capsys):
    assert main([algorithm, *args(trained, tmp_path / "plan", *extra), "--dry-run"]) == 0
    assert "quiz environment: up to 3 turns" in capsys.readouterr().out
    out = tmp_path / algorithm
    assert main([algorithm, *args(trained, out, *extra)]) == 0
    rows = [r for r in read_metrics(out / "metrics.jsonl") if "objective/score" in r]
    assert len(rows) == 2
    for row in rows:
        assert 1 < row["env/turns"] <= 3 and 0 <= row["env/turn_reward"] <= 1


def test_a_built_in_kind_takes_no_args(trained, tmp_path, capsys):
    argv = [a for a in args(trained, tmp_path / "x") if not a.startswith("environment.kind")]
    assert main(["grpo", *argv, "environment.kind=scripted"]) == 2
    assert "environment.args" in capsys.readouterr().err
