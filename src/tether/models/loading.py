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

from tether.common.errors import ConfigError, ModelError, one_line
from tether.models import attn_implementation as attention
from tether.common.services import HUB_TIMEOUT_S

log = logging.getLogger(__name__)

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
PAD_TOKEN = "<|pad|>"


def _named(name_or_path: str, key: str | None) -> str:
    """``'P'`` or ``'P' (config.key)``: errors name the config key the path came from."""
    return f"'{name_or_path}'" + (f" ({key})" if key else "")


def looks_local(name_or_path: str) -> bool:
    """Meant as a local path rather than a hub id (``name`` or ``org/name``).

    Anything starting with ``.``, ``/`` or ``~``, with two or more slashes, or whose first
    component is a directory here (``runs/nope`` when ``runs/`` exists) is a path.
    """
    if name_or_path.startswith((".", "/", "~")) or name_or_path.count("/") >= 2 or "\\" in name_or_path:
        return True
    head = name_or_path.split("/", 1)[0]
    return "/" in name_or_path and Path(head).expanduser().is_dir()


def _check_exists(name_or_path: str, what: str, key: str | None = None) -> None:
    """A path-looking name that does not exist gets a clear error instead of a hub lookup; so
    does a LoRA adapter directory given where a full model is expected."""
    from tether.models.lora import ADAPTER_DIR, adapter_base, is_adapter_dir

    if looks_local(name_or_path) and not Path(name_or_path).expanduser().exists():
        raise ModelError(
            f"The {what} path {_named(name_or_path, key)} does not exist; expected a local checkpoint directory "
            "(with config.json) or a hub id such as 'org/name'."
        )
    if is_adapter_dir(name_or_path):
        base = adapter_base(name_or_path)
        raise ModelError(
            f"The {what} {_named(name_or_path, key)} is a LoRA adapter directory (adapter_config.json, no model), "
            "not a full model. Give the merged model a LoRA run writes (the directory above its "
            f"{ADAPTER_DIR}/), or its base" + (f" ('{base}')" if base else "") + " with lora.adapter set to this directory."
        )


def _local_only(name_or_path: str) -> bool:
    """Load from disk only: a local directory, or a hub id while the hub cannot be reached
    (then only the local cache is searched, at once, instead of ~25 s of retries per file)."""
    return Path(name_or_path).expanduser().exists() or hub_offline()


# Process-wide by nature: whether the hub's host answers, asked once per process, not per model.
_HUB_REACHABLE: dict[str, bool] = {}


def hub_offline(timeout: float = HUB_TIMEOUT_S) -> bool:
    """``HF_HUB_OFFLINE`` is set, or the hub's host cannot be reached within ``timeout`` s (checked once)."""
    import os
    import socket
    from urllib.parse import urlparse

    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE or os.environ.get("HF_HUB_OFFLINE", "").upper() in ("1", "ON", "YES", "TRUE"):
        return True
    url = urlparse(constants.ENDPOINT)
    host, port = url.hostname or "huggingface.co", url.port or (443 if url.scheme == "https" else 80)
    if host not in _HUB_REACHABLE:
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            _HUB_REACHABLE[host] = True
        except OSError:  # no DNS, no route, refused, timed out
            _HUB_REACHABLE[host] = False
    return not _HUB_REACHABLE[host]


def _wrap_load_error(name_or_path: str, what: str, err: Exception, key: str | None = None) -> ModelError:
    # Library messages span lines; the error stays one paragraph, of bounded length.
    reason = one_line(err, 400).rstrip(".")
    local = "" if Path(name_or_path).expanduser().exists() else " (no local path of that name exists either)"
    offline = "" if Path(name_or_path).expanduser().exists() or not hub_offline() else (
        " The hub cannot be reached from here (or HF_HUB_OFFLINE is set), so only the local cache was searched.")
    return ModelError(
        f"Could not load the {what} {_named(name_or_path, key)}{local}: {type(err).__name__}: {reason}. "
        f"Expected a local checkpoint directory (with config.json) or a reachable hub id.{offline}"
    )


def load_tokenizer(name_or_path: str, padding_side: str = "left", key: str | None = None):
    """Tokenizer with a pad token distinct from EOS (added if missing) and left padding."""
    from transformers import AutoTokenizer

    _check_exists(name_or_path, "tokenizer", key)
    try:
        tok = AutoTokenizer.from_pretrained(name_or_path, local_files_only=_local_only(name_or_path))
    except Exception as err:  # noqa: BLE001 - library errors become one clear message
        raise _wrap_load_error(name_or_path, "tokenizer", err, key) from None
    if tok.eos_token_id is None:
        raise ModelError(f"The tokenizer {_named(name_or_path, key)} has no EOS token; tether needs one.")
    if tok.pad_token_id is None or tok.pad_token_id == tok.eos_token_id:
        # A pad equal to EOS would hide the real EOS from masks and last-token pooling.
        tok.add_special_tokens({"pad_token": PAD_TOKEN})
    tok.padding_side = padding_side
    return tok


#: Files a saved tokenizer has at least one of.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "vocab.txt")


def has_tokenizer_files(name_or_path: str) -> bool:
    """A tokenizer can be read at ``name_or_path``: a local directory holding one of
    :data:`TOKENIZER_FILES`, or a hub id (its files are looked up when it is loaded)."""
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        return any((path / name).exists() for name in TOKENIZER_FILES)
    return not looks_local(name_or_path)


def embedding_rows(config) -> int | None:
    """The rows of a checkpoint's input embedding, from its config (``vocab_size``; a multimodal
    config's text config), or None when the config does not say."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    rows = getattr(text, "vocab_size", None)
    return rows if isinstance(rows, int) and rows > 0 else None


def tokenizer_rows(tokenizer) -> int:
    """The embedding rows ``tokenizer``'s ids need from a checkpoint: its highest id + 1, less the
    pad :func:`load_tokenizer` added to a tokenizer without one (the model gets that row from
    :func:`_fit_vocab`, the mean of the others; any other row would be untrained)."""
    top = max(tokenizer.get_vocab().values()) + 1
    if tokenizer.pad_token == PAD_TOKEN and tokenizer.pad_token_id == top - 1:
        return top - 1
    return top


def check_vocab_fits(tokenizer, config, name_or_path: str, key: str | None) -> None:
    """Every id ``tokenizer`` writes (but tether's own pad) has a row in the embedding of the model
    at ``name_or_path``, from its config before any weight is read. Resizing the model to a larger
    tokenizer would silently give those ids rows it never trained (a model.tokenizer of another model)."""
    rows = embedding_rows(config)
    if tokenizer is None or rows is None:
        return
    need = tokenizer_rows(tokenizer)
    if need > rows:
        raise ConfigError(
            f"The tokenizer '{getattr(tokenizer, 'name_or_path', '?')}' writes token ids up to {need - 1:,}, but "
            f"the model {_named(name_or_path, key)} has an embedding of {rows:,} rows (vocab_size in its "
            f"config.json): the ids past {rows - 1:,} would index rows it never trained, and tether does not resize "
            "a model to another tokenizer. Expected the model's own tokenizer (in a run's config, model.tokenizer: "
            "null reads the model's directory) or a model trained with this one."
        )


def load_model_config(name_or_path: str, key: str | None = None, trust_remote_code: bool = False):
    """The transformers config of a checkpoint (no weights): architecture, context length, head size."""
    from transformers import AutoConfig

    _check_exists(name_or_path, "model", key)
    try:
        return AutoConfig.from_pretrained(name_or_path, trust_remote_code=trust_remote_code,
                                          local_files_only=_local_only(name_or_path))
    except Exception as err:  # noqa: BLE001
        raise _wrap_load_error(name_or_path, "model config", err, key) from None


def _architectures(config) -> list[str]:
    return list(getattr(config, "architectures", None) or [])


def is_scalar_head_config(config) -> bool:
    """The checkpoint holds a sequence-classification (reward model / critic) head."""
    return any("ForSequenceClassification" in a for a in _architectures(config))


def check_scalar_head_config(config, name_or_path: str, key: str | None, trained_head: bool = False) -> None:
    """A checkpoint's config fit for a reward model or critic: a scalar head has one output, and
    ``trained_head`` (a reward model, a critic from one) needs a scalar-head architecture at all."""
    num_labels = getattr(config, "num_labels", 1)
    if is_scalar_head_config(config) and num_labels != 1:
        raise ModelError(
            f"The model {_named(name_or_path, key)} has a head with {num_labels} outputs; a reward model or "
            "critic needs exactly one (num_labels=1)."
        )
    if trained_head and not is_scalar_head_config(config):
        raise ModelError(
            f"The model {_named(name_or_path, key)} has no trained scalar head "
            f"({', '.join(_architectures(config)) or 'no scalar head in its weights'}): as a reward model or "
            "critic it would score with a randomly initialised head. Give a reward model trained by `tether rm` "
            "(an AutoModelForSequenceClassification checkpoint with num_labels=1)."
        )


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
    # check_vocab_fits has refused a tokenizer whose own ids exceed the rows: what grows here is
    # tether's added pad only.
    if tokenizer is not None and model.get_input_embeddings().num_embeddings < len(tokenizer):
        # On the meta device (a dry run) there are no values to average for the new rows.
        model.resize_token_embeddings(len(tokenizer), mean_resizing=not model.get_input_embeddings().weight.is_meta)
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
    key: str | None = None,
    meta: bool = False,
    attn_implementation: str = "sdpa",
):
    """``AutoModelForCausalLM`` with dropout off, vocab fitted to ``tokenizer``.

    A reward-model (scalar-head) checkpoint, or one that lacks weights the causal LM needs
    (they would be initialised at random), is a :class:`ModelError`: a policy must be a
    trained causal LM. ``key`` names the config key or flag the path came from, for errors.
    ``meta``: the model on the meta device, no weight read, after the same checks (the dry run's).
    ``attn_implementation``: ``model.attn_implementation``, checked against the model's class
    before its weights are read (:mod:`tether.models.attn_implementation`).
    """
    from transformers import AutoModelForCausalLM

    config = load_model_config(name_or_path, key, trust_remote_code)
    if is_scalar_head_config(config):
        raise ModelError(
            f"The model {_named(name_or_path, key)} is a scalar-head checkpoint ({', '.join(_architectures(config))}: "
            "a reward model or critic), not a causal LM; a policy needs a causal LM such as the SFT output."
        )
    check_vocab_fits(tokenizer, config, name_or_path, key)
    cls = attention.model_class(AutoModelForCausalLM, config)
    attn = attention.resolve(attn_implementation, cls, _named(name_or_path, key))
    try:
        model, info = AutoModelForCausalLM.from_pretrained(
            name_or_path, dtype=DTYPES[dtype], trust_remote_code=trust_remote_code, output_loading_info=True,
            local_files_only=_local_only(name_or_path), attn_implementation=attn, **_meta(meta),
        )
    except Exception as err:  # noqa: BLE001
        raise (attention.load_error(err, attn_implementation, _named(name_or_path, key), cls)
               or _wrap_load_error(name_or_path, "causal LM", err, key)) from None
    _refuse_fresh_weights(name_or_path, key, "causal LM", info["missing_keys"])
    _fit_vocab(model, tokenizer)
    if not keep_dropout:
        disable_dropout(model)
    return model


def _meta(meta: bool) -> dict:
    """from_pretrained's arguments for a model on the meta device: transformers then reads the
    checkpoint's weight names, not its weights, and reports missing weights as for a real load."""
    return {"device_map": "meta"} if meta else {}


def _refuse_fresh_weights(name_or_path: str, key: str | None, what: str, missing) -> None:
    """Weights the checkpoint lacks would be random: a checkpoint of another architecture."""
    missing = sorted(missing)
    if missing:
        shown = ", ".join(missing[:4]) + (f" and {len(missing) - 4} more" if len(missing) > 4 else "")
        raise ModelError(
            f"The checkpoint {_named(name_or_path, key)} lacks weights a {what} needs ({shown}); they would be "
            "initialised at random. Expected a checkpoint of the same architecture, trained."
        )


def load_scalar_model(
    name_or_path: str,
    tokenizer=None,
    dtype: str = "float32",
    keep_dropout: bool = False,
    head_init_std: float | None = None,
    trust_remote_code: bool = False,
    new_head: bool = False,
    key: str | None = None,
    meta: bool = False,
    attn_implementation: str = "sdpa",
    head_seed: int | None = None,
):
    """``AutoModelForSequenceClassification(num_labels=1)``: a reward model or critic.

    A checkpoint without a scalar head (a causal LM) gets a fresh one only with ``new_head``
    (the reward-model stage, a critic started from the policy), initialised with
    ``head_init_std`` when given (drawn from a generator seeded with ``head_seed`` when given,
    else from torch's global one); otherwise that is a :class:`ModelError`, because a reward
    model or critic with a random head scores at random. A trained head is kept as it is.
    ``meta``, ``attn_implementation``: as :func:`load_causal_lm`'s.
    """
    from transformers import AutoModelForSequenceClassification

    config = load_model_config(name_or_path, key, trust_remote_code)
    check_scalar_head_config(config, name_or_path, key)
    config.num_labels = 1
    check_vocab_fits(tokenizer, config, name_or_path, key)
    cls = attention.model_class(AutoModelForSequenceClassification, config)
    attn = attention.resolve(attn_implementation, cls, _named(name_or_path, key))
    try:
        model, info = AutoModelForSequenceClassification.from_pretrained(
            name_or_path, config=config, dtype=DTYPES[dtype], trust_remote_code=trust_remote_code,
            output_loading_info=True, local_files_only=_local_only(name_or_path), attn_implementation=attn,
            **_meta(meta),
        )
    except Exception as err:  # noqa: BLE001
        raise (attention.load_error(err, attn_implementation, _named(name_or_path, key), cls)
               or _wrap_load_error(name_or_path, "scalar-head model", err, key)) from None
    head = score_head(model)
    if head.weight.shape[0] != 1:
        raise ModelError(f"The model {_named(name_or_path, key)} head has more than one output.")
    head_names = {name for name, p in model.named_parameters() if p is head.weight or p is head.bias}
    missing = set(info["missing_keys"])
    fresh_head = bool(missing & head_names)
    _refuse_fresh_weights(name_or_path, key, "scalar-head model", missing - head_names)
    if fresh_head and not new_head:
        raise ModelError(
            f"The model {_named(name_or_path, key)} has no trained scalar head "
            f"({', '.join(_architectures(config)) or 'no scalar head in its weights'}): as a reward model or "
            "critic it would score with a randomly initialised head. Give a reward model trained by `tether rm` "
            "(an AutoModelForSequenceClassification checkpoint with num_labels=1)."
        )
    if fresh_head and head_init_std is not None:
        generator = None if head_seed is None else torch.Generator(device=head.weight.device).manual_seed(head_seed)
        with torch.no_grad():
            head.weight.normal_(0.0, head_init_std, generator=generator)
    _fit_vocab(model, tokenizer)
    if not keep_dropout:
        disable_dropout(model)
    return model


def enable_gradient_checkpointing(model, key: str = "gradient_checkpointing") -> None:
    """Recompute each decoder layer's activations in the backward instead of keeping them
    (transformers' own checkpointing, non-reentrant: it works with LoRA and frozen inputs)."""
    from tether.models.lora import unwrap

    hf = unwrap(model)
    if not getattr(hf, "supports_gradient_checkpointing", False):
        raise ModelError(f"{type(hf).__name__} does not support gradient checkpointing ({key}=true); set it to false.")
    if hasattr(hf, "activation_checkpointing_enable"):  # transformers >= 5.20's name
        hf.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    else:
        hf.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


def context_length(model_or_config) -> int | None:
    """The most positions a model (or its config) takes, when its config says; None otherwise.

    Learned position embeddings (GPT-2) fail past it with an IndexError; rotary ones (Llama,
    Qwen) run but were never trained there. Either way tether keeps every sequence within it.
    """
    config = getattr(model_or_config, "config", model_or_config)
    for name in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length", "n_ctx"):
        value = getattr(config, name, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def score_head(model) -> nn.Linear:
    """The scalar head of a ``*ForSequenceClassification`` model."""
    from tether.models.lora import unwrap

    model = unwrap(model)
    head = getattr(model, "score", None) or getattr(model, "classifier", None)
    # A LoRA model's head trains in full: peft wraps it (ModulesToSaveWrapper), which runs as the head.
    if type(head).__name__ == "ModulesToSaveWrapper":
        return head
    if not isinstance(head, nn.Linear):
        raise ModelError(
            f"{type(model).__name__} has no linear `score` head; tether supports decoder models "
            "whose ForSequenceClassification class has one (Llama, Qwen, Mistral, GPT-2, ...)."
        )
    return head


def score_offset(model) -> float:
    """The reward model's normalisation offset (0 when not normalised)."""
    return float(getattr(model.config, "score_offset", 0.0) or 0.0)
