"""A composed reward (``reward.terms``) and its built-in terms.

:class:`ComposedReward` holds named, weighted reward sources (any of :mod:`tether.roles.reward`'s,
a :class:`~tether.roles.remote_reward.RemoteReward`, or a built-in here). ``score_terms`` gives
every term's raw score, ``score`` their weighted sum; both are split by rows like any
``score``, so every placement runs them on its share of the rollout.
"""

from __future__ import annotations

import re

import torch
from torch import Tensor

from tether.algos.reward_terms import combine_terms, length_penalty
from tether.common.dispatch import rows
from tether.roles.reward import OneTerm, RewardSource
from tether.types import Rollout


class LengthPenaltyReward(OneTerm):
    """``-coef * max(0, response tokens - target)``; tokens as the response mask counts them (EOS included)."""

    def __init__(self, coef: float, target: int):
        self.coef, self.target = coef, target
        self.name = f"length_penalty({coef:g}, {target})"

    @rows
    def score(self, rollout: Rollout) -> Tensor:
        return length_penalty(rollout.lengths.cpu(), self.coef, self.target)


class RegexReward(OneTerm):
    """1.0 when ``re.search(pattern, response text)`` finds the pattern, else 0.0."""

    def __init__(self, pattern: str):
        self.pattern = re.compile(pattern)
        self.name = f"regex {pattern!r}"

    @rows
    def score(self, rollout: Rollout) -> Tensor:
        return torch.tensor([float(self.pattern.search(r) is not None) for r in rollout.responses],
                            dtype=torch.float32)


class ComposedReward:
    """Terms ``(name, weight, source)``: ``score`` = sum_t weight_t * term_t, (B,)."""

    def __init__(self, terms: list[tuple[str, float, RewardSource]], dense: list[bool] | None = None):
        self.names = [name for name, _, _ in terms]
        self.weights = [weight for _, weight, _ in terms]
        self.sources = [source for _, _, source in terms]
        #: Which terms give rewards at token positions (their kind's registry entry's ``dense``).
        self.dense = dense if dense is not None else [bool(getattr(s, "dense", False)) for s in self.sources]

    @rows
    def score_terms(self, rollout: Rollout) -> Tensor:
        """(B, T) each term's raw (unweighted) score, on the CPU in float32, in the terms' order."""
        return torch.stack([source.score(rollout).detach().float().cpu() for source in self.sources], dim=1)

    @rows
    def score(self, rollout: Rollout) -> Tensor:
        return combine_terms(self.score_terms(rollout), self.weights)

    @rows
    def score_terms_and_tokens(self, rollout: Rollout) -> tuple[Tensor, Tensor]:
        """((B, T) each term's raw score, as :meth:`score_terms`; (B, A) the weighted sum of the dense
        terms' rewards at token positions, sum_t weight_t * token_scores_t), float32 on the CPU, with one
        pass of each source. A dense term's raw score is its rewards' sum per row."""
        columns, tokens = [], torch.zeros(rollout.response_ids.shape, dtype=torch.float32)
        for weight, source, dense_kind in zip(self.weights, self.sources, self.dense):
            if dense_kind:
                dense = source.token_scores(rollout).detach().float().cpu()
                tokens = tokens + weight * dense
                columns.append(dense.sum(dim=1))
            else:
                columns.append(source.score(rollout).detach().float().cpu())
        return torch.stack(columns, dim=1), tokens

    def metrics(self) -> dict[str, float]:
        """What each reporting term (a judge) did since the last call, merged (each names its own keys)."""
        out: dict[str, float] = {}
        for source in self.sources:
            report = getattr(source, "metrics", None)
            if callable(report):
                out.update(report())
        return out
