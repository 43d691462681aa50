"""Several objectives in one score: ``reward.terms`` as named objectives, combined by fixed weights,
after a per-term standardisation (``normalize``), or as cost constraints (``limit``) bound by
Lagrange multipliers (Safe RLHF). The state (each normalised term's running moments, each
constraint's multiplier) is part of the run's checkpoint, so a resumed run scores as the
uninterrupted one (docs/judges.md, "Several objectives").

Per batch, with term scores ``x`` (B, T):

1. each ``normalize`` term's running moments take the batch, then ``x_t <- (x_t - mean_t) / std_t``
   (the moments of every batch so far, this one included: :class:`tether.algos.RunningMoments`);
2. ``r = sum_t weight_t x_t`` over the terms without a limit (:func:`tether.algos.reward_terms.combine_terms`);
3. with costs ``c`` (the limited terms, raw) and multipliers ``lambda``:
   ``score = (r - c @ lambda) / (1 + sum lambda)`` (:func:`tether.algos.constraints.constrained_score`),
   then each multiplier takes one projected dual-ascent step on this batch's violation
   ``mean(c_k) - limit_k`` for the next batch (:func:`tether.algos.constraints.dual_ascent`).

Without normalised or limited terms the score is ``combine_terms(x, weights)`` exactly as before.
"""

from __future__ import annotations

import torch
from torch import Tensor

from tether.algos import RunningMoments
from tether.algos.constraints import constrained_score, dual_ascent, violation
from tether.algos.reward_terms import combine_terms
from tether.common.errors import ConfigError
from tether.loops.common import notice


class RewardObjectives:
    """The score of per-term scores, and its state (see the module). ``terms``: ``reward.terms``
    (empty for a single source: the one column is the score)."""

    def __init__(self, terms: list):
        self.names = [t.name for t in terms] or ["score"]
        self.weights = [t.weight for t in terms] or [1.0]
        self.normalized = [i for i, t in enumerate(terms) if t.normalize]
        self.moments = {self.names[i]: RunningMoments() for i in self.normalized}
        self.objectives = [i for i, t in enumerate(terms) if t.limit is None] or [0]
        self.costs = [i for i, t in enumerate(terms) if t.limit is not None]
        self.limits = torch.tensor([terms[i].limit for i in self.costs], dtype=torch.float64)
        self.lr = [terms[i].multiplier_lr for i in self.costs]
        self.max = [terms[i].multiplier_max for i in self.costs]
        self.multipliers = torch.tensor([terms[i].multiplier_init for i in self.costs], dtype=torch.float64)
        self.capped: set[int] = set()  # the constraints whose multiplier reached its cap (said once)

    @property
    def plain(self) -> bool:
        """A fixed-weight sum of every term: the score is :func:`combine_terms` of the raw scores."""
        return not self.normalized and not self.costs

    def __call__(self, per_term: Tensor) -> tuple[Tensor, dict[str, float]]:
        """(B, T) raw term scores -> ((B,) score in float32, the batch's objective and constraint
        stats); the state moves on by this batch (moments, then multipliers)."""
        if self.plain:
            return combine_terms(per_term, self.weights), {}
        x = per_term.float().clone()
        stats = {}
        for i in self.normalized:
            name = self.names[i]
            moments = self.moments[name]
            moments.update(x[:, i])
            x[:, i] = (x[:, i] - moments.mean) / max(moments.std, 1e-6)
            stats[f"objective/{name}/mean"], stats[f"objective/{name}/std"] = moments.mean, moments.std
        for i in self.objectives:
            stats[f"objective/{self.names[i]}"] = float(x[:, i].mean())
        reward = combine_terms(x[:, self.objectives], [self.weights[i] for i in self.objectives])
        if not self.costs:
            return reward, stats
        costs = x[:, self.costs].double()
        lam = self.multipliers
        score = constrained_score(reward.double(), costs, lam).float()
        means = costs.mean(0)
        broken = violation(means, self.limits)
        stepped = []
        for k, i in enumerate(self.costs):
            name = self.names[i]
            stats[f"objective/{name}"] = float(means[k])
            stats[f"constraint/{name}/multiplier"] = float(lam[k])
            stats[f"constraint/{name}/violation"] = float(broken[k])
            stepped.append(dual_ascent(lam[k:k + 1], means[k:k + 1], self.limits[k:k + 1], self.lr[k], self.max[k]))
            if stepped[-1][0] >= self.max[k] and i not in self.capped:  # said once per run
                self.capped.add(i)
                notice(f"constraint {name}: its multiplier reached multiplier_max={self.max[k]:g} with the batch's "
                       f"mean cost {float(means[k]):.4g} above its limit {float(self.limits[k]):g}; the limit may not "
                       "be reachable at this KL penalty (constraint/<name>/violation stays > 0).")
        self.multipliers = torch.cat(stepped)  # the next batch's
        return score, stats

    def state_dict(self) -> dict:
        return {"moments": {name: m.state_dict() for name, m in self.moments.items()},
                "multipliers": self.multipliers.tolist()}

    def load_state_dict(self, state: dict) -> None:
        """A checkpoint's state; one saved for other normalised or limited terms is refused (it
        would resume another objective)."""
        saved = (sorted(state.get("moments", {})), len(state.get("multipliers", [])))
        if saved != (sorted(self.moments), len(self.costs)):
            raise ConfigError(f"The checkpoint's reward objectives (normalised terms {saved[0]}, {saved[1]} "
                              f"constraints) are not this config's (normalised terms {sorted(self.moments)}, "
                              f"{len(self.costs)} constraints): reward.terms' normalize or limit changed since it was "
                              "saved; resume with the run's own config.")
        for name, moments in state["moments"].items():
            self.moments[name].load_state_dict(moments)
        self.multipliers = torch.tensor(state["multipliers"], dtype=torch.float64)
