"""`tether compare --tool-demo`'s bookkeeping on hand-made reports: the tool rates from env/*
totals, the statistics over seeds, the table and the chart (the runs themselves are the
integration test's job)."""

from __future__ import annotations

import pytest

from tether.common.errors import ConfigError
from tether.demo.tool_compare import methods, summarise, task_settings, tool_rates
from tether.plots.tool_compare import tool_compare_plot, tool_compare_table


def test_the_tool_rates_count_every_failed_block():
    env = {"env/tool_calls": 6.0, "env/malformed_calls": 2.0, "env/bad_arguments": 1.0, "env/turns": 2.0}
    assert tool_rates(env, 4) == {"tool_call_rate": 1.5, "tool_error_rate": 3 / 8}
    assert tool_rates({}, 4) == {"tool_call_rate": 0.0, "tool_error_rate": None}


def report(seed: int, tools_gold: float, notool_gold: float) -> dict:
    measured = {"accuracy": 0.5, "tool_call_rate": 1.0, "tool_error_rate": 0.1}
    return {"seed": seed, "methods": {
        "grpo": {"sft": {"gold": 0.0, **measured}, "rl": {"gold": tools_gold, **measured},
                 "train_env": {"tool_call_rate": 1.0, "tool_error_rate": 0.0}},
        "notool": {"sft": {"gold": -0.9, "accuracy": 0.0}, "rl": {"gold": notool_gold, "accuracy": 0.0}}}}


def test_the_summary_over_seeds_its_table_and_chart(tmp_path):
    reports = [report(0, 0.5, -1.0), report(1, 0.7, -0.8)]
    summary = summarise(reports, ["grpo", "notool"])
    assert summary["grpo"]["rl_gold"]["values"] == [0.5, 0.7]
    assert summary["grpo"]["rl_gold"]["mean"] == pytest.approx(0.6)
    low, high = summary["grpo"]["rl_gold"]["ci95"]
    assert low < 0.6 < high
    assert summary["grpo"]["rl_gold_minus_notool"]["mean"] == pytest.approx(1.5)
    assert summary["grpo"]["train_tool_error_rate"]["mean"] == 0.0
    assert "rl_gold_minus_notool" not in summary["notool"]
    data = {"methods": ["grpo", "notool"], "seeds": [0, 1], "summary": summary}
    text = tool_compare_table(data)
    assert "| gold after RL | +0.600 [" in text and "| accuracy after SFT | 0.500 [" in text
    assert "| tool calls / episode (RL, held out) | 1.000 [" in text and text.count("—") >= 1
    assert tool_compare_plot(data, tmp_path / "c.png").stat().st_size > 10_000


def test_the_methods_are_the_algorithms_with_a_tool_preset_and_the_baseline():
    assert set(methods()) == {"ppo", "grpo", "notool"} and methods()[-1] == "notool"


def test_the_task_sizes_are_checked():
    assert task_settings(["n_sft=200"]) == {"n_sft": 200}
    with pytest.raises(ConfigError, match="task:KEY=INTEGER"):
        task_settings(["n_sfts=2"])
    with pytest.raises(ConfigError, match="task:KEY=INTEGER"):
        task_settings(["n_sft=lots"])
