"""Parameter counts of a model built without its weights (on the meta device: shapes, no memory),
so a 70B model is counted in a second. Trained roles are counted as set up, LoRA included
(:func:`tether.plan.meta_models.set_up`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelShape:
    """A model's class name and parameter count."""

    architecture: str
    params: int


def shape_of(model) -> ModelShape:
    """The shape of a built model (on the meta device or not); tied weights are counted once."""
    return ModelShape(type(model).__name__, sum(p.numel() for p in model.parameters()))
