"""build_task of the calc task: files and schemas, held-out facts kept out of training, the two
rows per demonstration, determinism and reuse, the base model's vocabulary and context."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch

from tether.environments.tool_env import ToolEnvironment
from tether.tasks.calc import world
from tether.tasks.calc.build import FILES, build_task, split_facts, tool_rows

SIZES = dict(n_sft=60, n_sft_eval=5, n_eval_prompts=20)


def rows(root: Path, key: str) -> list[dict]:
    """The rows of the task file ``key``."""
    return [json.loads(line) for line in (root / FILES[key]).read_text().splitlines()]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("calc")
    return root, build_task(root, seed=0, **SIZES)


def test_the_files_and_the_manifest(built):
    root, meta = built
    assert all((root / name).exists() for name in FILES.values())
    assert json.loads((root / "task.json").read_text()) == meta
    assert meta["counts"] == {"sft_tools_train": 120, "sft_tools_eval": 10, "sft_notool_train": 120,
                              "sft_notool_eval": 10, "rl_prompts": 700, "eval_prompts": 20}
    assert (meta["n_train_facts"], meta["n_eval_facts"], meta["vocab_size"]) == (700, 20, 1024)
    assert meta["tool"] == "tether.tasks.calc.tools:calculator"
    assert 0.4 < meta["demonstrator_accuracy_tools"] < 1 and 0.4 < meta["demonstrator_accuracy_notool"] < 1


def test_held_out_facts_are_in_no_training_file(built):
    root, _ = built
    held = {r["prompt"] for r in rows(root, "eval_prompts")}
    assert len(held) == 20 and not held & {r["prompt"] for r in rows(root, "rl_prompts")}
    for key in ("sft_tools_train", "sft_notool_train"):
        assert not held & {r["messages"][0]["content"] for r in rows(root, key)}
    for key in ("sft_tools_eval", "sft_notool_eval"):
        assert {r["messages"][0]["content"] for r in rows(root, key)} <= held


def test_prompt_rows_offer_the_calculator(built):
    root, _ = built
    for i, row in enumerate(rows(root, "rl_prompts") + rows(root, "eval_prompts")):
        ToolEnvironment.check_row(row, f"row {i}")
        assert row["tools"] == [world.TOOL_SCHEMA] and world.parse_prompt(row["prompt"])


def test_each_demonstration_is_two_sft_rows(built):
    root, _ = built
    tool = rows(root, "sft_tools_train")
    for call_row, answer_row in zip(tool[0::2], tool[1::2]):
        assert [m["role"] for m in call_row["messages"]] == ["user", "assistant"]
        assert [m["role"] for m in answer_row["messages"]] == ["user", "assistant", "tool", "assistant"]
        assert answer_row["messages"][:2] == call_row["messages"]
        assert call_row["messages"][1]["content"].startswith(world.CALL_OPEN)
    for row in rows(root, "sft_notool_train"):
        assert [m["role"] for m in row["messages"]] == ["user", "assistant"]
        assert world.CALL_OPEN not in row["messages"][1]["content"]


def test_deterministic_and_reused(built):
    root, meta = built
    train, held = split_facts(0, SIZES["n_eval_prompts"])
    again = tool_rows(random.Random("tether/calc/0/sft_tools_train"), train, SIZES["n_sft"])
    assert again == rows(root, "sft_tools_train")
    assert split_facts(1, 20)[1] != held
    stamp = (root / "task.json").stat().st_mtime_ns
    assert build_task(root, seed=0, **SIZES) == meta and (root / "task.json").stat().st_mtime_ns == stamp


def test_the_base_model_fits_the_vocabulary_and_an_episode(built):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    root, meta = built
    model = AutoModelForCausalLM.from_pretrained(root / "base_model")
    tok = AutoTokenizer.from_pretrained(root / "base_model")
    assert model.config.vocab_size == len(tok) == 1024 and model.config.max_position_embeddings == 128
    assert sum(p.numel() for p in model.parameters()) == meta["n_params"]
