"""Gradient checkpointing changes memory, not maths (docs/performance.md, memory): the same loss and gradients
with and without it, for a full model and a LoRA one, through tether's own forward passes."""

from __future__ import annotations

import copy

import pytest
import torch

from tether.bench.setup import SIZES, build_setup
from tether.config.common import LoRAConfig
from tether.models.lora import trainable
from tether.roles.policy import policy_forward
from tether.rollout import LeanGenerationEngine, SamplingParams


def loss_and_grads(model, rollout):
    model.train()
    out = policy_forward(model, rollout, 1.0, True, "none")
    loss = -(out.logprobs * rollout.response_mask).sum() / rollout.response_mask.sum() + 0.1 * out.entropy.mean()
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    return float(loss), grads


@pytest.mark.parametrize("lora_r", [0, 8])
def test_checkpointed_loss_and_gradients_match(lora_r):
    setup = build_setup(SIZES["micro"], 4, seed=2)
    policy = setup.models["policy"]
    torch.manual_seed(0)
    rollout = LeanGenerationEngine(policy, setup.tokenizer).generate(
        setup.prompts.ids[:4], setup.prompts.texts[:4], SamplingParams(max_new_tokens=5))
    lora = LoRAConfig(r=lora_r)
    torch.manual_seed(1)
    plain = trainable(copy.deepcopy(policy), lora)
    torch.manual_seed(1)
    checkpointed = trainable(copy.deepcopy(policy), lora, checkpointing=True)
    from tether.models.lora import unwrap

    assert unwrap(checkpointed).is_gradient_checkpointing and not unwrap(plain).is_gradient_checkpointing
    loss_a, grads_a = loss_and_grads(plain, rollout)
    loss_b, grads_b = loss_and_grads(checkpointed, rollout)
    assert loss_a == pytest.approx(loss_b, rel=1e-6, abs=1e-6)
    assert grads_a.keys() == grads_b.keys() and grads_a
    for name in grads_a:
        torch.testing.assert_close(grads_b[name], grads_a[name], rtol=1e-5, atol=1e-5)
