"""model.attn_implementation that cannot run, through the real CLI: one paragraph naming the
key, exit code 2, no run directory left behind, in a run and in its dry run alike
(docs/reliability.md)."""

from __future__ import annotations

import pytest

import tether.models.attn_implementation as attention
from bad_input_helpers import assert_clean_error, cli, good_prompts, good_sft, ppo_args, sft_args, write_jsonl

FLASH = "model.attn_implementation=flash_attention_2"


@pytest.fixture
def no_flash_attn(monkeypatch):
    """The flash_attn package absent (it is on no CPU machine; on a GPU machine it may be)."""
    monkeypatch.setattr(attention, "package_installed", lambda package: package != "flash_attn")


@pytest.mark.parametrize("dry_run", [False, True])
def test_sft_flash_attention_without_the_package(task, tmp_path, capsys, no_flash_attn, dry_run):
    train = write_jsonl(tmp_path / "train.jsonl", good_sft())
    out = tmp_path / "run"
    argv = [*sft_args(task, out, train, FLASH), *(["--dry-run"] if dry_run else [])]
    code, err = cli(capsys, argv)
    assert_clean_error(code, err, "sft", "'model.attn_implementation' = 'flash_attention_2'", "flash_attn package",
                       "sdpa")
    assert not out.exists()


def test_ppo_flash_attention_without_the_package(task, tmp_path, capsys, no_flash_attn):
    prompts = write_jsonl(tmp_path / "prompts.jsonl", good_prompts())
    out = tmp_path / "run"
    code, err = cli(capsys, ppo_args(task, out, prompts, FLASH))
    assert_clean_error(code, err, "ppo", "'model.attn_implementation' = 'flash_attention_2'", "flash_attn package")
    assert not out.exists()


def test_sft_flash_attention_on_a_cpu_run(task, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(attention, "package_installed", lambda package: True)  # as if installed
    train = write_jsonl(tmp_path / "train.jsonl", good_sft())
    out = tmp_path / "run"
    code, err = cli(capsys, sft_args(task, out, train, FLASH, "run.device=cpu"))
    assert_clean_error(code, err, "sft", "'model.attn_implementation' = 'flash_attention_2'", "CUDA GPUs only")
    assert not out.exists()
