"""The tool demo end to end at test size: the calc task is built, SFT on its tool demonstrations
teaches the call format in a few steps, and one iteration of each tool-demo preset runs (GRPO and
PPO with the tools environment calling the calculator; GRPO single-turn without it), with the
trainer scoring exactly the sampled tokens. Hand-made episodes are judged on their final turn."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tether.cli import main
from tether.metrics.logger import read_metrics

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "configs" / "demo"
SFT_STEPS = 150  # at lr 3e-3: the call format is learnt (the numbers in it are not yet)


@pytest.fixture(scope="module")
def calc(tmp_path_factory) -> dict:
    """The task (small sizes) and an SFT model of its tool demonstrations."""
    from tether.config import SFTConfig, load_config
    from tether.objectives.sft import run_sft
    from tether.tasks.calc import build_task

    root = tmp_path_factory.mktemp("calc")
    task = root / "task"
    meta = build_task(task, seed=0, n_sft=200, n_sft_eval=10, n_eval_prompts=16)
    run_sft(load_config(SFTConfig, DEMO / "sft_tools.yaml", [
        f"run.out={root / 'sft'}", "run.progress=false", f"model.name_or_path={task / 'base_model'}",
        f"data.train={task / 'sft_tools_train.jsonl'}", f"data.eval={task / 'sft_tools_eval.jsonl'}",
        "optim.lr=0.003", "optim.batch_size=16", "optim.warmup_steps=0", f"max_steps={SFT_STEPS}", "eval_every=50"]))
    return {"task": task, "sft": root / "sft", "meta": meta}


SIZES = {"grpo_tools": ["rollout.batch_size=4", "group.size=2", "rl.minibatch_size=8"],
         "grpo_notool": ["rollout.batch_size=4", "group.size=2", "rl.minibatch_size=8"],
         "ppo_tools": ["rollout.batch_size=8", "rl.minibatch_size=8"]}


def preset_run(calc: dict, name: str, out: Path) -> list[dict]:
    """One iteration of configs/demo/NAME.yaml on the test task; its metric rows."""
    task = calc["task"]
    command = "ppo" if name.startswith("ppo") else "grpo"
    assert main([command, "--config", str(DEMO / f"{name}.yaml"), f"run.out={out}", "run.progress=false",
                 "run.seed=3", f"model.name_or_path={calc['sft']}", f"prompts={task / 'rl_prompts.jsonl'}",
                 f"eval.prompts={task / 'eval_prompts.jsonl'}", "eval.max_prompts=4", "rl.iterations=1",
                 "rl.epochs=1", "rollout.capture_logprobs=true", *SIZES[name]]) == 0
    return [r for r in read_metrics(out / "metrics.jsonl") if "objective/score" in r]


@pytest.mark.parametrize("name", ["grpo_tools", "ppo_tools"])
def test_the_tool_presets_run_episodes_that_call_the_calculator(calc, name, tmp_path):
    (row,) = preset_run(calc, name, tmp_path / name)
    assert row["env/turns"] >= 1 and "eval/gold_score" in row
    assert row["env/tool_calls"] > 0  # the SFT model writes calls the parser accepts
    assert row["rollout/token_mismatch"] == 0.0  # the episode's ids are the sampled ones
    samples = [json.loads(line) for line in (tmp_path / name / "samples.jsonl").read_text().splitlines()]
    results = [m["content"] for s in samples for m in s["messages"] if m.get("name") == "calculator"]
    assert results and any(r.isdigit() for r in results)  # a product, not only "error: ..." answers


def test_the_baseline_preset_runs_single_turn(calc, tmp_path):
    (row,) = preset_run(calc, "grpo_notool", tmp_path / "notool")
    assert not any(k.startswith("env/") for k in row) and "eval/gold_score" in row


def test_hand_made_episodes_are_judged_on_their_final_answer():
    from tether.rollout.episodes import final_answer
    from tether.tasks.calc import world
    from tether.tasks.calc.judge import gold_reward

    prompt = "what is 37 times 4 ?"
    right = world.tool_conversation(prompt, 37, 4)  # the call, 148, "37 times 4 is 148 ."
    slipped = world.tool_conversation(prompt, 38, 4)  # the call off by one: 152
    still_calling = right[:2]  # truncated with a call as its last turn
    answers = [final_answer(m) for m in (right, slipped, still_calling)]
    assert answers[:2] == ["37 times 4 is 148 .", "37 times 4 is 152 ."]
    assert gold_reward([prompt] * 3, answers) == [1.0, -1.0, -1.5]


def test_tether_compare_runs_the_tool_demo_at_test_size(tmp_path, capsys):
    """`tether compare --tool-demo` end to end for one seed at test size: both SFTs, GRPO in episodes
    and GRPO single-turn, every checkpoint measured on the held-out facts; the table, the chart and
    the per-seed report written; flags that do not apply are refused."""
    out = tmp_path / "cmp"
    small = ["rl.iterations=1", "rl.epochs=1", "rollout.batch_size=4", "group.size=2", "rl.minibatch_size=8"]
    sets = ["task:n_sft=200", "task:n_sft_eval=10", "task:n_eval_prompts=8", "sft_tools:max_steps=20",
            "sft_notool:max_steps=20", *(f"{m}:{kv}" for m in ("grpo", "notool") for kv in small)]
    args = ["compare", "--tool-demo", "--methods", "grpo,notool", "--eval-repeats", "1", "--out", str(out)]
    assert main([*args, *(a for s in sets for a in ("--set", s))]) == 0
    data = json.loads((out / "compare.json").read_text())
    seed = data["per_seed"][0]["methods"]
    assert seed["grpo"]["rl"]["n"] == 8 and seed["grpo"]["rl"]["turns"] >= 1 and "tool_call_rate" in seed["grpo"]["rl"]
    assert "turns" not in seed["notool"]["rl"] and seed["grpo"]["train_env"]["iteration"] == 1
    assert "rl_gold_minus_notool" in data["summary"]["grpo"]
    assert (out / "compare.png").stat().st_size > 10_000 and (out / "seed0" / "report.json").is_file()
    assert "| gold after RL |" in capsys.readouterr().out
    assert main([*args, "--jobs", "2"]) == 2
    assert "--jobs does not apply" in capsys.readouterr().err
    assert main([*args[:-2], "--methods", "rloo", "--out", str(tmp_path / "x")]) == 2
    assert "notool" in capsys.readouterr().err
