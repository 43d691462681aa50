"""Tokenization to max_length (truncate/drop/error), response-only masks, and collation."""

from __future__ import annotations

import pytest
import torch

from tether.data import (
    PreferenceExample,
    SFTExample,
    TokenizedPreference,
    collate_left,
    collate_right,
    tokenize_preference,
    tokenize_sft,
)
from tether.common.errors import DataError


def ids(tok, text):
    return tok.convert_tokens_to_ids(text.split())


def sft(prompt="hi there", completion="a b c d"):
    return SFTExample(prompt, completion, "train.jsonl", 7)


def test_sft_mask_is_response_only(tok):
    out = tokenize_sft(sft(), tok, max_length=64)
    prompt = ids(tok, "<bos> user : hi there assistant :")
    assert out.input_ids == prompt + ids(tok, "a b c d <eos>")
    assert out.loss_mask == [0] * len(prompt) + [1] * 5
    plain = tokenize_sft(sft(), tok, max_length=64, mode="never")
    assert plain.input_ids == ids(tok, "<bos> hi there a b c d <eos>")
    assert plain.loss_mask == [0, 0, 0, 1, 1, 1, 1, 1]


def test_sft_truncate_keeps_prompt_and_cuts_response(tok):
    out = tokenize_sft(sft(), tok, max_length=5, mode="never")  # prompt is 3 tokens
    assert out.input_ids == ids(tok, "<bos> hi there a b") and out.loss_mask == [0, 0, 0, 1, 1]
    assert tokenize_sft(sft(), tok, max_length=3, mode="never") is None  # prompt alone fills it
    exact = tokenize_sft(sft(), tok, max_length=8, mode="never")
    assert len(exact.input_ids) == 8 and exact.input_ids[-1] == tok.eos_token_id


def test_sft_drop_and_error(tok):
    assert tokenize_sft(sft(), tok, max_length=5, mode="never", on_long="drop") is None
    with pytest.raises(DataError, match=r"train\.jsonl, row 7: .*8 tokens .*max_length 5"):
        tokenize_sft(sft(), tok, max_length=5, mode="never", on_long="error")
    with pytest.raises(ValueError):
        tokenize_sft(sft(), tok, max_length=5, on_long="squeeze")


def test_tokenizer_errors_name_the_row(tok_plain):
    ex = SFTExample([{"role": "user", "content": "hi"}], "a", "chat.jsonl", 4)
    with pytest.raises(Exception, match=r"chat\.jsonl, row 4: .*no chat template") as e:
        tokenize_sft(ex, tok_plain, max_length=16)
    assert type(e.value).__name__ == "ModelError"


def test_preference_tokenize_and_length_policies(tok):
    ex = PreferenceExample("hi", "a b c", "d", "prefs.jsonl", 2)
    out = tokenize_preference(ex, tok, max_length=64, mode="never")
    assert out == TokenizedPreference(ids(tok, "<bos> hi"), ids(tok, "a b c <eos>"), ids(tok, "d <eos>"))
    # prompt 2 + longer response 4 = 6
    assert tokenize_preference(ex, tok, max_length=6, mode="never") is not None
    assert tokenize_preference(ex, tok, max_length=5, mode="never") is None  # default on_long="drop"
    with pytest.raises(DataError, match=r"prefs\.jsonl, row 2: .*6 tokens"):
        tokenize_preference(ex, tok, max_length=5, mode="never", on_long="error")
    cut = tokenize_preference(ex, tok, max_length=4, mode="never", on_long="truncate")
    assert cut.chosen_ids == ids(tok, "a b") and cut.rejected_ids == ids(tok, "d <eos>")
    same_start = PreferenceExample("hi", "a b c", "a b d", "prefs.jsonl", 3)
    assert tokenize_preference(same_start, tok, max_length=4, mode="never", on_long="truncate") is None


def test_collate_right_pads_on_the_right():
    batch = collate_right([[5, 6, 7], [8]], pad_id=0, masks=[[0, 1, 1], [1]])
    assert batch["input_ids"].dtype == torch.long and batch["input_ids"].shape == (2, 3)
    assert batch["input_ids"].tolist() == [[5, 6, 7], [8, 0, 0]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 0, 0]]
    assert batch["loss_mask"].tolist() == [[0, 1, 1], [1, 0, 0]]
    assert set(collate_right([[1]], pad_id=9)) == {"input_ids", "attention_mask"}
    with pytest.raises(ValueError):
        collate_right([[1, 2]], pad_id=0, masks=[[1]])
    with pytest.raises(ValueError):
        collate_right([], pad_id=0)


def test_collate_left_pads_on_the_left():
    ids_, attn = collate_left([[5, 6, 7], [8]], pad_id=2)
    assert ids_.dtype == torch.long and attn.dtype == torch.long and ids_.shape == attn.shape == (2, 3)
    assert ids_.tolist() == [[5, 6, 7], [2, 2, 8]]
    assert attn.tolist() == [[1, 1, 1], [0, 0, 1]]
