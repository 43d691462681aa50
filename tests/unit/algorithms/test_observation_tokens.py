"""A multi-turn episode's observation tokens (``Rollout.action_mask`` 0 inside the response) carry
no loss: the algorithms' advantages, rewards and losses read the sampled tokens only
(``Rollout.loss_mask``), and the score lands on the last sampled token, not on a trailing
observation. Without an action mask nothing changes (the loss mask is the response mask)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from tether.algorithms.grpo import GRPO
from tether.algorithms.ppo import PPO
from tether.algorithms.reinforce_pp import ReinforcePP
from tether.algorithms.rloo import RLOO
from tether.config import RLConfig, load_config
from tether.roles.policy import PolicyOutput
from tether.types import Rollout

# Row 0: sampled, sampled, observation, observation, sampled, sampled.
# Row 1: sampled, observation, sampled, a trailing observation, then 2 padding columns.
RESPONSE = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]])
ACTION = torch.tensor([[1, 1, 0, 0, 1, 1], [1, 0, 1, 0, 0, 0]])
OBSERVATION = RESPONSE.bool() & ~ACTION.bool()
LAST_SAMPLED = [5, 2]
# π_old as the engine captured it: 0 where it sampled nothing (observations, padding); the actor's
# forward gives real log-probs at every response position, observations included.
LOGP = torch.tensor([[-1.0, -2.0, -3.0, -0.5, -1.5, -2.5], [-0.7, -4.0, -1.2, -2.2, -3.0, -3.0]])
OLD = torch.where(ACTION.bool(), LOGP, torch.zeros(()))
REF = LOGP - torch.tensor([[0.1, -0.2, 3.0, -5.0, 0.3, 0.2], [0.4, 7.0, -0.1, 9.0, 0.0, 0.0]])
VALUES = torch.tensor([[0.2, 0.1, 0.0, 0.0, 0.4, 0.3], [0.5, 0.0, 0.6, 0.0, 0.0, 0.0]])
SCORES = torch.tensor([1.0, -1.0])


def cfg(algorithm: str = "ppo", *extra):
    return load_config(RLConfig, None, ["model.name_or_path=m", "prompts=p", "reward.models=[r]",
                                         f"algorithm={algorithm}", "rl.gamma=1", "kl.coef=0.1", *extra])


def rollout(action_mask=ACTION) -> Rollout:
    ids = torch.ones(2, 6, dtype=torch.long)
    return Rollout(ids, torch.ones(2, 6, dtype=torch.long), ids, RESPONSE, torch.tensor([True, True]), ["p", "q"],
                   ["a", "b"], sampled_logprobs=OLD, action_mask=action_mask)


def ppo_experience(*extra):
    return PPO(cfg("ppo", "ppo.lam=1", *extra)).experience(rollout(), OLD, REF, VALUES, SCORES, kl_coef=0.1)


def grad_at(loss_fn, exp, logp=LOGP, entropy=None):
    """The loss and d loss / d log-probs of ``loss_fn`` on ``exp``, the actor's log-probs ``logp``."""
    logp = logp.clone().requires_grad_(True)
    loss, stats = loss_fn(PolicyOutput(logp, entropy), exp)
    loss.backward()
    return loss.detach(), logp.grad, stats


def test_without_an_action_mask_the_loss_mask_is_the_response_mask():
    assert rollout(None).loss_mask is RESPONSE and rollout().loss_mask is ACTION


def test_ppo_score_lands_on_the_last_sampled_token_not_a_trailing_observation():
    exp, _ = ppo_experience()
    kl = OLD - REF  # k1, β = 0.1
    for row, last in enumerate(LAST_SAMPLED):
        assert float(exp.rewards[row, last]) == pytest.approx(float(SCORES[row] - 0.1 * kl[row, last]))
    assert torch.equal(exp.rewards[OBSERVATION], torch.zeros(int(OBSERVATION.sum())))
    # The KL of the observations (large here) reaches no reward.
    torch.testing.assert_close(exp.rewards.sum(1), SCORES - 0.1 * (kl * ACTION).sum(1))


def test_ppo_advantages_and_returns_skip_the_observations():
    """γ = λ = 1: a sampled token's return is every later sampled token's reward, across the
    observation; advantages, returns (and the critic's targets) are 0 on observations."""
    exp, _ = ppo_experience("ppo.whiten_advantages=false")
    rewards = exp.rewards * ACTION
    to_go = rewards.flip(1).cumsum(1).flip(1)
    torch.testing.assert_close(exp.returns, to_go * ACTION)
    torch.testing.assert_close(exp.advantages, (to_go - VALUES) * ACTION)
    for x in (exp.advantages, exp.returns):
        assert torch.equal(x[OBSERVATION], torch.zeros(int(OBSERVATION.sum())))


def test_ppo_actor_loss_has_no_gradient_at_observations():
    exp, _ = ppo_experience("ppo.whiten_advantages=true")
    exp = dataclasses.replace(exp, advantages=exp.advantages + 3.0 * OBSERVATION)  # garbage must not count
    loss_fn = PPO(cfg("ppo", "rl.entropy_coef=0.1", "kl.placement=loss", "kl.estimator=k3")).actor_loss(0.1)
    moved, entropy = LOGP + 0.05 * ACTION, torch.rand(2, 6) * RESPONSE  # ratio ≠ 1 on sampled tokens
    loss, grad, _ = grad_at(loss_fn, exp, moved, entropy)
    assert torch.equal(grad[OBSERVATION], torch.zeros(int(OBSERVATION.sum())))
    assert bool((grad[ACTION.bool()] != 0).all())
    # Anything at the observations (the forward's log-probs, entropies) leaves the loss as it is.
    other, _, _ = grad_at(loss_fn, exp, moved + 7.0 * OBSERVATION, entropy + 5.0 * OBSERVATION)
    assert torch.equal(loss, other)
    # π_old is 0 at the observations, the forward's log-probs are not: the ratio check reads sampled tokens only.
    _, _, stats = grad_at(loss_fn, exp, LOGP, entropy)
    assert stats["check/ratio_deviation"] == 0.0 and stats["ppo/policy/ratio_mean"] == pytest.approx(1.0)


@pytest.mark.parametrize("aggregation", ["token_mean", "sequence_mean", "fixed_normalizer"])
@pytest.mark.parametrize("ratio_level", ["token", "sequence", "sequence_product"])
def test_grpo_actor_loss_has_no_gradient_at_observations(aggregation, ratio_level):
    algo = GRPO(cfg("grpo", "group.size=2", f"policy_loss.aggregation={aggregation}",
                    f"policy_loss.ratio_level={ratio_level}", "kl.placement=loss", "kl.estimator=k3"))
    exp, _ = algo.experience(rollout(), OLD, REF, None, SCORES, kl_coef=0.1)
    assert torch.equal(exp.advantages[OBSERVATION], torch.zeros(int(OBSERVATION.sum())))
    loss_fn = algo.actor_loss(0.1)
    loss, grad, _ = grad_at(loss_fn, exp, LOGP + 0.05 * ACTION)
    assert torch.equal(grad[OBSERVATION], torch.zeros(int(OBSERVATION.sum())))
    assert bool((grad[ACTION.bool()] != 0).any())
    moved, _, _ = grad_at(loss_fn, exp, LOGP + 0.05 * ACTION + 7.0 * OBSERVATION)
    assert torch.equal(loss, moved)
    _, _, at_old = grad_at(loss_fn, exp)
    assert at_old["check/ratio_deviation"] == 0.0
    # Micro-batches weigh by their sampled tokens under token_mean (the loss's own denominator).
    assert loss_fn.micro_weight(exp) == (float(ACTION.sum()) if aggregation == "token_mean" else 2.0)


def test_critic_free_sequence_rewards_sum_the_kl_of_sampled_tokens_only():
    """GRPO and RLOO with the KL in the reward: score − β·Σ KL over the sampled tokens."""
    kl_sampled = ((OLD - REF) * ACTION).sum(1)
    for algo in (GRPO(cfg("grpo", "group.size=2", "kl.placement=reward", "kl.estimator=k1")),
                 RLOO(cfg("rloo", "group.size=2", "kl.placement=reward", "kl.estimator=k1"))):
        exp, stats = algo.experience(rollout(), OLD, REF, None, SCORES, kl_coef=0.1)
        assert stats["objective/non_score_reward"] == pytest.approx(float((-0.1 * kl_sampled).mean()))
        assert torch.equal(exp.advantages[OBSERVATION], torch.zeros(int(OBSERVATION.sum())))


def test_reinforce_pp_returns_reach_across_observations_to_the_last_sampled_token():
    algo = ReinforcePP(cfg("reinforce_pp", "kl.coef=0"))
    exp, _ = algo.experience(rollout(), OLD, REF, None, SCORES, kl_coef=0.0)
    for row, last in enumerate(LAST_SAMPLED):
        assert float(exp.rewards[row, last]) == float(SCORES[row])
    assert torch.equal(exp.advantages[OBSERVATION], torch.zeros(int(OBSERVATION.sum())))
    # Every sampled token of a row has the same return-to-go (its score): the same whitened advantage.
    for row in range(2):
        sampled = exp.advantages[row][ACTION[row].bool()]
        assert torch.equal(sampled, sampled[:1].expand_as(sampled))


@pytest.mark.parametrize("name", ["online_dpo", "rs"])
def test_online_dpo_and_rejection_sampling_have_no_gradient_at_observations(name):
    from tether.algorithms import algorithm

    algo = algorithm(name, cfg(name, "group.size=2"))
    exp, _ = algo.experience(rollout(), OLD, REF, None, SCORES, kl_coef=0.1)
    loss_fn = algo.actor_loss(0.1)
    loss, grad, _ = grad_at(loss_fn, exp, LOGP + 0.05 * ACTION)
    assert torch.equal(grad[OBSERVATION], torch.zeros(int(OBSERVATION.sum())))
    assert bool((grad[ACTION.bool()] != 0).any())
    moved, _, _ = grad_at(loss_fn, exp, LOGP + 0.05 * ACTION + 7.0 * OBSERVATION)
    assert torch.equal(loss, moved)
    _, _, at_old = grad_at(loss_fn, exp)
    assert at_old["check/ratio_deviation"] == 0.0


def test_ppo_adds_per_turn_rewards_where_they_fall():
    """An environment's reward for turn 1 of row 0 (its last sampled token, column 1) is added to the
    shaped reward there, beside the score on the episode's last sampled token; nothing else moves."""
    algo = PPO(cfg("ppo", "ppo.lam=1", "ppo.whiten_advantages=false"))
    base = algo.experience(rollout(), OLD, REF, VALUES, SCORES, kl_coef=0.1)
    turn = torch.zeros(2, 6)
    turn[0, 1] = 0.75
    with_turns = dataclasses.replace(rollout(), token_rewards=turn)
    exp = algo.experience(with_turns, OLD, REF, VALUES, SCORES, kl_coef=0.1)[0]
    assert torch.equal(exp.rewards - base[0].rewards, turn)
    # gamma = lam = 1: the turn's reward reaches every sampled token up to it, not those after.
    assert torch.allclose((exp.advantages - base[0].advantages)[0], torch.tensor([0.75, 0.75, 0, 0, 0, 0]))
