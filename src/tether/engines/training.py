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

Data parallel (``strategy`` ddp or fsdp, under torchrun): every rank is handed the same global
micro-batches and trains on its own contiguous slice of each; the weights are each slice's share
of the global batch (``weights`` as a function of a micro-batch, e.g. its response tokens), the
loss is scaled by the world size because DDP and FSDP average gradients over ranks, and the
stats are summed over ranks (``check/``: the maximum): the step is the one-process step.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence

import torch

from tether.distributed.collectives import all_reduce
from tether.distributed.shard import rank_slice, take
from tether.distributed.wrap import Wrapped
from tether.engines.optim import NonFiniteGuard, OptimizerSpec, grad_norm, make_optimizer, make_scheduler
from tether.common.runtime import Precision, is_main, world_size
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
                 precision: Precision | str = "fp32", on_nonfinite: str = "stop", compile: bool | str = False,
                 strategy: str | None = None):
        self.device = torch.device(device)
        self.precision = precision if isinstance(precision, Precision) else Precision(precision)
        self.model = model.to(self.device)
        # DDP or FSDP2 when torch.distributed runs (FSDP shards the parameters before the optimiser sees them).
        self.wrapped = Wrapped(self.model, strategy, self.device, self.precision)
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
    @property
    def strategy(self) -> str | None:
        """"ddp", "fsdp", or None (one process)."""
        return self.wrapped.strategy

    def infer(self, fn: Callable, *args):
        """``fn(model, *args)`` without gradients, its tensor arguments on this engine's device.
        Under FSDP a collective (the weights are gathered for the call): every rank calls it."""
        with torch.no_grad(), self.wrapped.gathered():
            return fn(self.model, *to_device(args, self.device))

    def gathered(self):
        """A context in which the model holds all its weights on every rank (FSDP; else a no-op)."""
        return self.wrapped.gathered()

    def to_device(self, batch):
        return to_device(batch, self.device)

    # -- one optimiser step ---------------------------------------------------------------------
    def train_step(self, micro_batches: Sequence, loss_fn: LossFn, weights=None,
                   name: str = "loss", where: int | str = "?") -> dict:
        """Zero, forward and backward every micro-batch, clip, step; returns the step's stats.

        ``weights``: each micro-batch's share of the batch (a list), or a function giving a
        micro-batch's size (e.g. its response tokens; data parallel needs a function, as each rank
        weighs its own slice); None = equal shares.
        Returns ``{"stats": weighted sums of the loss function's stats, "grad_norm": float or
        None (a non-finite loss skipped the step), "skipped_steps": int, "timing": seconds}``.
        A non-finite loss or gradient norm stops the run (``on_nonfinite=stop``, naming ``name``
        and ``where``) or skips this step (``skip``); the schedule advances either way.
        """
        parts, shares = self._shares(micro_batches, weights)
        scale = float(world_size()) if self.strategy else 1.0  # DDP and FSDP average gradients over ranks
        stats: dict[str, float] = {}
        timing = {"forward": 0.0, "backward": 0.0, "optimizer": 0.0}
        self.model.train()
        finite = True
        for i, (mb, weight) in enumerate(zip(parts, shares)):
            last = i == len(parts) - 1
            with self.wrapped.no_sync(last):
                t0 = time.perf_counter()
                loss, mb_stats = self.wrapped(loss_fn, self.to_device(mb))
                timing["forward"] += time.perf_counter() - t0
                for key, value in mb_stats.items():
                    if key.startswith(CHECK):  # a bound to check: the worst micro-batch, not a mean
                        stats[key] = max(stats.get(key, value), value)
                    else:
                        stats[key] = stats.get(key, 0.0) + value * weight
                value = loss.detach()
                if self.strategy:  # every rank must agree, or the others would wait in the backward
                    ok = all_reduce(float(bool(torch.isfinite(value).all())), "min") == 1.0
                    value = value if ok else torch.tensor(float("nan"))
                if not bool(torch.isfinite(value).all()):
                    finite = self.guard.ok(name, value, where)  # raises unless on_nonfinite=skip
                    if self.strategy == "ddp" and last:  # DDP expects the backward of a synced forward
                        (torch.nan_to_num(loss) * 0.0).backward()
                    break
                t0 = time.perf_counter()
                scaled = loss * (weight * scale)
                (self.scaler.scale(scaled) if self.scaler is not None else scaled).backward()
                timing["backward"] += time.perf_counter() - t0
        if self.strategy:
            stats = reduce_stats(stats)
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

    def _shares(self, micro_batches: Sequence, weights) -> tuple[list, list[float]]:
        """(what this rank trains on, each part's share of the global batch)."""
        n = len(micro_batches)
        if not self.strategy:
            if callable(weights):
                sizes = [float(weights(mb)) for mb in micro_batches]
                total = sum(sizes)
                return list(micro_batches), [s / total for s in sizes] if total else [1.0 / n] * n
            return list(micro_batches), list(weights) if weights is not None else [1.0 / n] * n
        if weights is not None and not callable(weights):
            raise ValueError("data-parallel train_step needs weights as a function of a micro-batch")
        size = weights if callable(weights) else len
        total = sum(float(size(mb)) for mb in micro_batches)
        parts, shares = [], []
        for mb in micro_batches:
            rows = rank_slice(len(mb))
            if rows.start < rows.stop:
                part = take(mb, rows)
                share = float(size(part)) / total if total else (rows.stop - rows.start) / len(mb) / n
            else:  # fewer rows than ranks (an epoch's last batch): a stand-in row that weighs nothing,
                part, share = take(mb, slice(len(mb) - 1, len(mb))), 0.0  # so DDP/FSDP still see a backward
            parts.append(part)
            shares.append(share)
        return parts, shares

    def last_lr(self) -> float:
        return self.scheduler.get_last_lr()[0]

    # -- weights and state ----------------------------------------------------------------------
    def named_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        """(name, tensor) of every weight, as ``state_dict`` names them, whole (for weight sync).
        Under FSDP each tensor is gathered as it is read: a collective, so every rank reads them
        all, in the same order."""
        for name, tensor in self.model.state_dict().items():
            yield name, tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor

    def nonfinite(self) -> str | None:
        """The name of the first weight holding NaN/Inf on this rank (its shards under FSDP), or None."""
        return first_nonfinite(self.model.state_dict().items())

    def state_dict(self) -> dict:
        """Optimiser, schedule, scaler and guard state (the weights are saved by :meth:`save_pretrained`).

        The optimiser's state is keyed by parameter name and whole (gathered under FSDP: a
        collective, and only rank 0's copy is complete), so any strategy and world size can load it."""
        return {"optimizer": self.wrapped.optimizer_state(self.optimizer), "scheduler": self.scheduler.state_dict(),
                "scaler": None if self.scaler is None else self.scaler.state_dict(), "skipped_steps": self.guard.skipped}

    def load_state_dict(self, state: dict) -> None:
        optimizer = state["optimizer"]
        if any(isinstance(k, int) for k in optimizer.get("state", {})):  # a checkpoint of tether <= 0.x: by index
            self.optimizer.load_state_dict(optimizer)
        else:
            self.wrapped.load_optimizer_state(self.optimizer, optimizer)
        self.scheduler.load_state_dict(state["scheduler"])
        if self.scaler is not None and state.get("scaler") is not None:
            self.scaler.load_state_dict(state["scaler"])
        self.guard.skipped = state.get("skipped_steps", 0)

    def save_pretrained(self, directory, **kwargs) -> None:
        """What a checkpoint keeps: the model, or a LoRA model's adapters alone. Data parallel:
        call on every rank (FSDP gathers the weights); rank 0 writes, the others pass None."""
        full = self.wrapped.full_state_dict() if self.wrapped.sharded else None
        if directory is None or not is_main():
            return
        if full is not None:
            kwargs["state_dict"] = full
        self.model.save_pretrained(directory, **kwargs)

    def export(self, directory) -> None:
        """A run's final model: a LoRA model merged into a plain checkpoint, its adapter in
        ``adapter/`` (the adapters are merged for good: call it last); otherwise :meth:`save_pretrained`.
        Data parallel: call on every rank; rank 0 writes."""
        from tether.models.lora import is_peft, save_merged

        if self.wrapped.sharded:
            full = self.wrapped.full_state_dict()
            if directory is not None and is_main():
                export_plain(self.model, full, directory)
            return
        if directory is None or not is_main():
            return
        if hasattr(self.model, "export"):
            self.model.export(directory)
        elif is_peft(self.model):
            save_merged(self.model, directory)
            self.model = self.model.get_base_model()
        else:
            self.save_pretrained(directory)


def first_nonfinite(named) -> str | None:
    """The first name of (name, tensor) pairs whose tensor (a DTensor's local shard) is not all finite."""
    for name, tensor in named:
        local = tensor.to_local() if hasattr(tensor, "to_local") else tensor
        if local.is_floating_point() and not bool(torch.isfinite(local).all()):
            return name
    return None


def reduce_stats(stats: dict[str, float]) -> dict[str, float]:
    """Per-rank weighted sums summed over ranks (``check/`` stats: their maximum)."""
    keys = sorted(stats)
    sums = [k for k in keys if not k.startswith(CHECK)]
    maxes = [k for k in keys if k.startswith(CHECK)]
    out = dict(zip(sums, all_reduce([stats[k] for k in sums], "sum"))) if sums else {}
    if maxes:
        out.update(zip(maxes, all_reduce([stats[k] for k in maxes], "max")))
    return out


def export_plain(model: torch.nn.Module, full: dict, directory) -> None:
    """Write the final form of a sharded model from its gathered weights ``full`` (rank 0)."""
    from tether.distributed.export import rebuild_plain
    from tether.models.lora import is_peft, save_merged

    policy = getattr(model, "policy", None)  # a value-head wrapper exports its LM alone
    if policy is not None:
        model, full = policy, {k.removeprefix("policy."): v for k, v in full.items() if k.startswith("policy.")}
    plain = rebuild_plain(model, full)
    save_merged(plain, directory) if is_peft(plain) else plain.save_pretrained(directory)
