"""PPO as an algorithm (advantage estimator + losses) on hand-worked numbers."""

from __future__ import annotations

import pytest
import torch

from tether.algorithms import ALGORITHMS, algorithm
from tether.algorithms.ppo import PPO, PPOActorLoss, PPOCriticLoss
from tether.config import RLConfig, load_config
from tether.roles.policy import PolicyOutput
from tether.types import Experience, Rollout


def cfg(*extra):
    return load_config(RLConfig, None, ["model.name_or_path=m", "prompts=p", "reward.models=[r]", "rl.gamma=1",
                                         "ppo.lam=1", "ppo.whiten_advantages=false", *extra])


def rollout() -> Rollout:
    one = torch.ones(1, 2, dtype=torch.long)
    return Rollout(one, one, one, one, torch.tensor([True]), ["p"], ["r"])


LOGP, REF = torch.tensor([[-1.0, -2.0]]), torch.tensor([[-1.5, -1.0]])
VALUES, SCORE = torch.tensor([[0.2, 0.5]]), torch.tensor([1.0])


def test_registry_and_shape():
    assert "ppo" in ALGORITHMS
    algo = algorithm("ppo", cfg())
    assert isinstance(algo, PPO) and ALGORITHMS["ppo"].needs_critic and algo.samples_per_prompt == 1


def test_experience_kl_in_the_reward():
    # k1 KL per token: logp - ref = [0.5, -1.0]; beta 0.1: rewards [-0.05, 0.1 + score 1.0] = [-0.05, 1.1].
    # gamma = lambda = 1: returns are the sums of rewards to go [1.05, 1.1]; advantages = returns - V = [0.85, 0.6].
    exp, stats = PPO(cfg()).experience(rollout(), LOGP, REF, VALUES, SCORE, kl_coef=0.1)
    torch.testing.assert_close(exp.rewards, torch.tensor([[-0.05, 1.1]]))
    torch.testing.assert_close(exp.returns, torch.tensor([[1.05, 1.1]]))
    torch.testing.assert_close(exp.advantages, torch.tensor([[0.85, 0.6]]))
    assert stats["objective/non_score_reward"] == pytest.approx(0.05)
    assert stats["ppo/returns_mean"] == pytest.approx(1.075)


def test_experience_kl_in_the_loss():
    exp, stats = PPO(cfg("kl.placement=loss")).experience(rollout(), LOGP, REF, VALUES, SCORE, kl_coef=0.1)
    torch.testing.assert_close(exp.rewards, torch.tensor([[0.0, 1.0]]))
    assert stats["objective/non_score_reward"] == 0.0


def experience(advantages=(1.0, -1.0)) -> Experience:
    adv = torch.tensor([advantages])
    return Experience(rollout(), LOGP, REF, VALUES, SCORE, torch.zeros(1, 2), adv, torch.tensor([[1.0, 0.0]]))


def test_actor_loss_at_ratio_one():
    """ratio 1: the surrogate is the advantage, so the loss is -mean(A) = 0 for A = [1, -1]."""
    loss_fn = PPOActorLoss(0.2, 0.0, False, "k1", 0.1, PPOCriticLoss(0.1, 0.2))
    loss, stats = loss_fn(PolicyOutput(LOGP.clone()), experience())
    assert float(loss) == pytest.approx(0.0, abs=1e-7)
    assert stats["check/ratio_deviation"] == 0.0 and stats["ppo/policy/ratio_mean"] == pytest.approx(1.0)
    assert not loss_fn.needs_entropy


def test_actor_loss_entropy_and_kl_terms():
    # entropy bonus 0.1 x mean([1, 2]) = 0.15 off; KL term 0.1 x mean(k1 [0.5, -1.0]) = -0.025 on.
    loss_fn = PPOActorLoss(0.2, 0.1, True, "k1", 0.1, PPOCriticLoss(0.1, 0.2))
    out = PolicyOutput(LOGP.clone(), entropy=torch.tensor([[1.0, 2.0]]))
    loss, _ = loss_fn(out, experience((2.0, 2.0)))
    assert float(loss) == pytest.approx(-2.0 - 0.15 - 0.025)
    assert loss_fn.needs_entropy


def test_ratio_deviation_is_reported():
    loss_fn = PPOActorLoss(0.2, 0.0, False, "k1", 0.0, PPOCriticLoss(0.1, 0.2))
    _, stats = loss_fn(PolicyOutput(LOGP + torch.log(torch.tensor(1.5))), experience())
    assert stats["check/ratio_deviation"] == pytest.approx(0.5, rel=1e-6)


def test_critic_loss_and_the_shared_trunk_sum():
    # 0.5 * mean((v - R)^2) with v = [0.2, 0.5], R = [1, 0]: 0.5 * (0.64 + 0.25) / 2 = 0.2225; x vf 0.1.
    critic = PPOCriticLoss(0.1, None)
    value, stats = critic(VALUES, experience())
    assert float(value) == pytest.approx(0.02225) and stats["ppo/val/loss"] == pytest.approx(0.2225)
    actor = PPOActorLoss(0.2, 0.0, False, "k1", 0.0, critic)
    alone, _ = actor(PolicyOutput(LOGP.clone()), experience())
    joint, stats = actor(PolicyOutput(LOGP.clone(), values=VALUES), experience())
    assert float(joint) == pytest.approx(float(alone) + 0.02225)
    assert "ppo/val/loss" in stats
