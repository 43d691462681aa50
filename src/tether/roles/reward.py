"""Reward sources: a reward model, a python callable, or an ensemble. Each gives (B,) scores and
answers per-term scores (:class:`RewardSource`): one term here, several for a composed reward;
the RL loop weighs the terms in one place (:func:`tether.algos.reward_terms.combine_terms`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import torch
from torch import Tensor

from tether.common.dispatch import rows
from tether.common.errors import ConfigError
from tether.models import score_offset
from tether.models.forward import last_token_scores
from tether.roles.callable_scores import call_reward, reward_scores
from tether.types import Rollout


class RewardSource(Protocol):
    @rows
    def score(self, rollout: Rollout) -> Tensor:
        """(B,) one score per episode, read after the whole response."""

    @rows
    def score_terms(self, rollout: Rollout) -> Tensor:
        """(B, T) each term's raw score, float32 on the CPU (T = 1 for a single source)."""


class OneTerm:
    """A single source's :meth:`RewardSource.score_terms`: its score as the one term."""

    @rows
    def score_terms(self, rollout: Rollout) -> Tensor:
        return self.score(rollout).detach().float().cpu()[:, None]


class SourceTerms(OneTerm):
    """A source that has only ``score`` (a plugin kind's, one built in memory), answering the protocol."""

    def __init__(self, source):
        self.source = source
        self.name = getattr(source, "name", type(source).__name__)

    @rows
    def score(self, rollout: Rollout) -> Tensor:
        return self.source.score(rollout)

    @rows
    def token_scores(self, rollout: Rollout) -> Tensor:
        """A dense kind's (B, A) rewards at token positions, as its source gives them."""
        return self.source.token_scores(rollout)


def as_reward_source(source) -> RewardSource:
    """``source`` answering :class:`RewardSource` in full (wrapped when it has only ``score``)."""
    return source if callable(getattr(source, "score_terms", None)) else SourceTerms(source)


class ModelReward(OneTerm):
    """A frozen ``*ForSequenceClassification`` reward model sharing the policy's tokenizer.

    The score is the head at the last real token (the EOS when there is one) minus the
    model's stored normalisation offset. Takes an :class:`~tether.engines.InferenceEngine`, or a
    model (then run where it is, at ``autocast``).
    """

    def __init__(self, model_or_engine, name: str = "reward model", autocast: str = "none"):
        from tether.engines import AdapterOffEngine, InferenceEngine

        engine = model_or_engine
        if not isinstance(engine, (InferenceEngine, AdapterOffEngine)):
            device = next(model_or_engine.parameters()).device
            engine = InferenceEngine(model_or_engine, device, "fp32" if autocast in (None, "none") else autocast)
        self.engine = engine
        self.offset = score_offset(engine.model)
        self.name = name

    @property
    def model(self):
        return self.engine.model

    @rows
    def score(self, rollout: Rollout) -> Tensor:
        e = self.engine
        raw = e.infer(lambda m, ro: last_token_scores(m, ro.sequences, ro.attention_mask, e.autocast), rollout)
        return raw - self.offset


class CallableReward(OneTerm):
    """``fn(prompts: list[str], responses: list[str]) -> list[float]``, e.g. a rule or a judge."""

    def __init__(self, fn: Callable[[list[str], list[str]], list[float]], name: str = "a python callable"):
        self.fn = fn
        self.name = name

    @rows
    def score(self, rollout: Rollout) -> Tensor:
        # User code: its exceptions and answers are checked here, each one paragraph naming it.
        values = call_reward(self.fn, self.name, rollout.prompts, rollout.responses)
        return reward_scores(values, self.name, rollout.responses)


def combine_scores(scores: Tensor, how: str, std_coef: float = 1.0) -> Tensor:
    """(K, B) member scores -> (B,): mean, min, or mean - k*std (trust only the consensus)."""
    if how == "mean":
        return scores.mean(dim=0)
    if how == "min":
        return scores.min(dim=0).values
    if how == "mean_minus_std":
        std = scores.std(dim=0, unbiased=False) if scores.shape[0] > 1 else torch.zeros_like(scores[0])
        return scores.mean(dim=0) - std_coef * std
    raise ConfigError(f"Unknown reward.combine '{how}': expected mean, min or mean_minus_std.")


class EnsembleReward(OneTerm):
    """Several reward sources combined per episode."""

    def __init__(self, members: list[RewardSource], combine: str = "mean", std_coef: float = 1.0):
        self.members = members
        self.combine = combine
        self.std_coef = std_coef

    @rows
    def score(self, rollout: Rollout) -> Tensor:
        stacked = torch.stack([m.score(rollout) for m in self.members])
        return combine_scores(stacked, self.combine, self.std_coef)
