"""Fixtures for the dataset-layer tests: a tiny word-level tokenizer and a file writer."""

from __future__ import annotations

import json

import pytest

CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}{{ m['role'] }} : {{ m['content'] }} {% endfor %}"
    "{% if add_generation_prompt %}assistant :{% endif %}"
)
SPECIALS = ["<pad>", "<unk>", "<bos>", "<eos>"]
WORDS = [
    "user", "assistant", "system", ":", "hi", "hello", "there", "world", "how", "are", "you", "fine", "bad",
    "good", "a", "b", "c", "d", "e", "f", "g", "one", "two", "three", "four", "five", "six", "seven", "eight",
]


def build_tokenizer(chat_template: str | None = CHAT_TEMPLATE, eos: bool = True):
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {w: i for i, w in enumerate(SPECIALS + WORDS)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.post_processor = processors.TemplateProcessing(
        single="<bos> $A", pair="<bos> $A $B:1", special_tokens=[("<bos>", vocab["<bos>"])]
    )
    kwargs = dict(bos_token="<bos>", pad_token="<pad>", unk_token="<unk>")
    if eos:
        kwargs["eos_token"] = "<eos>"
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, **kwargs)
    fast.chat_template = chat_template
    fast.name_or_path = "tiny-test-tokenizer"
    return fast


@pytest.fixture(scope="session")
def make_tokenizer():
    """Factory: make_tokenizer(chat_template=..., eos=True) for tokenizers that differ from ``tok``."""
    return build_tokenizer


@pytest.fixture(scope="session")
def tok():
    """Tiny tokenizer with the test chat template; ids: <pad>=0 <unk>=1 <bos>=2 <eos>=3 user=4 ..."""
    return build_tokenizer()


@pytest.fixture(scope="session")
def tok_plain():
    """Same tokenizer without a chat template."""
    return build_tokenizer(chat_template=None)


@pytest.fixture
def write(tmp_path):
    """write(name, rows_or_text) -> path string. Lists of dicts become JSON lines; str/bytes are written raw."""

    def _write(name: str, content) -> str:
        path = tmp_path / name
        if isinstance(content, bytes):
            path.write_bytes(content)
        elif isinstance(content, str):
            path.write_text(content, encoding="utf-8")
        else:
            path.write_text("".join(json.dumps(r) + "\n" for r in content), encoding="utf-8")
        return str(path)

    return _write
