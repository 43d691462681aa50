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


FLEX = "model.attn_implementation=flex_attention"


@pytest.fixture
def no_flex_backward_on_cpu():
    if attention.flex_backward_missing("cpu") is None:
        pytest.skip("this torch has a FlexAttention backward on a CPU")


@pytest.mark.parametrize("dry_run", [False, True])
def test_sft_flex_attention_on_a_cpu_is_refused_before_any_weight(task, tmp_path, capsys, no_flex_backward_on_cpu,
                                                                  monkeypatch, dry_run):
    """The model class declares flex_attention and its forward runs on a CPU; its backward does not,
    so the run (and its dry run) stops before reading the model rather than at the first update."""
    import transformers

    def no_load(*args, **kwargs):
        raise AssertionError("from_pretrained was called")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", no_load)
    train = write_jsonl(tmp_path / "train.jsonl", good_sft())
    out = tmp_path / "run"
    argv = [*sft_args(task, out, train, FLEX, "run.device=cpu"), *(["--dry-run"] if dry_run else [])]
    code, err = cli(capsys, argv)
    assert_clean_error(code, err, "sft", "'model.attn_implementation' = 'flex_attention'",
                       "no FlexAttention backward on a CPU", "run.device=cuda", "sdpa")
    assert not out.exists()


@pytest.mark.parametrize("dry_run", [False, True])
def test_ppo_flex_attention_with_device_auto_on_a_machine_without_cuda(task, tmp_path, capsys, no_flex_backward_on_cpu,
                                                                       monkeypatch, dry_run):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # auto resolves to the CPU
    prompts = write_jsonl(tmp_path / "prompts.jsonl", good_prompts())
    out = tmp_path / "run"
    argv = [*ppo_args(task, out, prompts, FLEX, "run.device=auto"), *(["--dry-run"] if dry_run else [])]
    code, err = cli(capsys, argv)
    assert_clean_error(code, err, "ppo", "'model.attn_implementation' = 'flex_attention'", "stage on cpu",
                       "no FlexAttention backward")
    assert not out.exists()
