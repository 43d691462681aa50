"""A process reward model as a reward source: the score of every step of a sampled response.

The PRM is a checkpoint of ``tether prm`` (a scalar-head model whose config.json names its
``step_separator``; any ``*ForSequenceClassification`` checkpoint with one works). A response's
steps end at each sampled separator token and at its last sampled token (its EOS, or where the
length cap cut it: :func:`tether.algos.process.step_ends`), where the PRM was trained to read
them. Its answers:

- :meth:`ProcessReward.token_scores` (B, A): each step's reward (below) at its last token, 0
  elsewhere: the dense rewards an algorithm that reads rewards per token takes where they fall (PPO's GAE);
- :meth:`ProcessReward.score` (B,): their sum over the response's steps, the term's one score for
  an algorithm that takes one per episode (and what ``reward/<name>`` logs either way), so the
  episode's total reward is the same whichever way it is read.

A step's reward is read from the PRM's logit s in one of two forms (``prm_reward``):

- ``log_prob`` (the default): log σ(s) ≤ 0, the log of the probability the PRM gives the step being
  correct. Summed over steps it is log Π_j σ(s_j), Math-Shepherd's product aggregation in log space:
  an extra step can only lower it;
- ``logit``: s itself, the head's own scale, symmetric around 0 (a step the PRM cannot judge adds
  nothing). Summed over steps, a step the PRM likes is worth adding: on the multi-step demo PPO
  learns to insert extra separators late in training (docs/process.md).

The papers aggregate (min or product) for outcome use and leave the per-step form to the algorithm;
these are tether's two.
"""

from __future__ import annotations

import torch
from torch import Tensor

from tether.algos.process import step_ends
from tether.common.dispatch import rows
from tether.common.errors import ConfigError
from tether.models import score_offset
from tether.models.forward import scalar_outputs
from tether.roles.reward import OneTerm
from tether.types import Rollout


#: How a step's reward is read from the PRM's logit s: the logit itself, or log sigmoid(s), the log
#: of the probability the PRM gives the step being correct (<= 0: a response's total is the log of
#: Math-Shepherd's product of step probabilities, which no extra step can raise).
FORMS = ("logit", "log_prob")


def step_end_scores(per_position: Tensor, ends: Tensor, form: str = "log_prob") -> Tensor:
    """(B, A) the step rewards at the step ends, 0 elsewhere. per_position (B, A): the PRM's head (a
    logit) at every response position; ends (B, A) bool: the steps' last tokens; ``form``: one of
    :data:`FORMS`."""
    if form not in FORMS:
        raise ValueError(f"form {form!r}: expected one of {', '.join(FORMS)}")
    values = per_position.float()
    if form == "log_prob":
        values = torch.nn.functional.logsigmoid(values)
    return torch.where(ends, values, torch.zeros_like(values))


class ProcessReward(OneTerm):
    """A frozen PRM scoring each step of a response (module docstring). Takes an
    :class:`~tether.engines.InferenceEngine` holding the PRM and the separator's token id(s)."""

    dense = True  # its token_scores are read per token where an algorithm reads dense rewards

    def __init__(self, engine, separator_ids: list[int], name: str = "process reward model", form: str = "log_prob"):
        self.engine = engine
        self.separator_ids = list(separator_ids)
        self.form = form
        self.offset = score_offset(engine.model)
        self.name = name

    @rows
    def token_scores(self, rollout: Rollout) -> Tensor:
        """(B, A) float32 on the CPU: each step's reward (its logit, or log sigmoid of it) at its last
        token, 0 elsewhere."""
        e = self.engine
        mask = rollout.loss_mask
        ends = step_ends(rollout.response_ids, mask, self.separator_ids)

        def head(model, ro):
            return scalar_outputs(model, ro.sequences, ro.attention_mask, e.autocast)[:, ro.num_prompt_tokens:]

        per_position = e.infer(head, rollout).detach().float().cpu() - self.offset
        return step_end_scores(per_position, ends.cpu(), self.form)

    @rows
    def score(self, rollout: Rollout) -> Tensor:
        """(B,) the sum of the response's step scores."""
        return self.token_scores(rollout).sum(dim=1)


def separator_of(config, path: str, key: str, tokenizer) -> list[int]:
    """The PRM's step separator as the policy's token id (one token), from its config.json's
    ``step_separator``; a ConfigError naming ``key`` when it has none or it is not one token."""
    separator = getattr(config, "step_separator", None)
    if not isinstance(separator, str) or not separator:
        raise ConfigError(f"Config key '{key}' = {path!r}: its config.json has no step_separator, so where its "
                          "steps end is unknown; expected a process reward model written by `tether prm` (or add "
                          "\"step_separator\" to its config.json).")
    ids = list(tokenizer(separator, add_special_tokens=False).input_ids)
    if len(ids) != 1:
        raise ConfigError(f"Config key '{key}' = {path!r}: its step_separator {separator!r} encodes to {len(ids)} "
                          f"tokens {ids} with the policy's tokenizer; expected one token (a step ends at it).")
    return ids
