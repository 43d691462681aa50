"""Models read with another model's token ids, through the real CLI: a critic.path of another
tokenizer, and a model.tokenizer whose ids exceed the model's embedding, are one paragraph, exit
code 2, before any weight is read, in a run and in its dry run alike (docs/reliability.md)."""

from __future__ import annotations

import pytest

from bad_input_helpers import assert_clean_error, cli, good_prompts, good_sft, ppo_args, sft_args, write_jsonl


@pytest.mark.parametrize("dry_run", [False, True])
def test_ppo_critic_path_of_another_tokenizer(task, foreign, tmp_path, capsys, no_weights_read, dry_run):
    """A critic of a 300-token BPE vocabulary beside a policy of the task's 133 word tokens: it would
    score other text than the policy wrote."""
    prompts = write_jsonl(tmp_path / "prompts.jsonl", good_prompts())
    out = tmp_path / "run"
    argv = [*ppo_args(task, out, prompts, f"critic.path={foreign['gpt2']}"), *(["--dry-run"] if dry_run else [])]
    code, err = cli(capsys, argv)
    assert_clean_error(code, err, "ppo", f"critic '{foreign['gpt2']}' (critic.path)", "different tokenizer")
    assert not out.exists()


@pytest.mark.parametrize("dry_run", [False, True])
def test_sft_model_tokenizer_larger_than_the_models_embedding(task, foreign, tmp_path, capsys, no_weights_read,
                                                              dry_run):
    """model.tokenizer of another model (300 ids) on the task's 133-row model: refused, where the
    loader used to resize the embedding to it without a word."""
    train = write_jsonl(tmp_path / "train.jsonl", good_sft())
    out = tmp_path / "run"
    argv = [*sft_args(task, out, train, f"model.tokenizer={foreign['gpt2']}"), *(["--dry-run"] if dry_run else [])]
    code, err = cli(capsys, argv)
    assert_clean_error(code, err, "sft", f"'{foreign['gpt2']}'", "133 rows", "does not resize", "model.tokenizer")
    assert not out.exists()


def test_ppo_model_tokenizer_larger_than_the_models_embedding(task, foreign, tmp_path, capsys, no_weights_read):
    prompts = write_jsonl(tmp_path / "prompts.jsonl", good_prompts())
    out = tmp_path / "run"
    code, err = cli(capsys, [*ppo_args(task, out, prompts, f"model.tokenizer={foreign['gpt2']}",
                                       "reward.callable=tether.tasks.arith.judge:gold_reward"), "--dry-run"])
    assert_clean_error(code, err, "ppo", "(model.name_or_path)", "133 rows", "does not resize")
