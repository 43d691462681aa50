"""Load any Hugging Face causal LM, tokenizer or scalar-head model by hub id or local path.

Scalar-head models (reward model, critic) are plain ``AutoModelForSequenceClassification``
with ``num_labels=1``, so a checkpoint tether writes is usable by transformers alone.
The reward model's normalisation offset travels in its ``config.json`` as ``score_offset``.
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch
from torch import nn

from tether.errors import ModelError

log = logging.getLogger(__name__)

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
PAD_TOKEN = "<|pad|>"


def _check_exists(name_or_path: str, what: str) -> None:
    """A path-looking name that does not exist gets a clear error instead of a hub lookup."""
    # Hub ids are `name` or `org/name`; anything else is meant as a local path.
    looks_local = name_or_path.startswith((".", "/", "~")) or name_or_path.count("/") >= 2
    if looks_local and not Path(name_or_path).expanduser().exists():
        raise ModelError(
            f"The {what} path '{name_or_path}' does not exist; expected a local checkpoint directory "
            "(with config.json) or a hub id such as 'org/name'."
        )


def _wrap_load_error(name_or_path: str, what: str, err: Exception) -> ModelError:
    # Library messages span lines; the error stays one paragraph, of bounded length.
    reason = " ".join(str(err).split()).rstrip(".")
    if len(reason) > 400:
        reason = reason[:400] + "..."
    local = "" if Path(name_or_path).expanduser().exists() else " (no local path of that name exists either)"
    return ModelError(
        f"Could not load the {what} '{name_or_path}'{local}: {type(err).__name__}: {reason}. "
        "Expected a local checkpoint directory (with config.json) or a reachable hub id."
    )


def load_tokenizer(name_or_path: str, padding_side: str = "left"):
    """Tokenizer with a pad token distinct from EOS (added if missing) and left padding."""
    from transformers import AutoTokenizer

    _check_exists(name_or_path, "tokenizer")
    try:
        tok = AutoTokenizer.from_pretrained(name_or_path)
    except Exception as err:  # noqa: BLE001 - library errors become one clear message
        raise _wrap_load_error(name_or_path, "tokenizer", err) from None
    if tok.eos_token_id is None:
        raise ModelError(f"The tokenizer '{name_or_path}' has no EOS token; tether needs one.")
    if tok.pad_token_id is None or tok.pad_token_id == tok.eos_token_id:
        # A pad equal to EOS would hide the real EOS from masks and last-token pooling.
        tok.add_special_tokens({"pad_token": PAD_TOKEN})
    tok.padding_side = padding_side
    return tok


def disable_dropout(model: nn.Module) -> None:
    """Set every dropout probability to 0 (modules and attention-dropout attributes)."""
    for module in model.modules():
        if isinstance(module, nn.Dropout):
            module.p = 0.0
        for name in ("attention_dropout", "dropout"):
            if isinstance(getattr(module, name, None), float):
                setattr(module, name, 0.0)
    config = getattr(model, "config", None)
    if config is not None:
        for key, value in list(config.to_dict().items()):
            if isinstance(value, float) and ("dropout" in key or key.endswith("pdrop")):
                setattr(config, key, 0.0)


def _fit_vocab(model, tokenizer) -> None:
    if tokenizer is not None and model.get_input_embeddings().num_embeddings < len(tokenizer):
        model.resize_token_embeddings(len(tokenizer))
    if tokenizer is not None:
        model.config.pad_token_id = tokenizer.pad_token_id
        gen = getattr(model, "generation_config", None)
        if gen is not None:
            gen.pad_token_id = tokenizer.pad_token_id


def load_causal_lm(
    name_or_path: str,
    tokenizer=None,
    dtype: str = "float32",
    keep_dropout: bool = False,
    trust_remote_code: bool = False,
):
    """``AutoModelForCausalLM`` with dropout off, vocab fitted to ``tokenizer``."""
    from transformers import AutoModelForCausalLM

    _check_exists(name_or_path, "model")
    try:
        model = AutoModelForCausalLM.from_pretrained(
            name_or_path, dtype=DTYPES[dtype], trust_remote_code=trust_remote_code
        )
    except Exception as err:  # noqa: BLE001
        raise _wrap_load_error(name_or_path, "causal LM", err) from None
    _fit_vocab(model, tokenizer)
    if not keep_dropout:
        disable_dropout(model)
    return model


def load_scalar_model(
    name_or_path: str,
    tokenizer=None,
    dtype: str = "float32",
    keep_dropout: bool = False,
    head_init_std: float | None = None,
    trust_remote_code: bool = False,
):
    """``AutoModelForSequenceClassification(num_labels=1)``: a reward model or critic.

    Loading a causal-LM checkpoint gives a fresh head; ``head_init_std`` re-initialises it.
    """
    from transformers import AutoConfig, AutoModelForSequenceClassification

    _check_exists(name_or_path, "model")
    try:
        config = AutoConfig.from_pretrained(name_or_path, trust_remote_code=trust_remote_code)
    except Exception as err:  # noqa: BLE001
        raise _wrap_load_error(name_or_path, "model config", err) from None
    num_labels = getattr(config, "num_labels", 1)
    is_classifier = any("ForSequenceClassification" in a for a in (config.architectures or []))
    if is_classifier and num_labels != 1:
        raise ModelError(
            f"The model '{name_or_path}' has a head with {num_labels} outputs; a reward model or "
            "critic needs exactly one (num_labels=1)."
        )
    config.num_labels = 1
    try:
        model = AutoModelForSequenceClassification.from_pretrained(
            name_or_path, config=config, dtype=DTYPES[dtype], trust_remote_code=trust_remote_code
        )
    except Exception as err:  # noqa: BLE001
        raise _wrap_load_error(name_or_path, "scalar-head model", err) from None
    if score_head(model).weight.shape[0] != 1:
        raise ModelError(f"The model '{name_or_path}' head has more than one output.")
    if head_init_std is not None:
        with torch.no_grad():
            score_head(model).weight.normal_(0.0, head_init_std)
    _fit_vocab(model, tokenizer)
    if not keep_dropout:
        disable_dropout(model)
    return model


def score_head(model) -> nn.Linear:
    """The scalar head of a ``*ForSequenceClassification`` model."""
    head = getattr(model, "score", None) or getattr(model, "classifier", None)
    if not isinstance(head, nn.Linear):
        raise ModelError(
            f"{type(model).__name__} has no linear `score` head; tether supports decoder models "
            "whose ForSequenceClassification class has one (Llama, Qwen, Mistral, GPT-2, ...)."
        )
    return head


def score_offset(model) -> float:
    """The reward model's normalisation offset (0 when not normalised)."""
    return float(getattr(model.config, "score_offset", 0.0) or 0.0)
