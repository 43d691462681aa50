"""What every trained role hands to its training engine: resume state, checkpoints, export."""

from __future__ import annotations


class TrainedRole:
    """Mixin for a role with ``self.engine`` (a :class:`~tether.engines.TrainingEngine`).

    Data parallel: every method here is called on every rank (the engine gathers under FSDP);
    ``save_pretrained`` and ``export`` take ``None`` on the ranks that do not write.
    """

    engine: object

    def last_lr(self) -> float:
        return self.engine.last_lr()

    def nonfinite(self) -> str | None:
        """The first weight holding NaN/Inf (checked before a checkpoint is written), or None."""
        return self.engine.nonfinite()

    def state_dict(self) -> dict:
        """Optimiser, schedule and guard state (for resume)."""
        return self.engine.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.engine.load_state_dict(state)

    def save_pretrained(self, directory, **kwargs) -> None:
        """A checkpoint: the model, or its LoRA adapters (and a scalar model's trained head) alone."""
        self.engine.save_pretrained(directory, **kwargs)

    def export(self, directory) -> None:
        """The run's final model (LoRA: merged, with the adapter in ``adapter/``)."""
        self.engine.export(directory)
