"""critic.shared_trunk: a value head on the actor's trunk, trained with one pass per minibatch.

Checks that the joint pass computes exactly the gradients of the two losses done separately,
that the value loss moves the actor's trunk (it is a different model), and that a
shared-trunk run checkpoints its value head and resumes bit for bit.
"""

from __future__ import annotations

import pytest
import torch

from tether.bench.runner import bench_overrides
from tether.bench.setup import SIZES, build_setup
from tether.config import RLConfig, load_config
from tether.common.errors import ConfigError, ModelError
from tether.loops.common import Timer
from tether.loops.rl_run import rl_trainer, run_rl
from tether.loops.rl import RLTrainer
from tether.roles import SharedTrunkCritic, ValueHead
from tether.roles.build import make_roles
from tether.roles.policy import PolicyWithValueHead, policy_forward

from test_resume import comparable, ppo_overrides, same_weights


def trainer(*extra: str) -> RLTrainer:
    torch.manual_seed(0)
    cfg = load_config(RLConfig, None, bench_overrides(4, 6, 1, 2, "fp32") + ["critic.shared_trunk=true", *extra])
    setup = build_setup(SIZES["micro"], n_prompts=8, seed=3)
    m = setup.models
    return rl_trainer(cfg, make_roles(cfg, m["policy"], m["reference"], m["critic"], m["reward"], setup.tokenizer),
                       setup.prompts)


def forward(t: RLTrainer, rollout, with_entropy: bool = False):
    """The actor's training forward (log-probs and, on the shared trunk, values) with gradients."""
    actor = t.placement.roles["actor"]
    return policy_forward(actor.engine.model, rollout, actor.temperature, with_entropy, actor.engine.autocast)


def test_roles_share_the_actor_and_start_at_zero_values():
    t = trainer()
    critic, actor = t.placement.roles["critic"], t.placement.roles["actor"]
    assert isinstance(critic, SharedTrunkCritic) and critic.actor is actor
    assert isinstance(actor.engine.model, PolicyWithValueHead) and actor.engine.model.value_head is critic.head
    assert sum(p.numel() for p in critic.head.parameters()) == SIZES["micro"].hidden + 1
    rollout = t.rollout.generate(*t.next_prompts(), t.sampling)
    assert torch.equal(critic.values(rollout), torch.zeros_like(rollout.response_mask, dtype=torch.float32))


def test_joint_pass_gives_the_gradients_of_the_two_losses_done_separately():
    t = trainer("optim.max_grad_norm=null")  # the joint gradient: the actor's optimiser clips it
    t.step()  # values and heads are no longer trivial after one update
    rollout = t.rollout.generate(*t.next_prompts(), t.sampling)
    exp, _ = t.make_experience(rollout, timer=Timer())
    shared = t.placement.roles["actor"].engine.model  # the LM and the value head: one module
    params = list(shared.parameters())
    actor_loss, critic_loss = t.algo.actor_loss(t.kl_ctl.value), t.algo.critic_loss()

    out = forward(t, exp.rollout, actor_loss.needs_entropy)
    assert out.values is not None  # the joint loss: the surrogate plus the value loss, one pass
    actor_loss(out, exp)[0].backward()
    joint = [p.grad.clone() for p in params]
    shared.zero_grad(set_to_none=True)
    out = forward(t, exp.rollout, actor_loss.needs_entropy)
    policy_only = type(out)(out.logprobs, out.entropy)  # the surrogate alone (no values)
    actor_loss(policy_only, exp)[0].backward()
    critic_loss(forward(t, exp.rollout).values, exp)[0].backward()
    separate = [p.grad.clone() for p in params]
    shared.zero_grad(set_to_none=True)

    for a, b in zip(joint, separate):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)
    assert float(joint[-2].abs().sum()) > 0  # the value head's weight learned something


def test_value_loss_alone_moves_the_actor_trunk():
    t = trainer()
    rollout = t.rollout.generate(*t.next_prompts(), t.sampling)
    exp, _ = t.make_experience(rollout, timer=Timer())
    exp.returns.add_(1.0)  # a value error the head and the trunk both learn from
    with torch.no_grad():  # a zero head passes no gradient to the trunk: give it weights
        t.placement.roles["critic"].head.score.weight.normal_()
    t.algo.critic_loss()(forward(t, exp.rollout).values, exp)[0].backward()
    shared = t.placement.roles["actor"].engine.model
    trunk_grads = [p.grad for p in shared.policy.base_model.parameters() if p.grad is not None]
    assert trunk_grads and any(float(g.abs().sum()) > 0 for g in trunk_grads)
    shared.zero_grad(set_to_none=True)


def test_a_shared_trunk_run_trains_and_reports_both_grad_norms():
    t = trainer()
    head = t.placement.roles["critic"].head
    before = {k: v.clone() for k, v in head.state_dict().items()}
    stats = [t.step() for _ in range(2)][-1]
    assert stats["optim/grad_norm"] == stats["optim/critic_grad_norm"] > 0
    assert stats["ppo/val/loss"] > 0 and "ppo/policy/clipfrac" in stats
    after = head.state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before)
    assert t.update_streams() == 1  # one pass per minibatch: nothing runs side by side


@pytest.mark.parametrize("extra, key", [(["critic.path=/some/critic"], "critic.path"),
                                        (["ppo.critic_warmup_iters=2"], "ppo.critic_warmup_iters")])
def test_config_rejects_what_a_shared_trunk_cannot_do(extra, key):
    with pytest.raises(ConfigError, match=key):
        load_config(RLConfig, None, bench_overrides(4, 6, 1, 2, "fp32") + ["critic.shared_trunk=true", *extra])


def test_value_head_round_trip_and_clear_errors(tmp_path):
    head = ValueHead(8)
    with torch.no_grad():
        head.score.weight.normal_()
    head.save_pretrained(tmp_path / "critic")
    back = ValueHead.from_pretrained(tmp_path / "critic", 8)
    assert torch.equal(back.score.weight, head.score.weight)
    with pytest.raises(ModelError, match="shape"):
        ValueHead.from_pretrained(tmp_path / "critic", 16)
    with pytest.raises(ModelError, match="value_head.safetensors"):
        ValueHead.from_pretrained(tmp_path / "nothing", 8)


class Interrupt(Exception):
    pass


def test_shared_trunk_run_resumes_bitwise(tiny_task, tmp_path):
    def overrides(out):
        return [o for o in ppo_overrides(tiny_task["dir"], out) if o != "critic.init=policy"] + ["critic.shared_trunk=true"]

    straight = tmp_path / "straight"
    run_rl(load_config(RLConfig, None, overrides(straight)))
    assert (straight / "critic" / "value_head.safetensors").is_file()

    out = tmp_path / "resumed"
    cfg = load_config(RLConfig, None, overrides(out))

    def crash_after_third(it, stats, trainer):
        if it == 3:
            raise Interrupt

    with pytest.raises(Interrupt):
        run_rl(cfg, on_iteration=crash_after_third)
    assert (out / "checkpoints" / "step-000002" / "critic" / "value_head.safetensors").is_file()
    run_rl(cfg, resume=True)
    for a, b in zip(comparable(out), comparable(straight)):
        assert a == b, {k: (a.get(k), b.get(k)) for k in set(a) | set(b) if a.get(k) != b.get(k)}
    assert comparable(out) == comparable(straight)
    assert same_weights(out, straight)
