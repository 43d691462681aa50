"""How a frozen model runs: on a device, at a precision, without gradients (the reference, the
reward model, and the policies `tether eval` and the demo measure)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch

from tether.common.runtime import Precision
from tether.types import to_device


class InferenceEngine:
    """A frozen model: eval mode, no gradients, on ``device``; the same forward API as
    :class:`~tether.engines.training.TrainingEngine` (``infer``, ``autocast``, ``named_weights``)."""

    def __init__(self, model: torch.nn.Module, device: torch.device | str = "cpu",
                 precision: Precision | str = "fp32", compile: bool | str = False):
        self.device = torch.device(device)
        self.precision = precision if isinstance(precision, Precision) else Precision(precision)
        self.model = model.to(self.device).eval().requires_grad_(False)
        self.compile = compile

    @property
    def autocast(self) -> str:
        return self.precision.autocast

    def infer(self, fn: Callable, *args):
        """``fn(model, *args)`` without gradients, its tensor arguments on this engine's device."""
        with torch.no_grad():
            return fn(self.model, *to_device(args, self.device))

    def to_device(self, batch):
        return to_device(batch, self.device)

    def named_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        yield from self.model.state_dict().items()

    def save_pretrained(self, directory, **kwargs) -> None:
        self.model.save_pretrained(directory, **kwargs)


class AdapterOffEngine:
    """A LoRA model's base, adapters switched off, as a frozen engine on the same weights: PPO's
    reference when the actor trains adapters (one copy of the base serves both roles).

    ``engine`` runs the LoRA model (``peft_model`` inside it: the engine's model, or the policy of
    a shared-trunk wrapper); calls run under :meth:`peft.PeftModel.disable_adapter`. Not for use
    while the same model trains in another thread.
    """

    def __init__(self, engine, peft_model):
        self.engine = engine
        self.peft_model = peft_model

    @property
    def device(self):
        return self.engine.device

    @property
    def precision(self):
        return self.engine.precision

    @property
    def autocast(self) -> str:
        return self.engine.autocast

    @property
    def model(self):
        return self.peft_model

    def infer(self, fn: Callable, *args):
        with self.peft_model.disable_adapter():
            return self.engine.infer(lambda _module, *a: fn(self.peft_model, *a), *args)

    def to_device(self, batch):
        return self.engine.to_device(batch)
