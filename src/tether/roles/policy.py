"""The policy roles: the actor (log-probs and its update) and the frozen reference.

A role says what a model is for; its engine says how the model runs (device, precision,
optimiser). The PPO loop calls these methods through a placement and never sees the model.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from tether.common.dispatch import rows
from tether.models.forward import logprobs_from_hidden, response_hidden, response_positions
from tether.models.lora import unwrap
from tether.roles.trained import TrainedRole
from tether.types import Experience, Rollout


@dataclass
class PolicyOutput:
    """What the actor's forward gives a loss function: (B, A) log-probs at the sampling
    temperature, (B, A) entropies (or None) and, with a shared-trunk value head, (B, A) values."""

    logprobs: Tensor
    entropy: Tensor | None = None
    values: Tensor | None = None


class PolicyWithValueHead(torch.nn.Module):
    """The actor's causal LM with a value head on its trunk (``critic.shared_trunk``): one module,
    so one engine trains both with one backward and one clip. Saved as the LM alone; the head
    is saved by the critic view (:class:`~tether.roles.critic.SharedTrunkCritic`)."""

    def __init__(self, policy: torch.nn.Module, value_head: torch.nn.Module):
        super().__init__()
        self.policy = policy
        self.value_head = value_head

    def save_pretrained(self, directory, **kwargs) -> None:
        if kwargs.get("state_dict") is not None:  # gathered weights (FSDP): the LM's own, unprefixed
            kwargs["state_dict"] = {k.removeprefix("policy."): v for k, v in kwargs["state_dict"].items()
                                    if k.startswith("policy.")}
        self.policy.save_pretrained(directory, **kwargs)

    def export(self, directory) -> None:
        """The final LM: merged with its LoRA adapters (saved in ``adapter/``) when it has them."""
        from tether.models.lora import is_peft, save_merged

        if is_peft(self.policy):
            save_merged(self.policy, directory)
            self.policy = self.policy.get_base_model()
        else:
            self.policy.save_pretrained(directory)


def causal_lm(module: torch.nn.Module) -> torch.nn.Module:
    """The causal LM inside an engine's module (the module itself, or a value-head wrapper's
    policy; a LoRA model's base with its adapters injected)."""
    return unwrap(module.policy if isinstance(module, PolicyWithValueHead) else module)


def policy_forward(module, rollout: Rollout, temperature: float, with_entropy: bool, autocast: str,
                   compile: bool | str = False) -> PolicyOutput:
    """One trunk pass over a rollout: log-probs (and entropies) of its response tokens, and the
    value head's values when ``module`` carries one. Gradients flow when they are enabled."""
    lm = causal_lm(module)
    hidden, tokens = response_hidden(lm, rollout.sequences, rollout.attention_mask, rollout.num_prompt_tokens,
                                     autocast, compile)
    where = response_positions(lm, rollout.attention_mask, rollout.num_prompt_tokens, compile)
    logp, entropy = logprobs_from_hidden(lm, hidden, tokens, temperature, with_entropy, where=where)
    values = None
    if isinstance(module, PolicyWithValueHead):
        values = module.value_head(hidden) * rollout.loss_mask  # as the critic's: on sampled tokens only
    return PolicyOutput(logp, entropy, values)


def response_tokens(micro: Experience) -> float:
    """A micro-batch's size for weighting: its sampled response tokens, the ones its token-mean
    losses average over (they then accumulate to exactly the minibatch's token mean, over
    micro-batches and over ranks; an episode's observation tokens carry no loss)."""
    return float(micro.rollout.loss_mask.sum())


def minibatch_steps(engine, exp: Experience, minibatches: list[list[Tensor]], step_loss, name: str, where: str,
                    norm_keys: tuple[str, ...], weight=response_tokens) -> list[dict]:
    """One ``engine.train_step`` per minibatch (a list of micro-batch index tensors, weighted by
    ``weight(micro_batch)``: their response tokens unless the loss says otherwise); each step's stats, its gradient norm under ``norm_keys``, the
    skipped-step count and its timing."""
    results = []
    for micro_indices in minibatches:
        micros = [exp.select(index) for index in micro_indices]
        step = engine.train_step(micros, step_loss, weight, name, where)
        stats = {**step["stats"], "optim/skipped_steps": float(step["skipped_steps"])}
        if step["grad_norm"] is not None:
            stats.update({key: step["grad_norm"] for key in norm_keys})
        stats.update({f"timing/update/{k}": v for k, v in step["timing"].items()})
        results.append(stats)
    return results


class Reference:
    """A frozen policy: log-probs of rollouts under its weights (the KL anchor; also any policy
    that ``tether eval`` or the demo measures). Never uses log-probs captured while sampling."""

    def __init__(self, engine, temperature: float):
        self.engine = engine
        self.temperature = temperature

    @rows
    def logprobs(self, rollout: Rollout, with_entropy: bool = False, use_captured: bool = False):
        """(B, A) log pi(a_t | s_t) at the sampling temperature, and (B, A) entropies or None."""
        e = self.engine
        out = e.infer(lambda m, ro: policy_forward(m, ro, self.temperature, with_entropy, e.autocast), rollout)
        return out.logprobs, out.entropy


class Actor(Reference, TrainedRole):
    """The policy being trained: log-probs of rollouts and the update, through its training engine.

    ``use_captured``: the rollout-time log-probs come from the sampling pass when the rollout
    carries them (no second forward); the first-minibatch ratio check verifies they agree.
    """

    def __init__(self, engine, temperature: float, use_captured: bool = False):
        super().__init__(engine, temperature)
        self.use_captured = use_captured
        self.shared_trunk = isinstance(engine.model, PolicyWithValueHead)

    @rows
    def logprobs(self, rollout: Rollout, with_entropy: bool = False, use_captured: bool = True):
        """(B, A) log pi_old at the sampling temperature and (B, A) entropies or None; no gradient.
        Entropies are None when not asked for, or when the captured log-probs come without them."""
        if use_captured and self.use_captured and rollout.sampled_logprobs is not None:
            # An engine without entropies (vLLM) gives None for them: the caller estimates.
            ro = self.engine.to_device(rollout)
            return ro.sampled_logprobs, ro.sampled_entropy if with_entropy else None
        e = self.engine
        out = e.infer(lambda m, ro: policy_forward(m, ro, self.temperature, with_entropy, e.autocast, False), rollout)
        return out.logprobs, out.entropy

    @rows
    def values(self, rollout: Rollout) -> Tensor:
        """(B, A) values of the shared-trunk value head (no gradient)."""
        e = self.engine
        return e.infer(lambda m, ro: policy_forward(m, ro, self.temperature, False, e.autocast).values, rollout)

    def update(self, exp: Experience, minibatches: list[list[Tensor]], loss_fn, where: str = "?") -> list[dict]:
        """One optimiser step per minibatch (a list of micro-batch index tensors) with
        ``loss_fn(PolicyOutput, micro_batch) -> (loss, stats)``; the steps' stats, in order."""
        e = self.engine
        with_entropy = bool(getattr(loss_fn, "needs_entropy", False))

        def step_loss(module, mb: Experience):
            out = policy_forward(module, mb.rollout, self.temperature, with_entropy, e.autocast, e.compile)
            return loss_fn(out, mb)

        # With a shared trunk one clip covers the trunk and the value head: both norms are that one.
        norms = ("optim/grad_norm", "optim/critic_grad_norm") if self.shared_trunk else ("optim/grad_norm",)
        # A loss that aggregates per response (GRPO's sequence mean) weighs micro-batches by responses.
        weight = getattr(loss_fn, "micro_weight", response_tokens)
        return minibatch_steps(e, exp, minibatches, step_loss, "policy loss", where, norms, weight)

    def sync_weights(self):
        """(name, tensor) of the causal LM as a plain Hugging Face checkpoint names them: what a
        generation engine with its own copy (vLLM) loads. A LoRA model's adapters are merged in
        for the duration (peft's ``merge_adapter``, undone when the pairs have been read), so the
        engine gets W + BA under the base model's names: one code path for every engine, no LoRA
        support needed in it."""
        from tether.models.lora import is_peft

        lm = self.engine.model.policy if self.shared_trunk else self.engine.model
        if not is_peft(lm):
            yield from self.named_weights()
            return
        from tether.models.lora import merged_names

        with torch.no_grad():
            lm.merge_adapter()
            try:
                yield from merged_names(lm.get_base_model().state_dict().items())
            finally:
                lm.unmerge_adapter()

    def named_weights(self):
        """The causal LM's weights (for a generation engine that holds its own copy)."""
        prefix = "policy." if self.shared_trunk else ""
        for name, tensor in self.engine.named_weights():
            if name.startswith(prefix):
                yield name[len(prefix):], tensor
