"""LoRA adapters through peft: wrapping a model, loading an adapter, merged saving.

With LoRA a model's base weights stay frozen and only low-rank adapters (plus any
``modules_to_save``, and a scalar model's head) train, so the optimiser state is small and
the base can serve a second role with the adapters switched off: PPO's reference is the
actor's base (:meth:`peft.PeftModel.disable_adapter`). A run's final model is saved merged
(base + adapters, a plain Hugging Face checkpoint) with the adapter beside it in ``adapter/``.
"""

from __future__ import annotations

import contextlib
import json
import os
import warnings
from pathlib import Path

import torch

from tether.common.errors import ConfigError, ModelError, one_line

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_DIR = "adapter"  # where a run's final adapter goes, inside the merged model's directory


@contextlib.contextmanager
def quiet_peft():
    """peft reads transformers' deprecated ``is_gradient_checkpointing`` alias when it wraps or
    loads a model: a warning between the two libraries that a user of tether can do nothing about."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="`is_gradient_checkpointing` is deprecated", category=FutureWarning)
        yield


def is_peft(model) -> bool:
    """A peft model (adapters injected into a base model)."""
    return hasattr(model, "disable_adapter") and hasattr(model, "get_base_model")


def unwrap(model):
    """The Hugging Face model inside a peft model (adapters included), else the model itself.

    The forward helpers run its decoder trunk (``base_model``) and heads as with any model.
    """
    return model.get_base_model() if is_peft(model) else model


def is_adapter_dir(path: str | os.PathLike) -> bool:
    """A directory holding a LoRA adapter and no full model."""
    path = Path(path).expanduser()
    return (path / ADAPTER_CONFIG).is_file() and not (path / "config.json").is_file()


def linear_names(model) -> list[str]:
    """The distinct last name parts of ``model``'s linear layers (what ``target_modules`` may name)."""
    from transformers.pytorch_utils import Conv1D

    names = {name.rsplit(".", 1)[-1] for name, m in model.named_modules() if isinstance(m, (torch.nn.Linear, Conv1D))}
    return sorted(names)


def wrap_lora(model, lora, scalar: bool, key: str = "lora"):
    """``model`` with fresh LoRA adapters per the ``lora:`` block (or the adapter ``lora.adapter``),
    trainable; for a scalar model (reward model, critic) its head trains in full too.

    Errors name the config key: target modules that match nothing (with the model's linear
    layers listed), a model peft cannot wrap, an adapter path that holds no adapter.
    """
    from peft import LoraConfig, PeftModel, get_peft_model

    if lora.adapter:
        return load_adapter(model, lora.adapter, trainable=True, key=f"{key}.adapter")
    check_lora_names(model, lora, key)
    config = LoraConfig(r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
                        target_modules=_targets(lora.target_modules), modules_to_save=list(lora.modules_to_save) or None,
                        task_type="SEQ_CLS" if scalar else "CAUSAL_LM", fan_in_fan_out=uses_conv1d(model))
    try:
        with quiet_peft():
            wrapped = get_peft_model(model, config)
    except Exception as err:  # noqa: BLE001 - peft's errors become one paragraph naming the key
        reason = one_line(err, 300)
        if type(err).__name__ == "NoMatchingPeftModuleError" or "not found in the base model" in reason:
            raise ConfigError(
                f"Config key '{key}.target_modules' = {list(lora.target_modules)}: no layer of "
                f"{type(model).__name__} matches. Its linear layers are named {', '.join(linear_names(model))} "
                "(or use 'all-linear')."
            ) from None
        raise ModelError(f"peft cannot put LoRA adapters on {type(model).__name__} ({key}): "
                         f"{type(err).__name__}: {reason}") from None
    _record_base(wrapped)
    assert isinstance(wrapped, PeftModel)
    return wrapped


def check_lora_names(model, lora, key: str = "lora") -> None:
    """Every name in ``target_modules`` and ``modules_to_save`` must match a module of ``model``,
    by peft's own rules: peft drops a name that matches nothing (a typo, another architecture's
    name) without a word as long as another name matches, and a setting that silently does nothing
    is refused. Reads module names only, so it works on a model on the meta device (the dry run's)."""
    names = [name for name, _ in model.named_modules() if name]
    targets = list(lora.target_modules)
    if "all-linear" in targets and len(targets) > 1:
        raise ConfigError(f"Config key '{key}.target_modules' = {targets}: 'all-linear' stands alone (it already "
                          "means every linear layer but the output head); list layer names without it.")
    for target in [] if targets == ["all-linear"] else targets:
        if not any(name == target or name.endswith("." + target) for name in names):  # peft's rule for a list
            raise ConfigError(
                f"Config key '{key}.target_modules' = {targets}: no layer of {type(model).__name__} is called "
                f"{target!r}. Its linear layers are named {', '.join(linear_names(model))} (or use 'all-linear')."
            )
    for module in lora.modules_to_save:
        if not any(name.endswith(module) for name in names):  # peft's rule for modules_to_save: the name's end
            raise ConfigError(
                f"Config key '{key}.modules_to_save' = {list(lora.modules_to_save)}: no module of "
                f"{type(model).__name__} is called {module!r}. Its modules with weights of their own are named "
                f"{', '.join(weighted_names(model))}."
            )


def weighted_names(model) -> list[str]:
    """The distinct last name parts of ``model``'s modules that hold weights themselves (what
    ``modules_to_save`` may name: embeddings, norms, heads, layers)."""
    return sorted({name.rsplit(".", 1)[-1] for name, m in model.named_modules()
                   if name and next(m.parameters(recurse=False), None) is not None})


def uses_conv1d(model) -> bool:
    """GPT-2-style models keep their linear layers as transformers' ``Conv1D`` (weights stored
    transposed, fan_in x fan_out): peft's LoRA must be told so (``fan_in_fan_out``), or it
    corrects the setting itself with a warning on every run."""
    from transformers.pytorch_utils import Conv1D

    return any(isinstance(m, Conv1D) for m in model.modules())


def _targets(names: list[str]):
    """peft's ``target_modules``: the special 'all-linear' as the string peft expects."""
    return "all-linear" if list(names) == ["all-linear"] else list(names)


def _record_base(model) -> None:
    """Write the base model's absolute path into the adapter config, so that
    ``PeftModel.from_pretrained`` finds the base from any directory."""
    for config in model.peft_config.values():
        base = config.base_model_name_or_path
        if base and Path(base).expanduser().exists():
            config.base_model_name_or_path = str(Path(base).expanduser().resolve())


def load_adapter(model, path: str, trainable: bool, key: str = "lora.adapter"):
    """``model`` with the adapter saved in ``path`` (a LoRA run's ``adapter/``, or a checkpoint's)."""
    from peft import PeftModel

    where = Path(path).expanduser()
    if not (where / ADAPTER_CONFIG).is_file():
        full = (where / "config.json").is_file()
        raise ModelError(
            f"'{path}' ({key}) holds no LoRA adapter ({ADAPTER_CONFIG})"
            + (": it is a full model; give it as the model itself (model.name_or_path), or its adapter/ "
               "directory." if full else "; expected the adapter/ directory a LoRA run writes.")
        )
    try:
        with quiet_peft():
            wrapped = PeftModel.from_pretrained(model, str(where), is_trainable=trainable)
    except Exception as err:  # noqa: BLE001
        reason = one_line(err, 300)
        raise ModelError(f"Could not load the LoRA adapter '{path}' ({key}) onto {type(model).__name__}: "
                         f"{type(err).__name__}: {reason}") from None
    _record_base(wrapped)
    return wrapped


def adapter_base(path: str | os.PathLike) -> str | None:
    """The base model an adapter directory names (``base_model_name_or_path``)."""
    try:
        return json.loads((Path(path) / ADAPTER_CONFIG).read_text()).get("base_model_name_or_path")
    except (OSError, ValueError):
        return None


def merged_names(named):
    """A LoRA-injected model's (name, tensor) pairs under the plain model's names: the base
    layers' weights (``...q_proj.base_layer.weight`` -> ``...q_proj.weight``; they hold W + BA
    while the adapters are merged), ``modules_to_save`` copies under the module's own name, and
    nothing of the adapters themselves."""
    for name, tensor in named:
        if ".lora_" in name or ".original_module." in name:
            continue
        name = name.replace(".base_layer.", ".").replace(".modules_to_save.default.", ".")
        yield name, tensor


def embeddings_train(model) -> bool:
    """Whether any weight of the input or output embeddings trains (a ``modules_to_save`` copy,
    LoRA on an embedding): then the adapter must carry them."""
    hf = unwrap(model)
    layers = [hf.get_input_embeddings(), getattr(hf, "get_output_embeddings", lambda: None)()]
    return any(p.requires_grad for layer in layers if layer is not None for p in layer.parameters())


def save_merged(model, directory) -> None:
    """A final model: the adapter into ``directory/adapter`` (loads with ``PeftModel.from_pretrained``
    on the base it records), then base + adapter merged into ``directory`` (a plain Hugging Face
    checkpoint). Merging replaces the adapters in ``model`` for good: call it last.

    When tether added a pad token to a tokenizer that had none, the loaded base's embeddings grew
    by that row. peft would then save the whole resized embedding matrices into the adapter, which
    no longer fits the recorded base (a size mismatch on load). The embeddings are frozen under
    LoRA, so the adapter is saved without them: it applies to the base as published, with the
    base's own tokenizer (the pad row is tether's batching aid, never a trained weight).
    """
    directory = Path(directory)
    embeddings = "auto" if embeddings_train(model) else False
    model.save_pretrained(directory / ADAPTER_DIR, save_embedding_layers=embeddings)
    model.merge_and_unload().save_pretrained(directory)


def trainable(model, lora, adapter: str | os.PathLike | None = None, checkpointing: bool = False,
              scalar: bool = False, key: str = "lora"):
    """A model ready to train: LoRA adapters per the ``lora:`` block (fresh, or loaded from
    ``adapter``, a checkpoint's) and gradient checkpointing when asked; unchanged otherwise."""
    from tether.models.loading import enable_gradient_checkpointing

    if lora.enabled:
        model = load_adapter(model, str(adapter), True, key) if adapter else wrap_lora(model, lora, scalar, key)
    if checkpointing:
        enable_gradient_checkpointing(model, key.replace("lora", "gradient_checkpointing"))
    return model


def parameter_bytes(module: torch.nn.Module, trainable_only: bool = False, seen: set | None = None) -> int:
    """Bytes of ``module``'s parameters (only the trainable ones if asked); storage already in
    ``seen`` (data pointers) is not counted again, and what is counted is added to it."""
    seen = set() if seen is None else seen
    total = 0
    for p in module.parameters():
        if trainable_only and not p.requires_grad:
            continue
        ptr = p.untyped_storage().data_ptr()
        if ptr in seen:
            continue
        seen.add(ptr)
        total += p.untyped_storage().nbytes()
    return total
