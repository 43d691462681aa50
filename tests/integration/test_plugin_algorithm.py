"""An algorithm defined outside ``src/`` (tests/integration/plugins/batch_baseline.py: one file
registering one class) runs from the CLI and the Python API through to its model card, with its
command, help, dry run and config checks, without a line of tether changed."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from card_checks import assert_model_card
from tether.registry.algorithms import ALGORITHMS, PLUGINS_ENV
from tether.cli import main
from tether.metrics.logger import read_metrics

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
PLUGIN = HERE / "plugins" / "batch_baseline.py"
NAME = "batch_baseline"


def args(trained, out, *extra):
    task = trained["task"]
    return [f"run.out={out}", "run.progress=false", "run.log_every=1", "run.seed=3", "run.threads=1",
            f"model.name_or_path={trained['sft']}", f"prompts={task / 'ppo_prompts.jsonl'}",
            "reward.callable=reward_fns:brief", "rl.iterations=2", "rollout.batch_size=4", "rl.minibatch_size=4",
            "rollout.max_new_tokens=8", "rl.epochs=1", "rl.on_invariant=error", *extra]


@pytest.fixture
def plugin(monkeypatch):
    """The plugin named by TETHER_PLUGINS (as a user sets it); unregistered afterwards."""
    monkeypatch.syspath_prepend(str(HERE))
    monkeypatch.setenv(PLUGINS_ENV, str(PLUGIN))
    from tether.registry import plugins as registry

    yield

    ALGORITHMS.pop(NAME, None)
    registry._loaded.discard(str(PLUGIN))
    sys.modules.pop(PLUGIN.stem, None)


def test_a_plugin_algorithm_runs_from_the_cli_to_its_model_card(plugin, trained, tmp_path, capsys):
    from tether.cli import build_parser

    assert NAME in build_parser().format_help()  # its command, with the summary its entry gives
    out = tmp_path / "cli"
    assert main([NAME, *args(trained, out)]) == 0
    rows = [r for r in read_metrics(out / "metrics.jsonl") if "objective/score" in r]
    assert len(rows) == 2 and not (out / "critic").exists()
    assert yaml.safe_load((out / "config.yaml").read_text())["stage"] == NAME
    card = assert_model_card(out, NAME, metric="objective/score")
    assert "a batch-baseline policy gradient" in card.text and f"| `algorithm` | `{NAME}` |" in card.text
    assert main([NAME, *args(trained, tmp_path / "plan", "--dry-run")]) == 0
    assert main([NAME, *args(trained, tmp_path / "bad", "rl.gamma=0.9")]) == 2
    assert f"algorithm={NAME}" in capsys.readouterr().err


def test_a_plugin_algorithm_runs_from_the_python_api(plugin, trained, tmp_path):
    import tether

    overrides = args(trained, tmp_path / "api")
    result = tether.run(NAME, None, overrides)
    assert result.stage == NAME and len(result.history) == 2 and (result.out / "README.md").is_file()
    again = getattr(tether, NAME)(None, args(trained, tmp_path / "api2"))
    assert again.metrics.keys() == result.metrics.keys()
