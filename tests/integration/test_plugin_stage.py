"""A supervised stage defined outside ``src/`` (tests/integration/plugins/slic_stage.py: one file
with its config, loss, body and registry entry) runs from the CLI and the Python API through its
command and help, the dry run (the generic planner and the memory model read its entry), training,
the final save and its model card (its own settings and purpose), without a line of tether changed."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml
from card_checks import assert_model_card
from test_dpo import dpo_args as pair_args

from tether.cli import main
from tether.metrics.logger import read_metrics
from tether.registry.plugins import PLUGINS_ENV
from tether.registry.stages import STAGES

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
PLUGIN = HERE / "plugins" / "slic_stage.py"


@pytest.fixture
def plugin(monkeypatch):
    from tether.registry import plugins as registry

    monkeypatch.syspath_prepend(str(HERE))
    monkeypatch.setenv(PLUGINS_ENV, str(PLUGIN))
    yield
    STAGES.pop("slic", None)
    registry._loaded.discard(str(PLUGIN))
    sys.modules.pop(PLUGIN.stem, None)


def test_a_plugin_stage_runs_from_the_cli_to_its_model_card(plugin, trained, tmp_path, capsys):
    from tether.cli import build_parser

    assert "slic" in build_parser().format_help()
    assert main(["slic", *pair_args(trained, tmp_path / "plan", "slic.delta=2.0"), "--dry-run"]) == 0
    plan = capsys.readouterr().out
    assert "300 preference pairs" in plan and "forward + backward + AdamW" in plan and "predicted" in plan
    assert "reference  log-probs" not in plan and not (tmp_path / "plan").exists()
    out = tmp_path / "cli"
    assert main(["slic", *pair_args(trained, out, "slic.delta=2.0", "max_steps=8", "eval_every=8")]) == 0
    first = [r for r in read_metrics(out / "metrics.jsonl") if "train/loss" in r][0]
    last = [r for r in read_metrics(out / "metrics.jsonl") if "eval/loss" in r][-1]
    assert last["eval/loss"] < first["train/loss"]
    assert yaml.safe_load((out / "config.yaml").read_text())["stage"] == "slic"
    card = assert_model_card(out, "slic", metric="eval/accuracy")
    assert "a hinge on the log-probability margin, a plugin stage" in card.text and "| `slic.delta` | 2 |" in card.text
    assert main(["slic", *pair_args(trained, tmp_path / "bad", "slic.delta=-1")]) == 2
    assert "slic.delta" in capsys.readouterr().err


def test_a_plugin_stage_runs_from_the_python_api(plugin, trained, tmp_path):
    import tether

    result = tether.slic(None, pair_args(trained, tmp_path / "api", "max_steps=4", "eval_every=4"))
    assert result.stage == "slic" and (result.out / "README.md").is_file() and "eval/accuracy" in result.metrics
    again = tether.run("slic", None, pair_args(trained, tmp_path / "api2", "max_steps=4", "eval_every=4"))
    assert again.metrics["eval/accuracy"] == pytest.approx(result.metrics["eval/accuracy"])
    plan = tether.dry_run("slic", None, pair_args(trained, tmp_path / "api-plan"))
    assert plan.peak and "update" in plan.peak["phases"] and "logprobs" not in plan.peak["phases"]


def test_an_incomplete_stage_entry_is_refused():
    from tether.common.errors import ConfigError
    from tether.registry.stages import StageSpec, register_stage

    with pytest.raises(ConfigError, match="expected purpose, inputs, passes in its entry"):
        register_stage(StageSpec("half", "m:C", "m:run", "s", "half"))
    with pytest.raises(ConfigError, match="already registered by tether's built-in"):
        register_stage(STAGES["dpo"].__class__(**{**STAGES["dpo"].__dict__, "run": "elsewhere:run_dpo"}))
