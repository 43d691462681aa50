"""Model/tokenizer loading and the RLHF forward passes, on the tiny arithmetic task."""

from __future__ import annotations

import pytest
import torch
from transformers import (
    AutoModelForSequenceClassification,
    AutoTokenizer,
    LlamaConfig,
    LlamaForCausalLM,
    LlamaForSequenceClassification,
)
from transformers.utils import logging as hf_logging

from tether.data import collate_left, collate_right
from tether.common.errors import ModelError
from tether.models import load_causal_lm, load_scalar_model, load_tokenizer, score_head, score_offset
from tether.models.forward import last_token_scores, position_ids, response_logprobs, scalar_outputs

hf_logging.disable_progress_bar()

# Token ids of the arith tokenizer: <pad>=0 <unk>=1 <bos>=2 <eos>=3; 4.. are words.
PROMPTS = [[2, 5, 6, 7], [2, 8, 9, 10, 11, 12, 13], [2, 14]]
RESPONSES = [[20, 21, 3], [22, 23, 24, 25], [26, 3]]


@pytest.fixture(scope="module")
def paths(tiny_task):
    d = tiny_task["dir"]
    return {"tokenizer": str(d / "tokenizer"), "base": str(d / "base_model")}


@pytest.fixture(scope="module")
def tok(paths):
    return load_tokenizer(paths["tokenizer"])


@pytest.fixture(scope="module")
def lm(paths, tok):
    return load_causal_lm(paths["base"], tok)


@pytest.fixture(scope="module")
def scalar(paths, tok):
    torch.manual_seed(0)
    # A large head makes score differences well above float noise.
    return load_scalar_model(paths["base"], tok, head_init_std=1.0, new_head=True)


def batch_prompt_response():
    """Left-padded prompts + right-padded responses, as a rollout holds them."""
    pid, pm = collate_left(PROMPTS, 0)
    width = max(len(r) for r in RESPONSES)
    rid = torch.zeros(len(RESPONSES), width, dtype=torch.long)
    rm = torch.zeros_like(rid)
    for i, r in enumerate(RESPONSES):
        rid[i, : len(r)] = torch.tensor(r)
        rm[i, : len(r)] = 1
    return pid, pm, rid, rm


# -- tokenizers --------------------------------------------------------------------------
def test_tokenizer_keeps_distinct_pad_and_left_padding(tok):
    assert tok.eos_token_id is not None and tok.pad_token_id is not None
    assert tok.pad_token_id != tok.eos_token_id
    assert tok.pad_token == "<pad>" and tok.pad_token_id == 0  # the task's own pad is kept
    assert tok.padding_side == "left"
    assert load_tokenizer(tok.name_or_path, padding_side="right").padding_side == "right"


@pytest.mark.parametrize("pad", [None, "eos"])
def test_tokenizer_without_usable_pad_gets_a_new_one(paths, tmp_path, pad):
    raw = AutoTokenizer.from_pretrained(paths["tokenizer"])
    raw.pad_token = raw.eos_token if pad == "eos" else None
    raw.save_pretrained(tmp_path)
    reloaded = AutoTokenizer.from_pretrained(tmp_path)
    assert reloaded.pad_token_id in (None, reloaded.eos_token_id)  # the test's premise
    size = len(reloaded)

    tok = load_tokenizer(str(tmp_path))
    assert tok.pad_token_id is not None and tok.pad_token_id != tok.eos_token_id
    assert len(tok) == size + 1
    assert tok.convert_tokens_to_ids(tok.pad_token) == tok.pad_token_id
    assert tok.padding_side == "left"
    # A model loaded with it gets room for the new id and the pad id in its config.
    model = load_causal_lm(paths["base"], tok)
    assert model.get_input_embeddings().num_embeddings >= len(tok)
    assert model.config.pad_token_id == tok.pad_token_id
    assert model.generation_config.pad_token_id == tok.pad_token_id


def test_tokenizer_without_eos_is_a_model_error(paths, tmp_path):
    raw = AutoTokenizer.from_pretrained(paths["tokenizer"])
    raw.eos_token = None
    raw.save_pretrained(tmp_path)
    # Precondition (pinned transformers): the saved tokenizer really has no EOS.
    assert AutoTokenizer.from_pretrained(tmp_path).eos_token_id is None
    with pytest.raises(ModelError, match="EOS"):
        load_tokenizer(str(tmp_path))


# -- loading errors -----------------------------------------------------------------------
@pytest.mark.parametrize("loader", [load_tokenizer, load_causal_lm, load_scalar_model])
def test_missing_local_path_names_the_path(tmp_path, loader):
    missing = tmp_path / "no" / "such" / "model"
    with pytest.raises(ModelError) as info:
        loader(str(missing))
    assert str(missing) in str(info.value)
    assert "does not exist" in str(info.value)


def test_directory_without_checkpoint_is_a_model_error(tmp_path):
    with pytest.raises(ModelError) as info:
        load_causal_lm(str(tmp_path))
    assert str(tmp_path) in str(info.value)


# -- dropout ------------------------------------------------------------------------------
def _tiny_llama_with_dropout(path):
    config = LlamaConfig(
        vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=32,
        attention_dropout=0.3,
    )
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(path)


def _dropout_values(model):
    values = []
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            values.append(module.p)
        for name in ("attention_dropout", "dropout"):
            if isinstance(getattr(module, name, None), float):
                values.append(getattr(module, name))
    return values


def test_load_causal_lm_disables_dropout(tmp_path):
    _tiny_llama_with_dropout(tmp_path)
    x = torch.randint(0, 32, (2, 12))

    kept = load_causal_lm(str(tmp_path), keep_dropout=True)
    assert kept.config.attention_dropout == 0.3  # the premise: dropout is really there
    kept.train()
    assert not torch.equal(kept(x).logits, kept(x).logits)

    model = load_causal_lm(str(tmp_path))
    assert model.config.attention_dropout == 0.0
    values = _dropout_values(model)
    assert values and all(v == 0.0 for v in values)
    model.train()  # training mode must still be deterministic
    assert torch.equal(model(x).logits, model(x).logits)


def test_load_scalar_model_disables_dropout(tmp_path):
    _tiny_llama_with_dropout(tmp_path)
    model = load_scalar_model(str(tmp_path), new_head=True)
    assert all(v == 0.0 for v in _dropout_values(model))
    model.train()
    x = torch.randint(0, 32, (1, 12))  # batch of one: this config has no pad id
    assert torch.equal(model(x).logits, model(x).logits)


# -- scalar models ------------------------------------------------------------------------
def test_scalar_model_from_causal_checkpoint_has_one_output(paths, tok, lm):
    model = load_scalar_model(paths["base"], tok, new_head=True)
    assert isinstance(model, LlamaForSequenceClassification)
    assert model.config.num_labels == 1
    assert score_head(model).weight.shape == (1, model.config.hidden_size)
    assert score_offset(model) == 0.0
    # The backbone is the causal LM's.
    torch.testing.assert_close(model.model.embed_tokens.weight, lm.model.embed_tokens.weight)


def test_head_init_std_reinitialises_the_head(paths, tok):
    torch.manual_seed(0)
    small = load_scalar_model(paths["base"], tok, head_init_std=1e-3, new_head=True)
    big = load_scalar_model(paths["base"], tok, head_init_std=10.0, new_head=True)
    assert score_head(small).weight.std() < 0.01 < 1.0 < score_head(big).weight.std()


def test_two_label_classifier_is_refused(tmp_path):
    config = LlamaConfig(
        vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=2, num_labels=2, pad_token_id=0,
    )
    LlamaForSequenceClassification(config).save_pretrained(tmp_path)
    with pytest.raises(ModelError, match="outputs") as info:
        load_scalar_model(str(tmp_path))
    assert "2" in str(info.value) and str(tmp_path) in str(info.value)


# -- forward passes -----------------------------------------------------------------------
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_response_logprobs_match_full_forward_left_padded(lm, temperature):
    pid, pm, rid, rm = batch_prompt_response()
    seq, att = torch.cat([pid, rid], 1), torch.cat([pm, rm], 1)
    P = pid.shape[1]
    with torch.no_grad():
        logp, ent = response_logprobs(lm, seq, att, P, temperature, with_entropy=True)
        full = lm(input_ids=seq, attention_mask=att, position_ids=position_ids(att)).logits.float()
    assert logp.shape == rid.shape and ent.shape == rid.shape
    dist = torch.log_softmax(full / temperature, dim=-1)[:, P - 1 : -1]
    expected = dist.gather(-1, rid[..., None])[..., 0]
    torch.testing.assert_close(logp * rm, expected * rm, atol=1e-5, rtol=0)
    expected_ent = -(dist.exp() * dist).sum(-1)
    torch.testing.assert_close(ent * rm, expected_ent * rm, atol=1e-5, rtol=0)
    # Left padding changes nothing: each row equals its unpadded forward.
    for i, (p, r) in enumerate(zip(PROMPTS, RESPONSES)):
        with torch.no_grad():
            alone = lm(torch.tensor([p + r])).logits[0].float() / temperature
        row = torch.log_softmax(alone, -1)[len(p) - 1 : -1].gather(-1, torch.tensor(r)[:, None])[:, 0]
        torch.testing.assert_close(logp[i, : len(r)], row, atol=1e-5, rtol=0)


def test_temperature_changes_logprobs(lm):
    pid, pm, rid, rm = batch_prompt_response()
    seq, att = torch.cat([pid, rid], 1), torch.cat([pm, rm], 1)
    with torch.no_grad():
        a, _ = response_logprobs(lm, seq, att, pid.shape[1], 1.0)
        b, _ = response_logprobs(lm, seq, att, pid.shape[1], 0.5)
    assert (a - b).abs().max() > 1e-4


def test_position_ids_ignore_left_padding():
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 0], [0, 1, 1, 0, 0]])
    assert position_ids(mask).tolist() == [[0, 0, 0, 1, 2], [0, 1, 2, 3, 3], [0, 0, 1, 1, 1]]


def _seqs():
    return [p + r for p, r in zip(PROMPTS, RESPONSES)]


def test_last_token_scores_agree_for_right_and_left_padding(scalar):
    seqs = _seqs()
    right = collate_right(seqs, 0)
    left_ids, left_mask = collate_left(seqs, 0)
    with torch.no_grad():
        a = last_token_scores(scalar, right["input_ids"], right["attention_mask"])
        b = last_token_scores(scalar, left_ids, left_mask)
        alone = torch.stack([last_token_scores(scalar, torch.tensor([s]), torch.ones(1, len(s), dtype=torch.long))[0]
                             for s in seqs])
    assert a.shape == (len(seqs),)
    torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
    torch.testing.assert_close(a, alone, atol=1e-5, rtol=0)
    assert (a.max() - a.min()) > 1e-3  # different sequences, different scores


def test_scalar_outputs_last_real_position_is_last_token_score(scalar):
    batch = collate_right(_seqs(), 0)
    with torch.no_grad():
        every = scalar_outputs(scalar, batch["input_ids"], batch["attention_mask"])
        last = last_token_scores(scalar, batch["input_ids"], batch["attention_mask"])
    lengths = batch["attention_mask"].sum(1) - 1
    torch.testing.assert_close(every[torch.arange(3), lengths], last)


def test_saved_reward_model_scores_same_with_plain_transformers(scalar, tok, tmp_path):
    """A saved reward model loaded with plain transformers gives the same scores."""
    scalar.config.score_offset = 0.25
    scalar.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    plain = AutoModelForSequenceClassification.from_pretrained(tmp_path)
    plain.eval()
    assert plain.config.num_labels == 1
    assert score_offset(plain) == 0.25

    batch = collate_right(_seqs(), tok.pad_token_id)
    with torch.no_grad():
        hf_scores = plain(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits[:, 0]
        ours = last_token_scores(scalar, batch["input_ids"], batch["attention_mask"])
        reloaded = last_token_scores(load_scalar_model(str(tmp_path), tok), batch["input_ids"], batch["attention_mask"])
    torch.testing.assert_close(hf_scores, ours, atol=1e-5, rtol=0)
    torch.testing.assert_close(reloaded, ours, atol=1e-5, rtol=0)
