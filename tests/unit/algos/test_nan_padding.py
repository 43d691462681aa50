"""NaN in padding never reaches a loss, a reduction or a gradient.

Every (B, A) input that a model or a previous step fills (log-probs, reference log-probs, values,
advantages, returns, entropies, KL) gets NaN at every padded position; each loss and reduction of
``tether.algos`` and ``tether.algorithms`` must then give finite values equal to those with zeros
in the padding, and finite gradients equal to theirs. (The DPO losses take (B,) summed log-probs,
no masks: nothing to pad.)
"""

from __future__ import annotations

import itertools

import pytest
import torch

from tether.algorithms.clipped import ClippedPolicyLoss
from tether.algorithms.grpo import GRPO
from tether.algorithms.ppo import PPO, PPOActorLoss, PPOCriticLoss
from tether.algorithms.reinforce_pp import ReinforcePP
from tether.algorithms.rloo import RLOO
from tether.algos import (
    KL_KINDS,
    explained_variance,
    gae_advantages,
    kl_estimate,
    masked_mean,
    masked_sum,
    masked_var,
    masked_whiten,
    ppo_policy_loss,
    shape_rewards,
    sft_loss,
    value_loss,
)
from tether.algos.group import (
    AGGREGATIONS,
    RATIO_LEVELS,
    aggregate,
    reinforce_pp_advantages,
    sequence_kl_penalty,
)
from tether.config import RLConfig, load_config
from tether.roles.policy import PolicyOutput
from tether.types import Experience, Rollout

MASK = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0], [1, 1, 1, 0]])
PAD = ~MASK.bool()
FIELDS = ("logp", "old", "ref", "values", "old_values", "returns", "advantages", "entropy", "rewards")


def inputs(fill: float) -> dict[str, torch.Tensor]:
    """Fixed random (4, 4) tensors whose padded positions hold ``fill``."""
    g = torch.Generator().manual_seed(0)
    out = {}
    for name in FIELDS:
        x = torch.randn(MASK.shape, generator=g)
        if name in ("logp", "old", "ref"):
            x = -x.abs() - 0.1  # log-probs are negative
        out[name] = x.masked_fill(PAD, fill)
    return out


def rollout() -> Rollout:
    ids = torch.ones(MASK.shape, dtype=torch.long)
    return Rollout(ids, ids, ids, MASK, torch.ones(4, dtype=torch.bool), ["p"] * 4, ["r"] * 4)


def experience(x: dict) -> Experience:
    return Experience(rollout(), x["old"], x["ref"], x["old_values"], torch.tensor([1.0, -1.0, 0.5, 0.0]),
                      x["rewards"], x["advantages"], x["returns"])


def flat(result) -> list[torch.Tensor]:
    """Every number in a result (tensor, float, tuple, dataclass, dict of stats) as tensors."""
    if isinstance(result, torch.Tensor):
        return [result.detach()]
    if isinstance(result, (int, float)):
        return [torch.tensor(float(result))]
    if isinstance(result, dict):
        return [t for key in sorted(result) for t in flat(result[key])]
    if isinstance(result, (tuple, list)):
        return [t for item in result for t in flat(item)]
    if hasattr(result, "__dataclass_fields__"):
        return [t for name in result.__dataclass_fields__ for t in flat(getattr(result, name))]
    return []


def check(fn, grad_of: tuple[str, ...] = ()):
    """fn(inputs) with NaN padding == fn(inputs) with zero padding, all finite; so are the
    gradients of its first output's sum with respect to ``grad_of``."""
    results, grads = [], []
    for fill in (0.0, float("nan")):
        x = inputs(fill)
        for name in grad_of:
            x[name].requires_grad_(True)
        out = fn(x)
        results.append(flat(out))
        if grad_of:
            first = out[0] if isinstance(out, tuple) else getattr(out, "loss", out)
            first.sum().backward()
            grads.append([x[name].grad for name in grad_of])
    clean, padded = results
    assert len(clean) == len(padded) and clean
    for a, b in zip(clean, padded):
        assert torch.isfinite(b).all(), f"non-finite result {b}"
        torch.testing.assert_close(b, a, rtol=0, atol=0)
    for a, b in zip(*grads) if grads else ():
        assert torch.isfinite(b).all(), f"non-finite gradient {b}"
        torch.testing.assert_close(b, a, rtol=0, atol=0)


@pytest.mark.parametrize("reduce", [masked_mean, masked_sum, masked_var, masked_whiten])
def test_masked_reductions(reduce):
    check(lambda x: reduce(x["values"], MASK), grad_of=("values",))


@pytest.mark.parametrize("kind, how", list(itertools.product(KL_KINDS, AGGREGATIONS)))
def test_kl_estimators_through_aggregate(kind, how):
    # The estimates in padding are NaN too; aggregate never reads them.
    check(lambda x: aggregate(kl_estimate(x["logp"], x["ref"], kind), MASK, how, max_tokens=4))


@pytest.mark.parametrize("how", AGGREGATIONS)
def test_aggregate(how):
    check(lambda x: aggregate(x["entropy"], MASK, how, max_tokens=4), grad_of=("entropy",))


def test_gae_whitening_and_rewards():
    check(lambda x: gae_advantages(x["rewards"], x["values"], MASK, 0.99, 0.95))
    check(lambda x: shape_rewards(torch.tensor([1.0, 2.0, 3.0, 4.0]), x["rewards"], 0.1, MASK))
    check(lambda x: reinforce_pp_advantages(x["rewards"], MASK, 0.9))
    check(lambda x: explained_variance(x["values"], x["returns"], MASK))


def test_sequence_kl_penalty():
    check(lambda x: sequence_kl_penalty(torch.tensor([1.0, 2.0, 3.0, 4.0]), x["rewards"], MASK, 0.1))


def test_pure_losses():
    check(lambda x: ppo_policy_loss(x["logp"], x["old"], x["advantages"], MASK, 0.2), grad_of=("logp",))
    check(lambda x: value_loss(x["values"], x["old_values"], x["returns"], MASK, 0.2), grad_of=("values",))
    check(lambda x: value_loss(x["values"], x["old_values"], x["returns"], MASK, None), grad_of=("values",))
    check(lambda x: sft_loss(x["logp"], MASK), grad_of=("logp",))


@pytest.mark.parametrize("kl_in_loss", [False, True])
def test_ppo_actor_and_critic_losses(kl_in_loss):
    critic = PPOCriticLoss(vf_coef=0.1, clip=0.2)
    actor = PPOActorLoss(0.2, 0.01, kl_in_loss, "k3", 0.1, critic)
    check(lambda x: actor(PolicyOutput(x["logp"], x["entropy"]), experience(x)), grad_of=("logp", "entropy"))
    # A shared-trunk value head: the actor's loss carries the value loss.
    check(lambda x: actor(PolicyOutput(x["logp"], x["entropy"], x["values"]), experience(x)),
          grad_of=("logp", "values"))
    check(lambda x: critic(x["values"], experience(x)), grad_of=("values",))


@pytest.mark.parametrize("how, level, kind", list(itertools.product(AGGREGATIONS, RATIO_LEVELS, KL_KINDS[1:])))
def test_clipped_loss_at_every_aggregation_and_ratio_level(how, level, kind):
    loss = ClippedPolicyLoss(0.2, 0.28, how, 4, 0.01, True, kind, 0.1, ratio_level=level)
    check(lambda x: loss(PolicyOutput(x["logp"], x["entropy"]), experience(x)), grad_of=("logp", "entropy"))


@pytest.mark.parametrize("algo, extra", [(PPO, ("rollout.batch_size=4",)),
                                         (GRPO, ("algorithm=grpo", "group.size=2", "rollout.batch_size=2")),
                                         (RLOO, ("algorithm=rloo", "group.size=2", "rollout.batch_size=2")),
                                         (ReinforcePP, ("algorithm=reinforce_pp", "rollout.batch_size=4"))])
@pytest.mark.parametrize("placement", ["reward", "loss"])
def test_experience_of_every_algorithm(algo, extra, placement):
    cfg = load_config(RLConfig, None, ["model.name_or_path=m", "prompts=p", "reward.models=[r]",
                                        "rl.minibatch_size=4", f"kl.placement={placement}", *extra])
    scores = torch.tensor([1.0, -1.0, 0.5, 0.0])

    def run(x):
        values = x["values"] if algo is PPO else None
        exp, stats = algo(cfg).experience(rollout(), x["old"], x["ref"], values, scores, 0.1)
        return exp.rewards, exp.advantages, exp.returns, stats

    check(run)
