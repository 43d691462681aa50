"""The RL loop's per-token statistics of a multi-turn episode: the KL, the entropy, the off-policy
weights and their statistics are over the tokens the policy sampled (``Rollout.loss_mask``), not
the observation tokens an environment inserted; ``response/length_mean`` still counts every
response token. The roles are stand-ins answering fixed tensors."""

from __future__ import annotations

import pytest
import torch

from tether.algorithms import algorithm
from tether.config import RLConfig, load_config
from tether.loops.common import Timer
from tether.loops.reward_objectives import RewardObjectives
from tether.loops.rl import RLTrainer
from tether.loops.rl_setup import ScoreNormalizer, kl_controller
from tether.types import Rollout

RESPONSE = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]])
ACTION = torch.tensor([[1, 1, 0, 0, 1, 1], [1, 0, 1, 0, 0, 0]])
OBSERVATION = RESPONSE.bool() & ~ACTION.bool()
LOGP = torch.tensor([[-1.0, -2.0, -3.0, -0.5, -1.5, -2.5], [-0.7, -4.0, -1.2, -2.2, -3.0, -3.0]])
# Far from the policy at the observations: a KL there would dominate every statistic.
REF = LOGP - torch.tensor([[0.1, -0.2, 6.0, 8.0, 0.3, 0.2], [0.4, 9.0, -0.1, 7.0, 0.0, 0.0]])
ENTROPY = torch.tensor([[1.0, 2.0, 50.0, 60.0, 3.0, 4.0], [5.0, 70.0, 6.0, 80.0, 0.0, 0.0]])


class Policy:
    def __init__(self, logp, entropy=None):
        self.logp, self.entropy = logp, entropy

    def logprobs(self, rollout, with_entropy=False, use_captured=True):
        return self.logp, self.entropy if with_entropy else None


class Values:
    def values(self, rollout):
        return torch.full((2, 6), 0.1) * rollout.loss_mask


class Reward:
    def score_terms(self, rollout):
        return torch.tensor([[1.0], [-1.0]])


def trainer(*extra) -> RLTrainer:
    cfg = load_config(RLConfig, None, ["model.name_or_path=m", "prompts=p", "reward.models=[r]", "kl.coef=0.1",
                                       "reward.normalize=none", "reward.eos_penalty=null", *extra])
    t = RLTrainer.__new__(RLTrainer)  # the loop's own make_experience over stand-in roles
    t.cfg, t.iteration, t.algo = cfg, 0, algorithm(cfg.algorithm, cfg)
    t.actor, t.reference, t.critic, t.reward = Policy(LOGP, ENTROPY), Policy(REF), Values(), Reward()
    t.normalize, t.kl_ctl = ScoreNormalizer("none"), kl_controller(cfg)
    t.objectives = RewardObjectives(cfg.reward.terms)
    return t


def rollout(action_mask=ACTION) -> Rollout:
    ids = torch.ones(2, 6, dtype=torch.long)
    captured = torch.where(ACTION.bool(), LOGP, torch.zeros(()))  # the engine sampled no observation
    return Rollout(ids, torch.ones(2, 6, dtype=torch.long), ids, RESPONSE, torch.tensor([True, True]), ["p", "q"],
                   ["a", "b"], sampled_logprobs=captured, action_mask=action_mask)


def test_kl_and_entropy_average_over_sampled_tokens_only():
    _, stats = trainer().make_experience(rollout(), Timer())
    k1 = LOGP - REF
    k3 = torch.exp(REF - LOGP) - (REF - LOGP) - 1
    assert stats["objective/kl"] == pytest.approx(float((k1 * ACTION).sum(1).mean()))
    assert stats["objective/kl_k3"] == pytest.approx(float((k3 * ACTION).sum(1).mean()))
    assert stats["objective/entropy"] == pytest.approx(float((ENTROPY * ACTION).sum() / ACTION.sum()))
    assert stats["objective/entropy"] < 5  # no observation's entropy (50 and up) in it
    # A length is every response token, observations included.
    assert stats["response/length_mean"] == float(RESPONSE.sum(1).float().mean())


def test_without_an_action_mask_every_response_token_counts():
    _, stats = trainer().make_experience(rollout(None), Timer())
    assert stats["objective/entropy"] == pytest.approx(float((ENTROPY * RESPONSE).sum() / RESPONSE.sum()))
    assert stats["response/length_mean"] == float(RESPONSE.sum(1).float().mean())


def test_off_policy_weights_are_over_sampled_tokens_only():
    """The engine's log-probs are 0 at the observations (it sampled none): the ratio there is no
    ratio at all. The weights are 1 there (as on padding) and the statistics do not count them."""
    exp, stats = trainer("rollout.is_correction=tis", "rollout.is_cap=2.0", "rollout.max_staleness=1").make_experience(
        rollout(), Timer())
    assert stats["rollout/is_weight_mean"] == 1.0 and stats["rollout/is_clipped_frac"] == 0.0
    assert stats["rollout/is_nonfinite_frac"] == 0.0
    assert torch.equal(exp.is_weights, torch.ones(2, 6))


def test_the_experience_scores_the_last_sampled_token():
    exp, _ = trainer().make_experience(rollout(), Timer())
    kl = LOGP - REF
    assert float(exp.rewards[0, 5]) == pytest.approx(1.0 - 0.1 * float(kl[0, 5]))
    assert float(exp.rewards[1, 2]) == pytest.approx(-1.0 - 0.1 * float(kl[1, 2]))
    assert torch.equal(exp.rewards[OBSERVATION], torch.zeros(int(OBSERVATION.sum())))


def test_the_post_sync_check_compares_sampled_tokens_only():
    """The engine's log-probs are 0 at the observations, the actor's are not: no mismatch."""
    from types import SimpleNamespace

    class Engine:
        def generate(self, prompt_ids, prompts, params, seed=0, logprobs=False):
            return rollout()

    t = trainer("rl.on_invariant=error")
    t.rollout, t.prompts = Engine(), SimpleNamespace(ids=[[1], [2]], texts=["p", "q"])
    t.rollout_engine = SimpleNamespace(title="stand-in", config_block="lean")
    assert t.check_sync(1e-6) == 0.0
