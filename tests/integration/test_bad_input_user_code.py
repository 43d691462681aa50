"""User code that fails inside a run, through the real CLI: a reward callable that raises, answers
one float for the batch or NaN for a row, and a plugin algorithm whose advantages have the wrong
shape, each end the run with one paragraph naming the callable or the algorithm, exit code 2 and
no traceback, and leave no complete run behind (docs/reliability.md)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from bad_input_helpers import assert_clean_error, assert_not_complete, cli, good_prompts, ppo_args, write_jsonl

HERE = Path(__file__).resolve().parent


@pytest.mark.parametrize("fn, needles", [
    ("raises", ("Reward callable 'reward_fns:raises' raised ZeroDivisionError: float division by zero",)),
    ("one_float", ("'reward_fns:one_float' returned a single float, 0.5", "expected a list of 2 floats")),
    ("nan_second", ("'reward_fns:nan_second' returned a non-finite score for 1 of 2 responses", "row 1 (nan")),
])
def test_a_failing_reward_callable_is_one_paragraph(task, tmp_path, capsys, fn, needles):
    prompts = write_jsonl(tmp_path / "prompts.jsonl", good_prompts())
    out = tmp_path / "run"
    code, err = cli(capsys, ppo_args(task, out, prompts, reward=f"reward.callable=reward_fns:{fn}"))
    assert_clean_error(code, err, "ppo", *needles)
    assert_not_complete(out)


def test_a_failing_reward_term_callable_is_named_too(task, tmp_path, capsys):
    prompts = write_jsonl(tmp_path / "prompts.jsonl", good_prompts())
    out = tmp_path / "run"
    terms = "reward.terms=[{name: judge, callable: 'reward_fns:raises'}, {name: short, length_penalty: 0.1}]"
    code, err = cli(capsys, ppo_args(task, out, prompts, reward=terms))
    assert_clean_error(code, err, "ppo", "'reward_fns:raises' raised ZeroDivisionError")
    assert_not_complete(out)


@pytest.fixture
def bad_plugin(monkeypatch):
    from tether.registry import plugins as registry
    from tether.registry.algorithms import ALGORITHMS, PLUGINS_ENV

    plugin = HERE / "plugins" / "bad_advantages.py"
    monkeypatch.setenv(PLUGINS_ENV, str(plugin))
    yield "bad_advantages"
    ALGORITHMS.pop("bad_advantages", None)
    registry._loaded.discard(str(plugin))
    sys.modules.pop(plugin.stem, None)


def test_a_plugin_algorithms_advantages_of_the_wrong_shape(task, tmp_path, capsys, bad_plugin):
    prompts = write_jsonl(tmp_path / "prompts.jsonl", good_prompts())
    out = tmp_path / "run"
    argv = [bad_plugin, *ppo_args(task, out, prompts)[1:]]
    argv = [a for a in argv if not a.startswith("critic.")]  # no critic: its keys are refused
    code, err = cli(capsys, argv)
    assert_clean_error(code, err, bad_plugin, "Algorithm 'bad_advantages' (bad_advantages:PerResponseAdvantages)",
                       "advantages as a torch.float32 tensor of shape (2,)", "expected a floating tensor of shape (2, ")
    assert_not_complete(out)
