"""Online DPO and rejection sampling as algorithms, on hand-worked numbers."""

from __future__ import annotations

import math

import pytest
import torch

from tether.algorithms import algorithm
from tether.algorithms.online_dpo import PairedDPOLoss, PairedExperience, pair_sums
from tether.algorithms.rejection_sampling import WinnerNLLLoss, winner_nll
from tether.config import RLConfig, load_config
from tether.common.errors import ConfigError, TrainingError
from tether.roles.policy import PolicyOutput
from tether.types import Experience, Rollout

NAME_PAIRS, NAME_RS = "online_" + "dpo", "r" + "s"  # the registry spells the names


def cfg(name, *extra):
    return load_config(RLConfig, None, ["model.name_or_path=m", "prompts=p", "reward.models=[r]",
                                         f"algorithm={name}", "rollout.batch_size=2", "rl.minibatch_size=4", *extra])


def two_rows(mask) -> Rollout:
    mask = torch.tensor(mask)
    ids = torch.ones_like(mask)
    return Rollout(ids, ids, ids, mask, torch.tensor([True, True]), ["p", "p"], ["a", "b"])


# A pair: the chosen row sums -2 (policy) and -3 (reference), the rejected -0.5 and -1 (one token).
LOGP = torch.tensor([[-1.0, -1.0], [-0.5, 0.0]])
REF = torch.tensor([[-1.5, -1.5], [-1.0, 0.0]])
MASK = [[1, 1], [1, 0]]


def paired(sign, group_id=(0, 0)) -> PairedExperience:
    z = torch.zeros(2, 2)
    return PairedExperience(two_rows(MASK), LOGP, REF, None, torch.zeros(2), z, z, z,
                            pair_sign=torch.tensor(sign), group_id=torch.tensor(group_id))


def test_pair_sums_pick_the_chosen_and_rejected_rows():
    pc, pr, rc, rr, has = pair_sums(LOGP, REF, torch.tensor(MASK), torch.tensor([1, -1]), 2)
    assert (pc.item(), pr.item(), rc.item(), rr.item(), has.item()) == (-2.0, -0.5, -3.0, -1.0, True)


def test_paired_dpo_loss_by_hand():
    # h = (-2 + 3) - (-0.5 + 1) = 0.5; beta 0.2: -log sigmoid(0.1) = log(1 + e^-0.1) = 0.644397
    loss, stats = PairedDPOLoss(beta=0.2, group_size=2)(PolicyOutput(LOGP.clone().requires_grad_()), paired([1, -1]))
    assert loss.item() == pytest.approx(math.log(1 + math.exp(-0.1)), abs=1e-6)
    assert stats["pairs/accuracy"] == 1.0 and stats["pairs/margin"] == pytest.approx(0.1)
    assert stats["check/ratio_deviation"] == 0.0
    loss.backward()


def test_a_group_without_a_pair_gives_a_zero_loss_with_a_gradient():
    logp = LOGP.clone().requires_grad_()
    loss, stats = PairedDPOLoss(beta=0.2, group_size=2)(PolicyOutput(logp), paired([0, 0]))
    loss.backward()
    assert loss.item() == 0.0 and stats["pairs/accuracy"] == 0.0 and torch.equal(logp.grad, torch.zeros(2, 2))
    assert PairedDPOLoss(0.2, 2).micro_weight(paired([0, 0])) == 0.0


def test_a_micro_batch_that_splits_a_group_is_an_error():
    with pytest.raises(TrainingError, match="splits a prompt's group"):
        PairedDPOLoss(beta=0.2, group_size=2)(PolicyOutput(LOGP), paired([1, -1], group_id=(0, 1)))


def test_online_dpo_experience_pairs_best_and_worst():
    algo = algorithm(NAME_PAIRS, cfg(NAME_PAIRS))
    ro = two_rows(MASK)
    exp, stats = algo.experience(ro, LOGP, REF, None, torch.tensor([0.3, 1.0]), 0.1)
    assert exp.pair_sign.tolist() == [-1, 1] and exp.group_id.tolist() == [0, 0]
    assert stats == {"pairs/fraction": 1.0, "pairs/score_gap": pytest.approx(0.7)}
    assert algo.actor_loss(0.1).beta == 0.1  # beta is kl.coef (the controller's value)


def test_winner_nll_by_hand():
    logp = torch.tensor([[-1.0, -2.0], [-3.0, -4.0]])
    assert winner_nll(logp, torch.tensor([[1.0, 1.0], [0.0, 0.0]])).item() == pytest.approx(1.5)
    assert winner_nll(logp, torch.tensor([[1.0, 0.0], [1.0, 1.0]])).item() == pytest.approx(8.0 / 3)


def test_rejection_sampling_keeps_the_best_of_each_group_and_its_tokens_only():
    algo = algorithm(NAME_RS, cfg(NAME_RS, "kl.coef=0", "group.size=2"))
    exp, stats = algo.experience(two_rows(MASK), LOGP, REF, None, torch.tensor([0.3, 1.0]), 0.0)
    assert exp.advantages.tolist() == [[0.0, 0.0], [1.0, 0.0]]  # the winner's response tokens
    assert stats["selection/kept"] == 0.5 and stats["selection/winner_score"] == 1.0
    loss, _ = algo.actor_loss(0.0)(PolicyOutput(LOGP), exp)
    assert loss.item() == pytest.approx(0.5)


def test_rejection_sampling_ranks_by_the_kl_shaped_score():
    # Summed k1 KL: row 0 (-1 + 1.5) x 2 = 1, row 1 -0.5 + 1 = 0.5. By score row 0 wins (0.9 > 0.5);
    # with beta 1 row 0 scores 0.9 - 1 = -0.1 and row 1 0.5 - 0.5 = 0: row 1 wins.
    algo = algorithm(NAME_RS, cfg(NAME_RS, "kl.coef=1", "group.size=2"))
    scores = torch.tensor([0.9, 0.5])
    exp, stats = algo.experience(two_rows(MASK), LOGP, REF, None, scores, 1.0)
    assert exp.advantages[:, 0].tolist() == [0.0, 1.0]
    exp, _ = algo.experience(two_rows(MASK), LOGP, REF, None, scores, 0.0)
    assert exp.advantages[:, 0].tolist() == [1.0, 0.0]
    assert stats["objective/non_score_reward"] == pytest.approx((-1.0 - 0.5) / 2)


def test_rejection_sampling_kl_loss_term():
    algo = algorithm(NAME_RS, cfg(NAME_RS, "kl.placement=loss", "kl.coef=0.5", "group.size=2"))
    loss_fn = algo.actor_loss(0.5)
    assert isinstance(loss_fn, WinnerNLLLoss) and loss_fn.kl_in_loss and loss_fn.kl_estimator == "k3"
    winners = torch.tensor([[1.0, 1.0], [0.0, 0.0]])
    exp = Experience(two_rows(MASK), LOGP, REF, None, torch.zeros(2), winners, winners, winners)
    loss, stats = loss_fn(PolicyOutput(LOGP), exp)
    # k3 at each winner token (log ref - log pi = -0.5): exp(-0.5) + 0.5 - 1 = 0.106531
    k3 = math.exp(-0.5) - 0.5
    assert stats["ppo/policy/kl_loss"] == pytest.approx(k3, abs=1e-6)
    assert loss.item() == pytest.approx(1.0 + 0.5 * k3, abs=1e-6)


def test_selection_block_is_rejection_samplings_only():
    with pytest.raises(ConfigError, match="selection.keep"):
        cfg("grpo", "selection.keep=2")
    assert cfg(NAME_RS, "selection.keep=2").selection.keep == 2


def test_online_dpo_micro_batches_hold_whole_groups():
    with pytest.raises(ConfigError, match="whole groups"):
        cfg(NAME_PAIRS, "group.size=4", "rollout.batch_size=4", "rl.minibatch_size=8", "rl.grad_accum_steps=4")
    with pytest.raises(ConfigError, match="kl.placement"):
        cfg(NAME_PAIRS, "kl.placement=loss")
