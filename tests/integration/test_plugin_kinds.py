"""docs/architecture.md's "how to add" table, held by adding things: a reward kind and a
generation engine, each one file outside ``src/`` (tests/integration/plugins/) loaded with
``TETHER_PLUGINS``, run from the CLI and the Python API through the dry run, training, the final
save and the model card, without a line of tether changed. (The RL algorithm's plugin:
test_plugin_algorithm.py; the supervised stage's: test_plugin_stage.py.)"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from card_checks import assert_model_card
from tether.cli import main
from tether.metrics.logger import read_metrics
from tether.registry.engines import ENGINES
from tether.registry.plugins import PLUGINS_ENV
from tether.registry.rewards import REWARD_KINDS

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
REWARD_PLUGIN = HERE / "plugins" / "keyword_reward.py"
ENGINE_PLUGIN = HERE / "plugins" / "greedy_engine.py"


def rl_args(trained, out, *extra):
    task = trained["task"]
    return [f"run.out={out}", "run.progress=false", "run.log_every=1", "run.seed=3", "run.threads=1",
            f"model.name_or_path={trained['sft']}", f"prompts={task / 'ppo_prompts.jsonl'}", "rl.iterations=2",
            "rollout.batch_size=4", "rl.minibatch_size=4", "rollout.max_new_tokens=8", "rl.epochs=1", *extra]


@pytest.fixture
def plugins(monkeypatch):
    """Both plugins named by TETHER_PLUGINS (as a user sets it); unregistered afterwards."""
    from tether.registry import plugins as registry

    monkeypatch.syspath_prepend(str(HERE))
    monkeypatch.setenv(PLUGINS_ENV, f"{REWARD_PLUGIN},{ENGINE_PLUGIN}")
    yield
    REWARD_KINDS.pop("keyword", None)
    ENGINES.pop("greedy", None)
    for path in (REWARD_PLUGIN, ENGINE_PLUGIN):
        registry._loaded.discard(str(path))
        sys.modules.pop(path.stem, None)


TERMS = "reward.terms=[{name: seven, kind: keyword, args: [word=7, bonus=2]}, {name: brief, callable: 'reward_fns:brief'}]"


def test_a_plugin_reward_kind_runs_from_the_cli_to_its_model_card(plugins, trained, tmp_path, capsys):
    out = tmp_path / "cli"
    assert main(["grpo", *rl_args(trained, tmp_path / "plan", TERMS), "--dry-run"]) == 0
    assert "2 if the response contains '7', else 0 (a plugin kind)" in capsys.readouterr().out
    assert main(["grpo", *rl_args(trained, out, TERMS)]) == 0
    rows = [r for r in read_metrics(out / "metrics.jsonl") if "reward/seven" in r]
    assert len(rows) == 2 and all(r["reward/seven"] in (0.0, 2.0) or 0 < r["reward/seven"] < 2 for r in rows)
    assert yaml.safe_load((out / "config.yaml").read_text())["reward"]["terms"][0]["kind"] == "keyword"
    card = assert_model_card(out, "grpo", metric="objective/score")
    assert "seven x 1" in card.text
    bad = "reward.terms=[{name: seven, kind: keyword, args: [colour=red]}]"
    assert main(["grpo", *rl_args(trained, tmp_path / "bad", bad)]) == 2
    assert "expected 'key=value' with key one of word, bonus" in capsys.readouterr().err
    assert main(["grpo", *rl_args(trained, tmp_path / "bad2", "reward.terms=[{name: x, kind: nope}]")]) == 2
    assert "expected a registered reward kind" in capsys.readouterr().err


def test_a_plugin_reward_kind_runs_from_the_python_api(plugins, trained, tmp_path):
    import tether

    result = tether.grpo(None, rl_args(trained, tmp_path / "api", TERMS))
    assert len(result.history) == 2 and "reward/seven" in result.history[-1]
    assert (result.out / "README.md").is_file()
    plan = tether.dry_run("grpo", None, rl_args(trained, tmp_path / "api-plan", TERMS))
    assert any("a plugin kind" in line for line in plan.sections["roles"])


def test_a_plugin_engine_runs_from_the_cli_and_the_api_to_its_model_card(plugins, trained, tmp_path, capsys):
    import tether

    extra = ("rollout.engine=greedy", f"reward.models=[{trained['rm']}]")
    assert main(["ppo", *rl_args(trained, tmp_path / "plan", *extra), "--dry-run"]) == 0
    assert "rollouts on greedy" in capsys.readouterr().out
    out = tmp_path / "cli"
    assert main(["ppo", *rl_args(trained, out, *extra)]) == 0
    assert yaml.safe_load((out / "config.yaml").read_text())["rollout"]["engine"] == "greedy"
    assert_model_card(out, "ppo", metric="objective/score")
    # Greedy: the first iteration's responses (and their scores) do not depend on the temperature.
    result = tether.ppo(None, rl_args(trained, tmp_path / "api", *extra, "rollout.temperature=3.0"))
    assert len(result.history) == 2 and (result.out / "README.md").is_file()
    first = [r for r in read_metrics(out / "metrics.jsonl") if "objective/score" in r][0]
    again = result.history[0]
    assert first["objective/score"] == pytest.approx(again["objective/score"], abs=1e-6)
