"""Word-level tokenizer of the arith task."""

from __future__ import annotations

import random

import pytest
from transformers import AutoTokenizer

from tether.tasks.arith import world
from tether.tasks.arith.tokenizer import build_tokenizer

USER = [{"role": "user", "content": "what is 3 + 4 ?"}]
PROMPT_WORDS = "<bos> user : what is 3 + 4 ? assistant :".split()


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer()


def test_special_tokens(tok) -> None:
    assert (tok.pad_token, tok.unk_token, tok.bos_token, tok.eos_token) == ("<pad>", "<unk>", "<bos>", "<eos>")
    assert tok.pad_token_id == 0
    assert len({tok.pad_token_id, tok.unk_token_id, tok.bos_token_id, tok.eos_token_id}) == 4
    assert tok.pad_token_id != tok.eos_token_id
    assert tok.padding_side == "left"
    assert tok.model_max_length == 64


def test_vocabulary_covers_the_world(tok) -> None:
    assert len(tok) == len(world.VOCAB_WORDS) + 4
    assert 100 <= len(tok) <= 140
    vocab = tok.get_vocab()
    for n in range(-9, 82):
        assert str(n) in vocab
    for w in world.VOCAB_WORDS:
        assert vocab[w] > 3


def test_round_trip(tok) -> None:
    rng = random.Random(0)
    texts = list(world.PROMPTS)
    for _ in range(500):
        p = rng.choice(world.PROMPTS)
        texts += [world.sample_demonstration(rng, p), world.sample_weak_response(rng, p)]
    for text in texts:
        ids = tok(text)["input_ids"]
        assert ids[0] == tok.bos_token_id and tok.bos_token_id not in ids[1:]
        assert tok.unk_token_id not in ids
        assert len(ids) == len(text.split()) + 1  # one id per word
        assert tok.decode(ids, skip_special_tokens=True) == text
        assert tok.decode(ids) == "<bos> " + text
        assert tok.decode(tok(text, add_special_tokens=False)["input_ids"]) == text


def test_unknown_words_map_to_unk(tok) -> None:
    ids = tok("what is 100 + banana ?", add_special_tokens=False)["input_ids"]
    assert ids[2] == ids[4] == tok.unk_token_id
    assert ids[0] != tok.unk_token_id


def _ids(out):
    """apply_chat_template(tokenize=True) returns a BatchEncoding in transformers 5 (a list in 4)."""
    return out["input_ids"] if hasattr(out, "keys") else out


def test_chat_template_text(tok) -> None:
    text = tok.apply_chat_template(USER, add_generation_prompt=True, tokenize=False)
    assert text == "<bos>user : what is 3 + 4 ? assistant :"
    full = USER + [{"role": "assistant", "content": "sure . 7 ."}]
    assert tok.apply_chat_template(full, tokenize=False) == "<bos>user : what is 3 + 4 ? assistant : sure . 7 . "


def test_chat_template_ids_single_bos(tok) -> None:
    out = tok.apply_chat_template(USER, add_generation_prompt=True, tokenize=True)
    ids = _ids(out)
    assert tok.convert_ids_to_tokens(ids) == PROMPT_WORDS
    assert ids.count(tok.bos_token_id) == 1
    # tokenizing the rendered text without special tokens gives the same ids
    text = tok.apply_chat_template(USER, add_generation_prompt=True, tokenize=False)
    assert tok(text, add_special_tokens=False)["input_ids"] == ids
    # prompt ids + response ids (no special tokens) == ids of the whole conversation
    full = USER + [{"role": "assistant", "content": "sure . 7 ."}]
    full_ids = _ids(tok.apply_chat_template(full, tokenize=True))
    assert full_ids == ids + tok("sure . 7 .", add_special_tokens=False)["input_ids"]


def test_left_padding(tok) -> None:
    batch = tok(["what is 3 + 4 ?", "7 ."], padding=True)
    assert batch["input_ids"][1][:4] == [tok.pad_token_id] * 4
    assert batch["attention_mask"][1] == [0, 0, 0, 0, 1, 1, 1]


def test_save_load(tok, tmp_path) -> None:
    tok.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    text = "sure ! 3 times 4 is 12 . anything else ?"
    assert loaded(text)["input_ids"] == tok(text)["input_ids"]
    assert loaded.decode(loaded(text)["input_ids"], skip_special_tokens=True) == text
    assert _ids(loaded.apply_chat_template(USER, add_generation_prompt=True)) == _ids(
        tok.apply_chat_template(USER, add_generation_prompt=True)
    )
    assert loaded.padding_side == "left" and loaded.model_max_length == 64
    assert (loaded.pad_token_id, loaded.bos_token_id, loaded.eos_token_id) == (0, 2, 3)
