"""Every model an RL run reads the policy's token ids with is checked against the policy's
tokenizer before any weight is read (roles/sources.py check_token_id_readers): the reference, each
reward model and, now, critic.path; and no model is resized to a tokenizer whose own ids exceed its
embedding (models/loading.py check_vocab_fits), in the run and in its dry run alike."""

from __future__ import annotations

import pytest
from tokenizers import Tokenizer, models
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from tether.config import RLConfig, load_config
from tether.common.errors import ConfigError, ModelError
from tether.models import load_causal_lm, load_scalar_model, load_tokenizer
from tether.roles.sources import check_token_id_readers, token_id_readers


def tokenizer(words: int, prefix: str = "w") -> PreTrainedTokenizerFast:
    """A word-level tokenizer of ``words`` tokens (EOS and pad among them)."""
    vocab = {"<eos>": 0, "<pad>": 1, **{f"{prefix}{i}": i + 2 for i in range(words - 2)}}
    return PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="<eos>")),
                                   eos_token="<eos>", pad_token="<pad>")


def llama(path, vocab: int, tok=None, weights: bool = True):
    """A tiny Llama of ``vocab`` embedding rows at ``path`` (its config only without ``weights``),
    with ``tok`` saved beside it."""
    config = LlamaConfig(vocab_size=vocab, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=32)
    if weights:
        LlamaForCausalLM(config).save_pretrained(path)
    else:
        path.mkdir(parents=True)
        config.save_pretrained(path)
    if tok is not None:
        tok.save_pretrained(path)
    return str(path)


def ppo(*overrides):
    return load_config(RLConfig, None, ["prompts=p", *overrides])


def test_every_separate_model_of_a_run_is_listed():
    cfg = ppo("model.name_or_path=pol", "reference=ref", "reward.models=[r1,r2]", "critic.path=crit")
    assert token_id_readers(cfg) == [("ref", "reference"), ("r1", "reward.models"), ("r2", "reward.models"),
                                     ("crit", "critic.path")]
    # No separate model: the policy as its own reference, and no critic under a critic-free algorithm.
    assert token_id_readers(ppo("model.name_or_path=pol", "reference=pol", "reward.models=[r1]", "algorithm=grpo")) \
        == [("r1", "reward.models")]


def test_a_critic_path_of_another_tokenizer_is_refused_before_any_weight(tmp_path, no_weights_read):
    policy = llama(tmp_path / "policy", 40, tokenizer(40))
    critic = llama(tmp_path / "critic", 60, tokenizer(60, prefix="x"))
    cfg = ppo(f"model.name_or_path={policy}", "reward.callable=m:f", "critic.init=policy", f"critic.path={critic}")
    with pytest.raises(ModelError) as err:
        check_token_id_readers(cfg, load_tokenizer(policy))
    text = str(err.value)
    assert "\n" not in text and f"critic '{critic}' (critic.path)" in text and "different tokenizer" in text
    assert "60 tokens against the policy's 40" in text


def test_a_critic_path_without_tokenizer_files_is_compared_by_its_rows(tmp_path, no_weights_read):
    policy = llama(tmp_path / "policy", 40, tokenizer(40))
    wide = llama(tmp_path / "wide", 151, weights=False)
    cfg = ppo(f"model.name_or_path={policy}", "reward.callable=m:f", f"critic.path={wide}")
    with pytest.raises(ModelError) as err:
        check_token_id_readers(cfg, load_tokenizer(policy))
    assert "no tokenizer files" in str(err.value) and "151 rows against the policy's 40" in str(err.value)
    same = llama(tmp_path / "same", 40, weights=False)
    check_token_id_readers(ppo(f"model.name_or_path={policy}", "reward.callable=m:f", f"critic.path={same}"),
                           load_tokenizer(policy))


def test_a_reward_model_of_a_term_is_checked_as_well(tmp_path):
    policy = llama(tmp_path / "policy", 40, tokenizer(40))
    other = llama(tmp_path / "rm", 40, tokenizer(40, prefix="y"))  # the same size, other words
    cfg = ppo(f"model.name_or_path={policy}", "critic.init=policy",
              f"reward.terms=[{{name: judge, models: [{other}]}}]")
    with pytest.raises(ModelError, match=r"reward model .* \(reward.terms\[0\].models\) uses a different tokenizer"):
        check_token_id_readers(cfg, load_tokenizer(policy))


@pytest.mark.parametrize("loader", [load_causal_lm, load_scalar_model])
def test_a_tokenizer_with_more_ids_than_the_models_rows_is_refused_not_resized(tmp_path, loader, no_weights_read):
    """model.tokenizer of another model: ids 0..59 into a 40-row embedding would be resized silently."""
    model = llama(tmp_path / "m", 40)
    (tmp_path / "tok").mkdir()
    tokenizer(60).save_pretrained(tmp_path / "tok")
    kwargs = {"new_head": True} if loader is load_scalar_model else {}
    with pytest.raises(ConfigError) as err:
        loader(model, load_tokenizer(str(tmp_path / "tok")), key="model.name_or_path", **kwargs)
    text = str(err.value)
    assert "\n" not in text and "ids up to 59" in text and "40 rows" in text and "(model.name_or_path)" in text
    assert "does not resize" in text and "model.tokenizer" in text


def test_tethers_own_pad_is_the_one_row_a_model_may_gain(tmp_path):
    """A tokenizer without a pad gets tether's (one new id); the model gets that row, nothing else."""
    raw = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel(
        {"<eos>": 0, **{f"w{i}": i + 1 for i in range(39)}}, unk_token="<eos>")), eos_token="<eos>")
    (tmp_path / "tok").mkdir()
    raw.save_pretrained(tmp_path / "tok")
    tok = load_tokenizer(str(tmp_path / "tok"))
    assert len(tok) == 41  # 40 words + tether's pad
    model = load_causal_lm(llama(tmp_path / "m", 40), tok)
    assert model.get_input_embeddings().num_embeddings == 41
