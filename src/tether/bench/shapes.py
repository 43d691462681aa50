"""Real architectures at their public shapes, built locally with random weights.

``tether bench --model NAME`` measures tether on the shapes users train (a 151,936-token
vocabulary, grouped-query attention, tied embeddings) without downloading anything: the numbers
below are copied as facts from each model's public ``config.json`` on the Hugging Face hub
(HuggingFaceTB/SmolLM2-135M, Qwen/Qwen2.5-0.5B, Qwen/Qwen2.5-1.5B, meta-llama/Llama-3.2-1B);
the weights are random from a seed. The tokenizer is built here too
(:func:`sized_tokenizer`): byte-level BPE with exactly the model's vocabulary size, so the
embedding, the LM head and the logits cost what they cost with the real tokenizer.

``--model PATH`` takes any local directory with a ``config.json`` instead (:func:`resolve_model`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

# Copied as facts from the public config.json files (only the keys that shape the model).
SHAPES: dict[str, dict] = {
    "smollm2-135m": {  # HuggingFaceTB/SmolLM2-135M: 134.5M parameters
        "model_type": "llama", "architectures": ["LlamaForCausalLM"],
        "hidden_size": 576, "num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3,
        "intermediate_size": 1536, "vocab_size": 49152, "tie_word_embeddings": True,
        "max_position_embeddings": 8192, "rope_theta": 100000.0, "rms_norm_eps": 1e-5, "hidden_act": "silu",
    },
    "qwen2.5-0.5b": {  # Qwen/Qwen2.5-0.5B: 0.49B parameters; q, k and v projections have a bias
        "model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"],
        "hidden_size": 896, "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2,
        "intermediate_size": 4864, "vocab_size": 151936, "tie_word_embeddings": True,
        "max_position_embeddings": 32768, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6, "hidden_act": "silu",
        "use_sliding_window": False, "sliding_window": 32768, "max_window_layers": 24,
    },
    "qwen2.5-1.5b": {  # Qwen/Qwen2.5-1.5B: 1.54B parameters
        "model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"],
        "hidden_size": 1536, "num_hidden_layers": 28, "num_attention_heads": 12, "num_key_value_heads": 2,
        "intermediate_size": 8960, "vocab_size": 151936, "tie_word_embeddings": True,
        "max_position_embeddings": 131072, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6, "hidden_act": "silu",
        "use_sliding_window": False, "sliding_window": 131072, "max_window_layers": 21,
    },
    "llama-3.2-1b": {  # meta-llama/Llama-3.2-1B: 1.24B parameters
        "model_type": "llama", "architectures": ["LlamaForCausalLM"],
        "hidden_size": 2048, "num_hidden_layers": 16, "num_attention_heads": 32, "num_key_value_heads": 8,
        "head_dim": 64, "intermediate_size": 8192, "vocab_size": 128256, "tie_word_embeddings": True,
        "max_position_embeddings": 131072, "rope_theta": 500000.0, "rms_norm_eps": 1e-5, "hidden_act": "silu",
        "rope_scaling": {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 8192},
    },
}
#: Published parameter counts (the model cards' sizes), for the tests' check of the shapes above.
PUBLISHED_PARAMS = {"smollm2-135m": 134.5e6, "qwen2.5-0.5b": 0.49e9, "qwen2.5-1.5b": 1.54e9, "llama-3.2-1b": 1.24e9}

EOS, IM_START, IM_END, PAD = "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|pad|>"
SPECIALS = (EOS, IM_START, IM_END, PAD)
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model")


def model_config(name: str, **extra):
    """The transformers config of one of :data:`SHAPES` (``extra`` overrides keys, e.g. layers for a test)."""
    from transformers import AutoConfig

    values = dict(SHAPES[name]) | extra
    return AutoConfig.for_model(values.pop("model_type"), **values)


def count_params(config) -> int:
    """Parameters of the causal LM ``config`` describes, built on the meta device (no memory);
    tied embeddings count once."""
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return sum(p.numel() for p in model.parameters())


def sized_tokenizer(vocab_size: int):
    """A byte-level BPE tokenizer with exactly ``vocab_size`` ids: the 256 byte symbols, merges up
    to the size, and the specials ``<|endoftext|>`` (EOS), ``<|im_start|>``, ``<|im_end|>`` and
    ``<|pad|>`` (pad, distinct from EOS) at the top; a ChatML chat template; left padding.

    The merges are synthetic (every byte pair, then pairs with a third byte, in a fixed order),
    not learned: any text round-trips, and the vocabulary costs what a real one of that size does.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    room = vocab_size - len(alphabet) - len(SPECIALS)
    if room < 0:
        raise ValueError(f"vocab_size {vocab_size} is below the {len(alphabet) + len(SPECIALS)} byte and "
                         "special tokens")
    vocab = {sym: i for i, sym in enumerate(alphabet)}
    merges = _merges(alphabet, room)
    for a, b in merges:
        vocab[a + b] = len(vocab)
    for special in SPECIALS:
        vocab[special] = len(vocab)
    core = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    tok = PreTrainedTokenizerFast(tokenizer_object=core, eos_token=EOS, pad_token=PAD,
                                  additional_special_tokens=[IM_START, IM_END])
    tok.chat_template = CHAT_TEMPLATE
    tok.padding_side = "left"
    return tok


def _merges(alphabet: list[str], n: int) -> list[tuple[str, str]]:
    """``n`` merges whose results are all distinct: byte pairs first, then a pair and a byte."""
    out: list[tuple[str, str]] = []
    pairs = [a + b for a in alphabet for b in alphabet]
    for a in alphabet:
        for b in alphabet:
            if len(out) == n:
                return out
            out.append((a, b))
    for pair in pairs:
        for c in alphabet:
            if len(out) == n:
                return out
            out.append((pair, c))
    raise ValueError(f"vocab_size too large for two levels of merges ({len(out)} at most)")


@dataclass
class ModelSource:
    """What ``--model`` names: a config, where it came from, and the tokenizer directory if any."""

    name: str
    config: object
    tokenizer_path: str | None = None

    def tokenizer(self):
        """The directory's own tokenizer (tether's loader) or one built to the config's vocabulary."""
        if self.tokenizer_path is not None:
            from tether.models.loading import load_tokenizer

            return load_tokenizer(self.tokenizer_path, key="--model")
        return sized_tokenizer(self.config.vocab_size)


def resolve_model(spec: str) -> ModelSource:
    """``--model``: a name of :data:`SHAPES`, or a local directory with a ``config.json``.
    A ConfigError (one paragraph) for anything else, before any model is built."""
    from tether.common.errors import ConfigError

    if spec in SHAPES:
        return ModelSource(spec, model_config(spec))
    path = Path(spec).expanduser()
    names = ", ".join(SHAPES)
    if not path.is_dir():
        raise ConfigError(f"--model {spec!r} is neither a known shape ({names}) nor a local directory; expected one "
                          "of those names or a directory with a config.json.")
    if not (path / "config.json").is_file():
        raise ConfigError(f"--model {spec!r} is a directory without a config.json; expected a model directory "
                          f"(config.json, a tokenizer optional) or one of {names}.")
    config = _read_config(path)
    has_tokenizer = any((path / f).is_file() for f in TOKENIZER_FILES)
    return ModelSource(str(path), config, str(path) if has_tokenizer else None)


def _read_config(path: Path):
    from transformers import AutoConfig

    from tether.common.errors import ConfigError

    try:
        json.loads((path / "config.json").read_text(encoding="utf-8"))
        config = AutoConfig.from_pretrained(str(path), local_files_only=True)
    except Exception as err:  # noqa: BLE001 - a library's error becomes one paragraph
        reason = " ".join(str(err).split())[:300]
        raise ConfigError(f"--model {str(path)!r}: its config.json could not be read as a transformers config "
                          f"({type(err).__name__}: {reason}).") from None
    from transformers.models.auto.modeling_auto import (MODEL_FOR_CAUSAL_LM_MAPPING,
                                                        MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING)

    kind = type(config)
    supported = kind in MODEL_FOR_CAUSAL_LM_MAPPING and kind in MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING
    if not supported or not getattr(config, "vocab_size", None) or not getattr(config, "hidden_size", None):
        raise ConfigError(f"--model {str(path)!r}: its config.json is a {kind.__name__} (model_type "
                          f"{getattr(config, 'model_type', None)!r}), which the bench cannot build: it needs a "
                          "causal LM with a sequence-classification head in transformers and vocab_size and "
                          "hidden_size (Llama, Qwen2, Mistral, ...).")
    return config


def build_causal_lm(config, seed: int = 0, dtype=None):
    """A causal LM of ``config`` with transformers' own random init from ``seed``: one allocation
    per weight (no copies), tied embeddings kept tied."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(config, dtype=dtype or torch.float32)


def write_model(source: ModelSource, out: str, seed: int = 0) -> Path:
    """Write a random-init checkpoint of ``source`` and its tokenizer to the directory ``out``, to
    stand in for a hub id (``model.name_or_path=OUT``). A non-empty ``out`` is refused; the files
    are written beside it and moved in at the end, so a failed write leaves nothing behind."""
    import shutil
    import tempfile

    from tether.common.errors import ConfigError

    target = Path(out).expanduser()
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise ConfigError(f"--write-model {out!r} exists and is not an empty directory; give a new directory "
                          "(nothing is overwritten).")
    target.parent.mkdir(parents=True, exist_ok=True)
    tokenizer = source.tokenizer()
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    staging.chmod(0o777 & ~_umask())  # mkdtemp's 0700 would make the checkpoint private
    try:
        model = build_causal_lm(source.config, seed)
        _set_special_ids(model, tokenizer)
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        if target.exists():
            target.rmdir()
        staging.rename(target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target


def _umask() -> int:
    import os

    mask = os.umask(0)
    os.umask(mask)
    return mask


def _set_special_ids(model, tokenizer) -> None:
    for obj in (model.config, getattr(model, "generation_config", None)):
        if obj is not None:
            obj.eos_token_id = tokenizer.eos_token_id
            obj.pad_token_id = tokenizer.pad_token_id
            obj.bos_token_id = tokenizer.bos_token_id
