"""A plain (unsharded) copy of an FSDP-sharded model on one rank, from its gathered state dict:
what a run's final export (a LoRA model merged with peft, or a full model) is written from."""

from __future__ import annotations

import copy

import torch


def _set_buffer(module: torch.nn.Module, name: str, value: torch.Tensor) -> None:
    *path, leaf = name.split(".")
    for part in path:
        module = getattr(module, part)
    persistent = leaf not in module._non_persistent_buffers_set
    module.register_buffer(leaf, value.detach().clone(), persistent=persistent)


def rebuild_plain(model: torch.nn.Module, state_dict: dict) -> torch.nn.Module:
    """A new ``model`` (a Hugging Face model, or a peft model over one) built on the meta device
    from its config, holding ``state_dict``'s weights and ``model``'s buffers, on the CPU."""
    from tether.models.lora import is_peft, quiet_peft, unwrap

    hf = unwrap(model)
    with torch.device("meta"):
        plain = type(hf)(hf.config)
        if is_peft(model):
            from peft import get_peft_model

            config = copy.deepcopy(model.peft_config[model.active_adapter])
            base = config.base_model_name_or_path
            with quiet_peft():
                plain = get_peft_model(plain, config)
            # peft records the new model's own name_or_path as the base, which is the path as the
            # user gave it (relative, say): keep the absolute one the trained model recorded.
            plain.peft_config[plain.active_adapter].base_model_name_or_path = base
    plain.load_state_dict({k: v.to("cpu") for k, v in state_dict.items()}, strict=True, assign=True)
    for name, buf in model.named_buffers():
        value = buf.to_local() if hasattr(buf, "to_local") else buf
        _set_buffer(plain, name, value.to("cpu"))
    if getattr(hf.config, "tie_word_embeddings", False) and hasattr(unwrap(plain), "tie_weights"):
        unwrap(plain).tie_weights()
    return plain.eval()
