"""A trained model under a data-parallel strategy, behind one interface the training engine uses.

- ``ddp``: :class:`torch.nn.parallel.DistributedDataParallel`. Every rank holds the whole model
  and optimiser; gradients are averaged in the backward of the last micro-batch (``no_sync`` on
  the others).
- ``fsdp``: PyTorch's FSDP2 (:func:`torch.distributed.fsdp.fully_shard`) on every decoder layer and
  on the rest of the model: each rank holds 1/N of the weights, gradients and optimiser state;
  a layer's weights are all-gathered for its forward and backward and resharded after; the
  gradients are reduce-scattered every micro-batch. Under bf16/fp16 the layers compute in that
  dtype (``MixedPrecisionPolicy``), gradients reduce in fp32, and the embeddings and heads
  stay fp32 (as tether's one-process autocast keeps them).

The loss functions call into the model's parts (trunk, then the head on chosen positions), not
its ``forward``; :class:`Call` makes such a call the wrapper's forward so DDP's and FSDP's hooks
run around it. In one process :class:`Call` is all there is.
"""

from __future__ import annotations

import contextlib

import torch

from tether.distributed.collectives import active

STRATEGIES = ("ddp", "fsdp")


class Call(torch.nn.Module):
    """``wrapper(fn, *args)`` runs ``fn(module, *args)`` as this module's forward."""

    def __init__(self, module: torch.nn.Module):
        super().__init__()
        self.module = module

    def forward(self, fn, *args):
        return fn(self.module, *args)


def decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The repeated blocks of ``model`` FSDP shards one by one: the classes Hugging Face models
    list in ``_no_split_modules``, else the children of the longest ``ModuleList``."""
    names = set()
    for module in model.modules():
        names.update(getattr(module, "_no_split_modules", None) or ())
    layers = [m for m in model.modules() if type(m).__name__ in names]
    if layers:
        return layers
    lists = [m for m in model.modules() if isinstance(m, torch.nn.ModuleList)]
    return list(max(lists, key=len)) if lists else []


class Wrapped:
    """``model`` as ``strategy`` runs it (``None`` or one process: as is)."""

    def __init__(self, model: torch.nn.Module, strategy: str | None, device: torch.device, precision=None):
        self.model = model
        self.strategy = strategy if active() else None
        self._gathered = 0
        if self.strategy is None:
            self.root = Call(model)
        elif self.strategy == "ddp":
            from torch.nn.parallel import DistributedDataParallel

            ids = [device.index if device.index is not None else torch.cuda.current_device()] if device.type == "cuda" else None
            self.root = DistributedDataParallel(Call(model), device_ids=ids, forward_sync_buffers=False)
        elif self.strategy == "fsdp":
            from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

            dtype = getattr(precision, "dtype", None)
            layer_policy = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32 if dtype else None,
                                                cast_forward_inputs=False)
            for layer in decoder_layers(model):
                fully_shard(layer, mp_policy=layer_policy)
            self.root = fully_shard(Call(model), mp_policy=MixedPrecisionPolicy(cast_forward_inputs=False))
            self.root(lambda module: None)  # FSDP's lazy init, so that direct calls into the model work
            self.root.reshard()  # the root keeps its weights whole after a forward: shard them before the optimiser
        else:
            raise ValueError(f"unknown strategy {strategy!r}: expected one of {STRATEGIES}")

    @property
    def sharded(self) -> bool:
        return self.strategy == "fsdp"

    def __call__(self, fn, *args):
        return self.root(fn, *args)

    def no_sync(self, last: bool):
        """DDP: skip the gradient all-reduce on all but the last micro-batch of a step."""
        if self.strategy == "ddp" and not last:
            return self.root.no_sync()
        return contextlib.nullcontext()

    @contextlib.contextmanager
    def gathered(self):
        """Every weight whole on every rank for the duration (FSDP: all-gathered once, kept
        until the end), so the model can be called directly any number of times on each rank —
        sampling, whose step count differs between ranks. Nothing to do for DDP or one process."""
        if not self.sharded or self._gathered:
            self._gathered += 1
            try:
                yield
            finally:
                self._gathered -= 1
            return
        from torch.distributed.fsdp import FSDPModule

        modules = [m for m in self.root.modules() if isinstance(m, FSDPModule)]
        for m in modules:
            m.set_reshard_after_forward(False, recurse=False)
            m.unshard()
        self._gathered = 1
        try:
            yield
        finally:
            self._gathered = 0
            for m in modules:
                m.reshard()
                m.set_reshard_after_forward(True, recurse=False)

    def full_state_dict(self) -> dict:
        """The whole model's weights by name, on the CPU on rank 0 (a collective under FSDP: call on
        every rank; other ranks get ``{}``). DDP and one process: the model's own state dict."""
        if not self.sharded:
            return self.model.state_dict()
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        full = get_model_state_dict(self.root, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        return {k.removeprefix("module."): v for k, v in full.items()}

    def optimizer_state(self, optimizer) -> dict:
        """The optimiser's state keyed by parameter name, whole (a collective under FSDP; every rank
        but 0 gets ``{}`` then): the same format for every strategy and world size."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

        options = StateDictOptions(full_state_dict=True, cpu_offload=self.sharded)
        return get_optimizer_state_dict(self.model, optimizer, options=options)

    def load_optimizer_state(self, optimizer, state: dict) -> None:
        """Load :meth:`optimizer_state`'s format (every rank passes the whole dict)."""
        import copy

        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

        # The optimiser would otherwise keep (and update) the given dict's tensors, unlike load_state_dict.
        set_optimizer_state_dict(self.model, optimizer, copy.deepcopy(state),
                                 options=StateDictOptions(full_state_dict=True))

