"""What a training engine updates a model with: AdamW, the LR schedule, gradient clipping and
the non-finite guard. Plain torch and transformers' schedules; no state beyond their own."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from tether.common.errors import TrainingError


@dataclass(frozen=True)
class OptimizerSpec:
    """AdamW and its schedule for one model. ``groups``: optional (submodule name, lr) pairs
    that take a learning rate of their own (the shared-trunk value head)."""

    lr: float
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    fused: bool = False
    schedule: str = "constant"  # cosine | linear | constant, after a linear warm-up
    warmup_steps: int = 0
    total_steps: int = 1
    min_lr_ratio: float = 1.0
    max_grad_norm: float | None = 1.0
    groups: tuple[tuple[str, float], ...] = ()

    @classmethod
    def from_block(cls, block, total_steps: int, fused: bool = False,
                   groups: tuple[tuple[str, float], ...] = ()) -> "OptimizerSpec":
        """The spec of a config's optimiser block (:class:`tether.config.common.OptimizerConfig`:
        every trained model's) over ``total_steps`` optimiser steps."""
        return cls(lr=block.lr, weight_decay=block.weight_decay, betas=(block.beta1, block.beta2), eps=block.eps,
                   fused=fused, schedule=block.schedule, warmup_steps=block.warmup_steps, total_steps=total_steps,
                   min_lr_ratio=block.min_lr_ratio, max_grad_norm=block.max_grad_norm, groups=groups)


def make_optimizer(model, lr: float, weight_decay: float = 0.0, betas=(0.9, 0.999), eps=1e-8, fused: bool = False,
                   groups: tuple[tuple[str, float], ...] = ()):
    """AdamW over ``model``'s trainable parameters; ``fused`` uses the one-pass kernel (same update
    up to rounding) where torch has it. Each ``(name, lr)`` of ``groups`` puts the submodule
    ``name``'s parameters in a group of their own at that learning rate."""
    own = {name: getattr(model, name) for name, _ in groups}
    taken = {id(p) for module in own.values() for p in module.parameters()}
    rest = [p for p in model.parameters() if p.requires_grad and id(p) not in taken]
    param_groups = [{"params": rest, "lr": lr}]
    for name, group_lr in groups:
        param_groups.append({"params": [p for p in own[name].parameters() if p.requires_grad], "lr": group_lr})
    params = [p for g in param_groups for p in g["params"]]
    fused = fused and all(p.is_floating_point() for p in params) and bool(params)
    if len(param_groups) == 1:
        param_groups = rest
    return torch.optim.AdamW(param_groups, lr=lr, weight_decay=weight_decay, betas=betas, eps=eps, fused=fused or None)


def make_scheduler(optimizer, schedule: str, warmup_steps: int, total_steps: int, min_lr_ratio: float):
    """transformers' schedulers: linear warm-up, then cosine-to-min / linear-to-0 / constant."""
    from transformers import get_scheduler

    if schedule == "cosine":
        return get_scheduler(
            "cosine_with_min_lr",
            optimizer,
            num_warmup_steps=warmup_steps,
            num_training_steps=max(total_steps, 1),
            scheduler_specific_kwargs={"min_lr_rate": min_lr_ratio},
        )
    name = {"linear": "linear", "constant": "constant_with_warmup"}[schedule]
    return get_scheduler(name, optimizer, num_warmup_steps=warmup_steps, num_training_steps=max(total_steps, 1))


class NonFiniteGuard:
    """NaN/Inf in a loss or gradient: stop with a message naming it, or skip the step."""

    def __init__(self, mode: str = "stop"):
        self.mode = mode
        self.skipped = 0

    def ok(self, name: str, value: torch.Tensor, step: int | str) -> bool:
        if torch.isfinite(value).all():
            return True
        if self.mode == "skip":
            self.skipped += 1
            return False
        raise TrainingError(
            f"Non-finite {name} at step {step}. Lower the learning rate, check the data, or set "
            "run.on_nonfinite=skip to skip such steps; no checkpoint was written from this state."
        )


def grad_norm(parameters, max_norm: float | None) -> float:
    """Global gradient norm of ``parameters`` (a module or an iterable), clipped to ``max_norm``
    when given; a non-finite norm is returned as is."""
    if isinstance(parameters, torch.nn.Module):
        parameters = parameters.parameters()
    params = [p for p in parameters if p.grad is not None]
    if not params:
        return 0.0
    grads = [p.grad for p in params]
    total = torch.nn.utils.get_total_norm(grads)
    if hasattr(total, "full_tensor"):  # FSDP: sharded gradients give a partial (DTensor) norm
        total = total.full_tensor()
    # clip_grad_norm_ multiplies by min(1, coef) always; skipping the multiply by exactly 1 saves a
    # pass over every gradient and changes nothing.
    if max_norm and not float(max_norm / (total + 1e-6)) >= 1.0:
        torch.nn.utils.clip_grads_with_norm_(params, max_norm, total)
    return float(total)
