"""The real architectures' shapes (tether.bench.shapes): counted on the meta device against the
published sizes, and the tokenizer built to a model's exact vocabulary size."""

from __future__ import annotations

import pytest

from tether.bench.shapes import PUBLISHED_PARAMS, SHAPES, count_params, model_config, sized_tokenizer


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_shape_has_the_published_parameter_count(name):
    params = count_params(model_config(name))
    assert abs(params / PUBLISHED_PARAMS[name] - 1) < 0.03, (name, params)


def test_shapes_keep_the_public_configs_details():
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        qwen = AutoModelForCausalLM.from_config(model_config("qwen2.5-0.5b"))
        llama = AutoModelForCausalLM.from_config(model_config("llama-3.2-1b"))
    attention = qwen.model.layers[0].self_attn
    assert attention.q_proj.bias is not None and attention.o_proj.bias is None  # Qwen2: q, k, v biased
    assert qwen.lm_head.weight is qwen.model.embed_tokens.weight  # tied
    assert llama.config.rope_parameters["rope_type"] == "llama3"
    assert llama.config.max_position_embeddings == 131072 and llama.config.vocab_size == 128256


@pytest.mark.parametrize("vocab_size", [1000, 151936])
def test_sized_tokenizer_has_exactly_the_vocabulary_and_round_trips(vocab_size):
    tok = sized_tokenizer(vocab_size)
    assert len(tok) == vocab_size and len(tok.get_vocab()) == vocab_size
    assert max(tok.get_vocab().values()) == vocab_size - 1
    assert tok.eos_token_id is not None and tok.pad_token_id not in (None, tok.eos_token_id)
    text = "Hello, world! naïve café 123\n\ttabs and  spaces — 東京"
    ids = tok(text)["input_ids"]
    assert tok.decode(ids) == text
    assert all(0 <= i < vocab_size for i in ids)
    chat = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert chat == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert tok.padding_side == "left"


def test_sized_tokenizer_below_the_byte_alphabet_is_refused():
    with pytest.raises(ValueError, match="below"):
        sized_tokenizer(100)
