"""Actor and reference: causal LMs that score the response tokens of a rollout."""

from __future__ import annotations

import torch
from torch import Tensor

from tether.models.forward import response_logprobs
from tether.types import Rollout


class PolicyRole:
    """A causal LM as a policy over response tokens. The actor trains it; the reference freezes it.

    ``autocast``: "bf16" runs the trunk under bf16 autocast (fp32 weights, fp32 head and log-softmax).
    ``use_captured``: the rollout-time log-probs come from the sampling pass when this model sampled
    the rollout (no second forward); PPO's first-minibatch ratio check verifies they agree.
    ``compile``: the gradient (update) pass runs a ``torch.compile``d trunk (True or a mode of
    :data:`tether.models.forward.COMPILE_MODES`).
    """

    def __init__(self, model, temperature: float, trainable: bool, autocast: str = "none",
                 use_captured: bool = False, compile: bool | str = False):
        self.model = model
        self.compile = compile
        self.temperature = temperature
        self.trainable = trainable
        self.autocast = autocast
        self.use_captured = use_captured
        if not trainable:
            model.eval()
            model.requires_grad_(False)

    def captured(self, rollout: Rollout, with_entropy: bool) -> bool:
        """The rollout carries log-probs (and entropies, if asked) this model computed while sampling."""
        return (
            self.use_captured
            and rollout.sampled_logprobs is not None
            and rollout.sampled_by is self.model
            and (not with_entropy or rollout.sampled_entropy is not None)
        )

    def logprobs(self, rollout: Rollout, with_entropy: bool = False) -> tuple[Tensor, Tensor | None]:
        """(B, A) log pi(a_t | s_t) at the sampling temperature, and (B, A) entropies if asked.

        No gradient: this is the rollout-time pass (pi_old, pi_ref).
        """
        if self.captured(rollout, with_entropy):
            return rollout.sampled_logprobs, rollout.sampled_entropy if with_entropy else None
        with torch.no_grad():
            return self.forward(rollout, with_entropy)

    def forward(self, rollout: Rollout, with_entropy: bool = False) -> tuple[Tensor, Tensor | None]:
        """Same as :meth:`logprobs` but with gradient (the PPO update)."""
        return response_logprobs(
            self.model,
            rollout.sequences,
            rollout.attention_mask,
            rollout.num_prompt_tokens,
            self.temperature,
            with_entropy,
            self.autocast,
            self.compile,
        )
