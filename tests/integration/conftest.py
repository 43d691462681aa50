"""A tiny SFT checkpoint and a reward model trained from it, built once for the integration tests."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from transformers.utils import logging as hf_logging

hf_logging.disable_progress_bar()

from stage_helpers import rm_overrides, sft_overrides  # noqa: E402


@pytest.fixture(scope="session")
def trained(tiny_task, tmp_path_factory):
    """Run SFT then the reward model once: {'task', 'sft', 'rm' (paths), 'sft_result', 'rm_result'}."""
    from tether.config import RewardModelConfig, SFTConfig, load_config
    from tether.loops.reward_model import run_reward_model
    from tether.loops.sft import run_sft

    task = tiny_task["dir"]
    root = tmp_path_factory.mktemp("runs")
    sft_cfg = load_config(SFTConfig, None, sft_overrides(task, root / "sft"))
    sft = run_sft(sft_cfg)
    rm_cfg = load_config(RewardModelConfig, None, rm_overrides(task, root / "sft", root / "rm"))
    rm = run_reward_model(rm_cfg)
    return {"task": task, "root": root, "sft": root / "sft", "rm": root / "rm",
            "sft_cfg": sft_cfg, "rm_cfg": rm_cfg, "sft_result": sft, "rm_result": rm}


# -- fixtures of the bad-input tests (test_bad_input_*.py) -------------------------------


@pytest.fixture(scope="session")
def task(tiny_task) -> Path:
    """The tiny demo task directory (bad-input tests)."""
    return tiny_task["dir"]


@pytest.fixture(scope="session")
def no_template_model(task, tmp_path_factory) -> Path:
    """The base model with its chat template removed."""
    path = tmp_path_factory.mktemp("no-template") / "model"
    shutil.copytree(task / "base_model", path)
    (path / "chat_template.jinja").unlink(missing_ok=True)
    cfg_path = path / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg.pop("chat_template", None)
    cfg_path.write_text(json.dumps(cfg))
    return path


@pytest.fixture(scope="session")
def two_output_rm(task, tmp_path_factory) -> Path:
    """A sequence-classification checkpoint whose head has two outputs."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    path = tmp_path_factory.mktemp("rm2") / "rm"
    model = AutoModelForSequenceClassification.from_pretrained(task / "base_model", num_labels=2)
    model.save_pretrained(path)
    AutoTokenizer.from_pretrained(task / "base_model").save_pretrained(path)
    return path

