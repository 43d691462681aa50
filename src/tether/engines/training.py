"""How one trainable model runs: device, precision, optimiser, schedule, clipping, guard.

A :class:`TrainingEngine` owns a model and everything that updates it. Roles and stages never
call ``backward`` or ``step``: they hand :meth:`TrainingEngine.train_step` their micro-batches
and a loss function built from :mod:`tether.algos`, and read its stats. The same object runs the
actor, the critic and the SFT / reward-model stages' model, on any device.

Loss functions have the signature ``loss_fn(model, micro_batch) -> (loss, stats)``: ``loss`` is
the micro-batch's mean (a scalar tensor), ``stats`` a dict of floats. The engine weights each
micro-batch by its share of the batch (``weights``, e.g. its share of the tokens), so gradient
accumulation gives exactly the gradient of the whole batch's mean, and the stats come back as
the same weighted sums — except ``check/`` stats (diagnostics checked against a bound, such as
PPO's first-minibatch ratio deviation), which come back as their maximum over micro-batches.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence

import torch

from tether.engines.optim import NonFiniteGuard, OptimizerSpec, grad_norm, make_optimizer, make_scheduler
from tether.runtime import Precision
from tether.types import to_device

CHECK = "check/"
LossFn = Callable[[torch.nn.Module, object], "tuple[torch.Tensor, dict]"]


class TrainingEngine:
    """One model under training on one device (the data-parallel engines wrap the same API).

    ``model`` is moved to ``device``; its weights stay fp32 (master weights) whatever the
    precision, whose autocast the forward helpers apply (``engine.autocast``). fp16 adds a
    gradient scaler. ``compile`` is passed to the forward helpers (``torch.compile`` of the trunk).
    """

    def __init__(self, model: torch.nn.Module, spec: OptimizerSpec, device: torch.device | str = "cpu",
                 precision: Precision | str = "fp32", on_nonfinite: str = "stop", compile: bool | str = False):
        self.device = torch.device(device)
        self.precision = precision if isinstance(precision, Precision) else Precision(precision)
        self.model = model.to(self.device)
        self.spec = spec
        self.compile = compile
        self.optimizer = make_optimizer(self.model, spec.lr, spec.weight_decay, spec.betas, spec.eps, spec.fused,
                                        spec.groups)
        self.scheduler = make_scheduler(self.optimizer, spec.schedule, spec.warmup_steps, spec.total_steps,
                                        spec.min_lr_ratio)
        self.scaler = torch.amp.GradScaler(self.device.type) if self.precision.needs_scaler else None
        self.guard = NonFiniteGuard(on_nonfinite)

    @property
    def autocast(self) -> str:
        """The forward helpers' autocast mode: "none", "bf16" or "fp16"."""
        return self.precision.autocast

    @property
    def config(self):
        """The model's (Hugging Face) config: what a stage may record in the saved checkpoint."""
        return self.model.config

    # -- forward --------------------------------------------------------------------------------
    def infer(self, fn: Callable, *args):
        """``fn(model, *args)`` without gradients, its tensor arguments on this engine's device."""
        with torch.no_grad():
            return fn(self.model, *to_device(args, self.device))

    def to_device(self, batch):
        return to_device(batch, self.device)

    # -- one optimiser step ---------------------------------------------------------------------
    def train_step(self, micro_batches: Sequence, loss_fn: LossFn, weights: Sequence[float] | None = None,
                   name: str = "loss", where: int | str = "?") -> dict:
        """Zero, forward and backward every micro-batch, clip, step; returns the step's stats.

        Returns ``{"stats": weighted sums of the loss function's stats, "grad_norm": float or
        None (a non-finite loss skipped the step), "skipped_steps": int, "timing": seconds}``.
        A non-finite loss or gradient norm stops the run (``on_nonfinite=stop``, naming ``name``
        and ``where``) or skips this step (``skip``); the schedule advances either way.
        """
        weights = list(weights) if weights is not None else [1.0 / len(micro_batches)] * len(micro_batches)
        stats: dict[str, float] = {}
        timing = {"forward": 0.0, "backward": 0.0, "optimizer": 0.0}
        self.model.train()
        finite = True
        for mb, weight in zip(micro_batches, weights):
            t0 = time.perf_counter()
            loss, mb_stats = loss_fn(self.model, self.to_device(mb))
            timing["forward"] += time.perf_counter() - t0
            for key, value in mb_stats.items():
                if key.startswith(CHECK):  # a bound to check: the worst micro-batch, not a mean
                    stats[key] = max(stats.get(key, value), value)
                else:
                    stats[key] = stats.get(key, 0.0) + value * weight
            if not bool(torch.isfinite(loss.detach()).all()):
                finite = self.guard.ok(name, loss.detach(), where)  # raises unless on_nonfinite=skip
                break
            t0 = time.perf_counter()
            scaled = loss * weight
            (self.scaler.scale(scaled) if self.scaler is not None else scaled).backward()
            timing["backward"] += time.perf_counter() - t0
        t0 = time.perf_counter()
        norm = None
        if finite:
            if self.scaler is not None:
                self.scaler.unscale_(self.optimizer)
            norm = grad_norm(self.model, self.spec.max_grad_norm)
            if self.scaler is not None:
                # fp16: an overflow is the scaler's business (it skips the step and lowers the scale).
                self.scaler.step(self.optimizer)
                self.scaler.update()
            elif self.guard.ok(f"gradient norm of the {name}", torch.tensor(norm), where):
                self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        timing["optimizer"] += time.perf_counter() - t0
        return {"stats": stats, "grad_norm": norm, "skipped_steps": self.guard.skipped, "timing": timing}

    def last_lr(self) -> float:
        return self.scheduler.get_last_lr()[0]

    # -- weights and state ----------------------------------------------------------------------
    def named_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        """(name, tensor) of every weight, as ``state_dict`` names them (for weight sync)."""
        yield from self.model.state_dict().items()

    def state_dict(self) -> dict:
        """Optimiser, schedule, scaler and guard state (the weights are saved by :meth:`save_pretrained`)."""
        return {"optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict(),
                "scaler": None if self.scaler is None else self.scaler.state_dict(), "skipped_steps": self.guard.skipped}

    def load_state_dict(self, state: dict) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        if self.scaler is not None and state.get("scaler") is not None:
            self.scaler.load_state_dict(state["scaler"])
        self.guard.skipped = state.get("skipped_steps", 0)

    def save_pretrained(self, directory, **kwargs) -> None:
        """What a checkpoint keeps: the model, or a LoRA model's adapters alone."""
        self.model.save_pretrained(directory, **kwargs)

    def export(self, directory) -> None:
        """A run's final model: a LoRA model merged into a plain checkpoint, its adapter in
        ``adapter/`` (the adapters are merged for good: call it last); otherwise :meth:`save_pretrained`."""
        from tether.models.lora import is_peft, save_merged

        if hasattr(self.model, "export"):
            self.model.export(directory)
        elif is_peft(self.model):
            save_merged(self.model, directory)
            self.model = self.model.get_base_model()
        else:
            self.save_pretrained(directory)
