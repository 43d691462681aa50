"""The model a supervised stage trains, as a role: SFT's and DPO's policy, the reward model.

The stage's loop (:mod:`tether.loops.stage`) holds a proxy to it through a placement, exactly as
the RL loop holds the actor: it sends the row indices of each batch and reads the step's stats;
the role owns the data it trains on, its loss and its evaluation, built where it runs (this
process, or a Ray worker that rebuilt them from the config). Every call here goes to every
worker of the role's group (no method is split by rows): the training engine splits each
micro-batch over the group's data-parallel ranks itself.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from tether.roles.trained import TrainedRole


class SupervisedModel(TrainedRole):
    """A trained model with its stage's loss over training rows.

    ``loss(module, rows) -> (loss, stats)``: the mean loss of a micro-batch of row indices (a
    tensor) and float stats; ``weight_of(row)``: the row's share of a batch (its response tokens
    for SFT, 1 for a pair); ``evaluate() -> dict``: the held-out metrics (None: no held-out data);
    ``before_step(rows)``: called with each batch's rows before its micro-batches, for what the loss
    needs of the whole batch (KTO's reference point).
    """

    def __init__(self, engine, loss: Callable, evaluate: Callable[[], dict] | None = None,
                 weight_of: Callable[[int], float] = lambda row: 1.0, name: str = "loss",
                 before_step: Callable[[list[int]], None] | None = None):
        self.engine = engine
        self.loss = loss
        self._evaluate = evaluate
        self.weight_of = weight_of
        self.name = name
        self.before_step = before_step

    def update(self, rows: list[int], micro: int | list[list[int]], step: int) -> dict:
        """One optimiser step on the batch ``rows`` (training row indices), in micro-batches
        weighted by their share of the batch; the engine's step result (``stats`` summed over
        micro-batches, ``grad_norm``, ``skipped_steps``, ``timing``).

        ``micro``: rows per micro-batch (consecutive slices of ``rows``), or the micro-batches
        themselves (lists of row indices that together hold ``rows``, e.g. binned by tokens).
        """
        if isinstance(micro, int):
            chunks = [rows[lo : lo + micro] for lo in range(0, len(rows), micro)]
        else:
            chunks = [list(chunk) for chunk in micro]
            if sorted(r for chunk in chunks for r in chunk) != sorted(rows):
                raise ValueError(f"micro-batches {chunks} do not hold the batch's rows {rows} once each")
        if self.before_step is not None:
            self.before_step(rows)
        return self.engine.train_step(chunks, self.loss, lambda chunk: sum(self.weight_of(r) for r in chunk),
                                      self.name, step)

    def evaluate(self) -> dict:
        """The held-out metrics ({} without held-out data)."""
        return self._evaluate() if self._evaluate is not None else {}

    def set_score_offset(self, value: float) -> None:
        """A scalar model's normalisation offset, saved in its config (the reward model's gauge)."""
        self.engine.config.score_offset = float(value)


@dataclass
class StageRoles:
    """A supervised stage's roles as built where they run (``placed()`` as a placement serves
    them), and each model's context length by name (none to check here: the data was fitted)."""

    roles: dict[str, object]
    contexts: dict[str, int | None] = field(default_factory=dict)

    def placed(self) -> dict[str, object]:
        return dict(self.roles)
