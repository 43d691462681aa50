"""What tether decides about one model, kept on the model itself: whether its passes pack their
rows (``model.padding_free`` and the packed-vs-padded check's verdict) and whether its trimmed last
layer matched the full one. One :class:`ModelState` per Hugging Face model object, so a verdict
lives and dies with the model it is about (no module-level table of models)."""

from __future__ import annotations

from dataclasses import dataclass

ATTRIBUTE = "tether_state"


@dataclass
class ModelState:
    """``padding_free``: the model's passes may pack (on until set); ``packing``: (packs, reason)
    once its check decided; ``last_layer``: its trimmed last layer matched the full one (None: not
    checked yet, False also when trimming is off)."""

    padding_free: bool = True
    packing: tuple[bool, str] | None = None
    last_layer: bool | None = None


def state_of(model) -> ModelState:
    """``model``'s state, made on first use (a plain attribute: not a parameter, buffer or submodule,
    so never saved or moved with the weights)."""
    state = model.__dict__.get(ATTRIBUTE)
    if state is None:
        state = ModelState()
        object.__setattr__(model, ATTRIBUTE, state)
    return state
