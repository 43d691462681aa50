"""A tiny SFT checkpoint and a reward model trained from it, built once for the integration tests."""

from __future__ import annotations

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
