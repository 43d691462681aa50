"""benchmarks/tool_demo.py's bookkeeping on hand-made reports: the tool rates from env/* totals,
the statistics over seeds and the table (the runs themselves are the integration tests' job)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

PATH = Path(__file__).resolve().parents[3] / "benchmarks" / "tool_demo.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("tool_demo", PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_tool_rates_count_every_failed_block(bench):
    env = {"env/tool_calls": 6.0, "env/malformed_calls": 2.0, "env/bad_arguments": 1.0, "env/turns": 2.0}
    assert bench.tool_rates(env, 4) == {"tool_call_rate": 1.5, "tool_error_rate": 3 / 8}
    assert bench.tool_rates({}, 4) == {"tool_call_rate": 0.0, "tool_error_rate": None}


def report(seed: int, tools_gold: float, notool_gold: float) -> dict:
    measured = {"accuracy": 0.5, "tool_call_rate": 1.0, "tool_error_rate": 0.1}
    return {"seed": seed,
            "tools": {"sft": {"gold": 0.0, **measured}, "grpo": {"gold": tools_gold, **measured},
                      "train_env": {"tool_call_rate": 1.0, "tool_error_rate": 0.0}},
            "notool": {"sft": {"gold": -0.9, "accuracy": 0.0}, "grpo": {"gold": notool_gold, "accuracy": 0.0}}}


def test_the_summary_over_seeds_and_its_table(bench):
    summary = bench.summarise([report(0, 0.5, -1.0), report(1, 0.7, -0.8)])
    assert summary["tools"]["grpo_gold"]["values"] == [0.5, 0.7]
    assert summary["tools"]["grpo_gold"]["mean"] == pytest.approx(0.6)
    low, high = summary["tools"]["grpo_gold"]["ci95"]
    assert low < 0.6 < high
    assert summary["grpo_gold_tools_minus_notool"]["mean"] == pytest.approx(1.5)
    assert summary["tools"]["train_env_tool_error_rate"]["mean"] == 0.0
    text = bench.table(summary, 2)
    assert "| gold after GRPO | +0.600 [" in text and "| accuracy after SFT | 0.500 [" in text
    assert bench.parse_args(["--out", "x"]).seeds == 3
