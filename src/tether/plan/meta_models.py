"""The models of a run as the run loads and sets them up, on the meta device: the dry run's
model checks.

Each model goes through the run's own loader (:mod:`tether.models.loading` with ``meta=True``:
transformers reads the checkpoint's config and weight names, not its weights) and a trained one
through the run's own set-up (:func:`tether.models.lora.trainable`: LoRA adapters, gradient
checkpointing). So the dry run stops on the same bad checkpoint or setting with the run's message:
a scalar-head checkpoint given as a policy, a checkpoint lacking weights, a reward model without
a trained head, LoRA names that match no module, a model that cannot checkpoint its activations.
"""

from __future__ import annotations

import contextlib
import warnings


@contextlib.contextmanager
def _quiet():
    """torch warns that copying a LoRA adapter's tensors (``lora.adapter``) into meta parameters
    does nothing: on the meta device that is the point."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*non-meta parameter.*")
        yield


def causal_lm(path: str, key: str, cfg, tokenizer):
    """A policy or reference as the run loads it (:func:`~tether.models.loading.load_causal_lm`)."""
    from tether.models.loading import load_causal_lm

    return load_causal_lm(path, tokenizer, cfg.model.dtype, trust_remote_code=cfg.model.trust_remote_code, key=key,
                          meta=True, attn_implementation=cfg.model.attn_implementation)


def scalar_model(path: str, key: str, cfg, tokenizer, new_head: bool = False, head_init_std: float | None = None):
    """A reward model or critic as the run loads it (:func:`~tether.models.loading.load_scalar_model`)."""
    from tether.models.loading import load_scalar_model

    return load_scalar_model(path, tokenizer, cfg.model.dtype, head_init_std=head_init_std,
                             trust_remote_code=cfg.model.trust_remote_code, new_head=new_head, key=key, meta=True,
                             attn_implementation=cfg.model.attn_implementation)


def set_up(model, lora, checkpointing: bool, scalar: bool, key: str):
    """A trained model's set-up as the run does it (LoRA, gradient checkpointing); ``model`` is
    changed in place (adapters injected), so take its shape first. Returns its frozen and trained
    parameters as set up (exact: an adapter's own r and targets, ``modules_to_save`` copies)."""
    from tether.models.lora import trainable
    from tether.plan.memory import RoleSize

    with _quiet():
        model = trainable(model, lora, None, checkpointing, scalar, key)
    params = list(model.parameters())
    trained = sum(p.numel() for p in params if p.requires_grad)
    return RoleSize(frozen=sum(p.numel() for p in params) - trained, trained=trained)


def supervised(cfg, tokenizer, scalar: bool, reference: bool):
    """The trained model of a supervised stage (a scalar-head model when ``scalar``: the reward
    model), checked as the run loads and sets it up, and the stage's separate ``reference`` when it
    has one; returns the trained model's :class:`~tether.plan.params.ModelShape` and its
    :class:`~tether.plan.memory.RoleSize`."""
    from tether.plan.params import shape_of

    path, key = cfg.model.name_or_path, "model.name_or_path"
    model = (scalar_model(path, key, cfg, tokenizer, new_head=True, head_init_std=cfg.head_init_std) if scalar
             else causal_lm(path, key, cfg, tokenizer))
    shape = shape_of(model)
    size = set_up(model, cfg.lora, cfg.gradient_checkpointing, scalar, "lora")
    if reference and cfg.reference:
        causal_lm(cfg.reference, "reference", cfg, tokenizer)
    return shape, size
