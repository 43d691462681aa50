"""The critic on a multi-turn episode: values, value targets and the value loss are on the tokens
the policy sampled (``Rollout.loss_mask``); an observation token between two turns has none of
them, and micro-batches weigh by their sampled tokens. The forwards still read every real token."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

import tether.roles.critic as critic_module
from tether.algorithms.ppo import PPO
from tether.config import RLConfig, load_config
from tether.roles.critic import Critic, ValueHead
from tether.roles.policy import PolicyWithValueHead, policy_forward, response_tokens
from tether.types import Experience, Rollout

RESPONSE = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]])
ACTION = torch.tensor([[1, 1, 0, 0, 1, 1], [1, 0, 1, 0, 0, 0]])  # row 1 ends on an observation
OBSERVATION = RESPONSE.bool() & ~ACTION.bool()


def rollout(action_mask=ACTION) -> Rollout:
    ids = torch.tensor([[3, 4, 5, 6, 7, 8], [9, 10, 11, 12, 0, 0]])
    return Rollout(torch.full((2, 2), 2), torch.ones(2, 2, dtype=torch.long), ids, RESPONSE,
                   torch.tensor([True, True]), ["p", "q"], ["a", "b"], action_mask=action_mask)


class Values(torch.nn.Module):
    """A "critic model" whose values are a (2, 6) parameter (read by the patched forward)."""

    def __init__(self):
        super().__init__()
        self.v = torch.nn.Parameter(torch.arange(1.0, 13.0).reshape(2, 6) / 10)


class StepEngine:
    """A training engine that runs one micro-batch's loss and backward, recording the weights."""

    autocast, compile = "none", False

    def __init__(self, model):
        self.model, self.weights = model, []

    def infer(self, fn, *args):
        with torch.no_grad():
            return fn(self.model, *args)

    def train_step(self, micros, loss_fn, weight, name, where):
        self.weights += [weight(m) for m in micros]
        loss, stats = loss_fn(self.model, micros[0])
        loss.backward()
        return {"stats": {**stats, "loss": float(loss.detach())}, "skipped_steps": 0, "grad_norm": None, "timing": {}}


@pytest.fixture
def critic(monkeypatch):
    monkeypatch.setattr(critic_module, "response_values", lambda module, *args: module.v)
    return Critic(StepEngine(Values()))


def experience(critic: Critic) -> Experience:
    cfg = load_config(RLConfig, None, ["model.name_or_path=m", "prompts=p", "reward.models=[r]", "rl.gamma=1",
                                       "ppo.lam=0.9", "ppo.value_clip=0.2"])
    ro = rollout()
    logp = torch.full((2, 6), -1.0)
    values = critic.values(ro)
    exp, _ = PPO(cfg).experience(ro, logp, logp - 0.1, values, torch.tensor([1.0, -1.0]), kl_coef=0.1)
    return exp


def test_values_are_zero_at_observations_and_padding(critic):
    values = critic.values(rollout())
    assert torch.equal(values, critic.engine.model.v.detach() * ACTION)
    assert torch.equal(critic.values(rollout(None)), critic.engine.model.v.detach() * RESPONSE)


def test_value_targets_are_on_sampled_tokens_only(critic):
    exp = experience(critic)
    for x in (exp.values, exp.returns, exp.advantages):
        assert torch.equal(x[OBSERVATION], torch.zeros(int(OBSERVATION.sum())))
    assert bool((exp.returns[ACTION.bool()] != 0).all())


def test_the_value_loss_has_no_gradient_at_observations(critic):
    exp = experience(critic)
    loss_fn = PPO(load_config(RLConfig, None, ["model.name_or_path=m", "prompts=p", "reward.models=[r]",
                                               "ppo.value_clip=0.2"])).critic_loss()
    [step] = critic.update(exp, [[torch.arange(2)]], loss_fn)
    grad = critic.engine.model.v.grad
    assert torch.equal(grad[OBSERVATION], torch.zeros(int(OBSERVATION.sum())))
    assert bool((grad[ACTION.bool()] != 0).all())
    # A micro-batch weighs by its sampled tokens, the ones the loss averages over.
    assert critic.engine.weights == [float(ACTION.sum())] == [response_tokens(exp)]
    # Whatever the model says at an observation, the loss is the same.
    with torch.no_grad():
        critic.engine.model.v.add_(5.0 * OBSERVATION)
    [again] = critic.update(exp, [[torch.arange(2)]], loss_fn)
    assert again["loss"] == step["loss"] and again["ppo/val/clipfrac"] == step["ppo/val/clipfrac"]


def test_a_shared_trunk_value_head_is_zero_at_observations_but_log_probs_are_everywhere():
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=16, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=32)
    head = ValueHead(16)
    with torch.no_grad():
        head.score.bias.fill_(0.5)
    out = policy_forward(PolicyWithValueHead(LlamaForCausalLM(config).eval(), head), rollout(), 1.0, False, "none")
    assert torch.equal(out.values[OBSERVATION], torch.zeros(int(OBSERVATION.sum())))
    assert bool((out.values[ACTION.bool()] != 0).all())
    # The forward attends to and scores every real response token, observations included.
    assert bool((out.logprobs[RESPONSE.bool()] < 0).all())
