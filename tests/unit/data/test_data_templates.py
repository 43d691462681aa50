"""Chat-template handling: prompt/response encoding, BOS/EOS placement, errors."""

from __future__ import annotations

import pytest

from tether.data import encode_prompt, encode_response, prompt_text, use_chat_template
from tether.common.errors import ConfigError, ModelError


def ids(tok, text):
    return tok.convert_tokens_to_ids(text.split())


def test_use_chat_template_modes(tok, tok_plain):
    assert use_chat_template(tok, "auto") and not use_chat_template(tok_plain, "auto")
    assert use_chat_template(tok, "always")
    assert not use_chat_template(tok, "never") and not use_chat_template(tok_plain, "never")
    with pytest.raises(ModelError, match="tokenizer tiny-test-tokenizer has no chat template"):
        use_chat_template(tok_plain, "always")
    with pytest.raises(ConfigError, match="sometimes"):
        use_chat_template(tok, "sometimes")


def test_encode_messages_uses_template_with_generation_prompt_and_single_bos(tok):
    out = encode_prompt([{"role": "system", "content": "a"}, {"role": "user", "content": "hi there"}], tok)
    assert out == ids(tok, "<bos> system : a user : hi there assistant :")
    assert all(isinstance(t, int) for t in out)


def test_encode_string_prompt_by_mode(tok, tok_plain):
    templated = ids(tok, "<bos> user : hi there assistant :")
    plain = ids(tok, "<bos> hi there")
    assert encode_prompt("hi there", tok) == templated
    assert encode_prompt("hi there", tok, "always") == templated
    assert encode_prompt("hi there", tok, "never") == plain
    assert encode_prompt("hi there", tok_plain) == plain
    with pytest.raises(ModelError, match="no chat template"):
        encode_prompt("hi there", tok_plain, "always")


def test_messages_need_a_template(tok, tok_plain):
    with pytest.raises(ModelError, match="tokenizer tiny-test-tokenizer has no chat template.*chat messages"):
        encode_prompt([{"role": "user", "content": "hi"}], tok_plain)
    with pytest.raises(ConfigError, match="'never'"):
        encode_prompt([{"role": "user", "content": "hi"}], tok, "never")


def test_template_that_raises_becomes_model_error(make_tokenizer):
    strict = make_tokenizer(chat_template="{{ raise_exception('roles must alternate') }}")
    with pytest.raises(ModelError, match="roles must alternate"):
        encode_prompt([{"role": "user", "content": "hi"}], strict)


def test_batch_encoding_and_nested_outputs_are_normalised(tok, monkeypatch):
    from transformers import BatchEncoding

    expected = encode_prompt("hi", tok)
    for fake in (BatchEncoding({"input_ids": expected, "attention_mask": [1] * len(expected)}),
                 {"input_ids": [expected]}, [expected]):
        monkeypatch.setattr(type(tok), "apply_chat_template", lambda self, *a, _f=fake, **k: _f)
        assert encode_prompt("hi", tok) == expected


def test_encode_response_appends_eos_without_bos(tok, make_tokenizer):
    assert encode_response("fine thanks", tok) == ids(tok, "fine <unk> <eos>")
    with pytest.raises(ModelError, match="no EOS token"):
        encode_response("fine", make_tokenizer(eos=False))


def test_prompt_text():
    assert prompt_text("just text") == "just text"
    msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": "first"},
            {"role": "assistant", "content": "x"}, {"role": "user", "content": "last"}]
    assert prompt_text(msgs) == "last"
    assert prompt_text([{"role": "system", "content": "only"}]) == "only"
