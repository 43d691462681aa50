"""A process reward model as a reward term (``reward.terms[i].prm``; roles/process_reward.py): its
rewards sit at the steps' last tokens; PPO (and GRPO with group.advantage=process) take them
where they fall, weighted, and the term leaves the sequence score; the other algorithms get their
sum as the term's score; settings that would act on the sequence score only are refused."""

from __future__ import annotations

import pytest
import torch

from tether.algorithms.grpo import GRPO
from tether.algos.process import process_advantages
from tether.common.errors import ConfigError
from tether.config import RLConfig, load_config
from tether.loops.rl_setup import score_rollout
from tether.placement import role
from tether.placement.local import LocalPlacement
from tether.roles import CallableReward, ComposedReward
from tether.roles.process_reward import ProcessReward, separator_of, step_end_scores
from tether.types import Rollout

SEP = 5  # the arith tokenizer's "+", the separator below
# Two rows of width 4: row 0 "7 + 3" then EOS cut (3 sampled tokens), row 1 four tokens, a separator at 1.
IDS = torch.tensor([[58, SEP, 54, 0], [58, SEP, 54, 3]])
MASK = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]])
DENSE = torch.tensor([[0.0, 0.5, -1.0, 0.0], [0.0, 2.0, 0.0, 1.0]])  # at each step's end


def rollout(token_rewards=None) -> Rollout:
    return Rollout(torch.ones(2, 2, dtype=torch.long), torch.ones(2, 2, dtype=torch.long), IDS, MASK,
                   torch.tensor([False, True]), ["p", "p"], ["7 + 3", "7 + 3"], token_rewards=token_rewards)


class FixedSteps:
    """A dense source with fixed step rewards (what ProcessReward answers, without a model)."""

    dense = True

    def token_scores(self, ro):
        return DENSE.clone()

    def score(self, ro):
        return DENSE.sum(1)


def answer(prompts, responses):
    return [1.0, 0.0]


def cfg(algorithm: str, *extra):
    group = ["group.size=2"] if algorithm != "ppo" else []
    return load_config(RLConfig, None, ["model.name_or_path=m", "prompts=p", f"algorithm={algorithm}", *group,
                                         "reward.terms=[{name: steps, prm: prm_dir, weight: 2.0}, "
                                         "{name: answer, callable: 'x:y'}]", *extra])


def test_step_end_scores_keep_the_ends_only():
    per_position = torch.tensor([[0.3, -0.2, 0.9], [1.0, 2.0, 3.0]])
    ends = torch.tensor([[False, True, True], [True, False, False]])
    torch.testing.assert_close(step_end_scores(per_position, ends, "logit"),
                               torch.tensor([[0.0, -0.2, 0.9], [1.0, 0.0, 0.0]]))
    # log_prob: log sigmoid(s) = -log(1 + e^-s): s = 0 gives log 0.5; every step reward <= 0.
    log_prob = step_end_scores(torch.tensor([[0.0, 2.0, -2.0]]), torch.tensor([[True, True, False]]), "log_prob")
    torch.testing.assert_close(log_prob, torch.tensor([[-0.693147, -0.126928, 0.0]]), atol=1e-6, rtol=0)
    with pytest.raises(ValueError, match="expected one of logit, log_prob"):
        step_end_scores(per_position, ends, "probability")


def test_ppo_takes_the_step_rewards_at_their_tokens_and_leaves_the_term_out_of_the_score():
    reward = role(LocalPlacement({"reward": ComposedReward([("steps", 2.0, FixedSteps()),
                                                           ("answer", 1.0, CallableReward(answer))])}), "reward")
    raw, stats, ro = score_rollout(reward, rollout(), cfg("ppo"), "cpu")
    assert raw.tolist() == [1.0, 0.0]  # the answer term alone
    assert torch.equal(ro.token_rewards, 2.0 * DENSE)
    assert stats["reward/steps"] == pytest.approx((-0.5 + 3.0) / 2) and stats["reward/answer"] == 0.5
    # An environment's per-turn rewards already there: the step rewards add to them.
    turn = torch.tensor([[0.0, 0.0, 0.25, 0.0], [0.0, 0.0, 0.0, 0.0]])
    _, _, ro = score_rollout(reward, rollout(turn), cfg("ppo"), "cpu")
    assert torch.equal(ro.token_rewards, 2.0 * DENSE + turn)


def test_a_sequence_level_algorithm_gets_the_sum_as_the_terms_score():
    reward = role(LocalPlacement({"reward": ComposedReward([("steps", 2.0, FixedSteps()),
                                                           ("answer", 1.0, CallableReward(answer))])}), "reward")
    raw, stats, ro = score_rollout(reward, rollout(), cfg("rloo"), "cpu")
    assert raw.tolist() == pytest.approx([2.0 * -0.5 + 1.0, 2.0 * 3.0])
    assert ro.token_rewards is None and stats["reward/steps"] == pytest.approx(1.25)


def test_grpo_process_supervision_reads_the_prm_steps():
    config = cfg("grpo", "group.advantage=process", "kl.placement=loss", "group.scale_by_std=false")
    reward = role(LocalPlacement({"reward": ComposedReward([("steps", 1.0, FixedSteps()),
                                                           ("answer", 1.0, CallableReward(answer))])}), "reward")
    raw, _, ro = score_rollout(reward, rollout(), config, "cpu")
    logp = torch.zeros(2, 4)
    exp, _ = GRPO(config).experience(ro, logp, logp, None, raw, kl_coef=0.0)
    # Steps: row 0 ends at 1 (0.5) and 2 (-1.0 + score 1.0 = 0); row 1 at 1 (2.0) and 3 (1.0 + score 0).
    # Mean of the four: (0.5 + 0 + 2 + 1) / 4 = 0.875; centred 0.5-0.875, -0.875, 1.125, 0.125.
    a, b, c, d = -0.375, -0.875, 1.125, 0.125
    assert torch.allclose(exp.advantages, torch.tensor([[a + b, a + b, b, 0.0], [c + d, c + d, d, d]]), atol=1e-6)
    ends = torch.tensor([[0, 1, 1, 0], [0, 1, 0, 1]]).bool()
    steps = DENSE + torch.tensor([[0, 0, 1.0, 0], [0, 0, 0, 0]])
    assert torch.allclose(exp.advantages, process_advantages(steps, ends, MASK, 2, False), atol=1e-6)


@pytest.mark.parametrize("extra, needle", [
    (["reward.terms[0].normalize=true"], r"reward.terms\[0\].normalize' = True: term 'steps' gives rewards per"),
    (["reward.terms[0].limit=1.0", "reward.terms[0].weight=1.0"], r"reward.terms\[0\].limit' = 1.0"),
    (["reward.normalize=running"], r"'reward.normalize' = 'running': reward term\(s\) 'steps' give rewards per"),
    (["reward.clip=3"], r"'reward.clip' = 3.0"),
])
def test_settings_that_would_miss_the_step_rewards_are_refused(extra, needle):
    with pytest.raises(ConfigError, match=needle):
        cfg("ppo", *extra)
    cfg("rloo", *extra)  # a sequence-level algorithm: the term is an ordinary score there


def test_process_supervision_accepts_a_prm_term_instead_of_an_environment():
    cfg("grpo", "group.advantage=process", "kl.placement=loss")


def test_prm_reward_is_a_prm_terms_setting():
    assert cfg("ppo").reward.terms[0].prm_reward == "log_prob"  # the default
    assert cfg("ppo", "reward.terms[0].prm_reward=logit").reward.terms[0].prm_reward == "logit"
    with pytest.raises(ConfigError, match=r"reward.terms\[1\].prm_reward' = 'logit' is set with no prm"):
        cfg("ppo", "reward.terms[1].prm_reward=logit")


@pytest.fixture(scope="module")
def tiny_prm():
    from transformers import LlamaForSequenceClassification

    from tether.engines import InferenceEngine
    from tether.tasks.arith import build_tokenizer
    from tether.tasks.arith.model import build_config

    tok = build_tokenizer()
    config = build_config(tok)
    config.num_labels, config.pad_token_id, config.step_separator = 1, tok.pad_token_id, "+"
    torch.manual_seed(0)
    model = LlamaForSequenceClassification(config).eval()
    return tok, model, ProcessReward(InferenceEngine(model, torch.device("cpu"), "fp32"), [SEP], form="logit")


def test_a_prm_scores_each_step_end_with_its_head_there(tiny_prm):
    from tether.models.forward import scalar_outputs

    tok, model, prm = tiny_prm
    ro = rollout()
    dense = prm.token_scores(ro)
    with torch.no_grad():
        head = scalar_outputs(model, ro.sequences, ro.attention_mask)[:, 2:]
    ends = torch.tensor([[0, 1, 1, 0], [0, 1, 0, 1]]).bool()  # separators and each row's last sampled token
    assert torch.equal(dense != 0, ends)
    torch.testing.assert_close(dense[ends], head[ends].float())
    torch.testing.assert_close(prm.score(ro), dense.sum(1))
    assert prm.score_terms(ro).shape == (2, 1)
    log_prob = ProcessReward(prm.engine, [SEP]).token_scores(ro)  # the default form: log sigmoid of the head
    torch.testing.assert_close(log_prob[ends], torch.nn.functional.logsigmoid(head[ends].float()))


def test_the_separator_comes_from_the_checkpoint_and_is_one_token(tiny_prm):
    tok, model, _ = tiny_prm
    assert separator_of(model.config, "p", "reward.terms[0].prm", tok) == [SEP]

    class Bare:
        pass

    with pytest.raises(ConfigError, match=r"reward.terms\[0\].prm' = 'p': its config.json has no step_separator"):
        separator_of(Bare(), "p", "reward.terms[0].prm", tok)
    two = type("C", (), {"step_separator": "7 +"})()
    with pytest.raises(ConfigError, match="encodes to 2 tokens"):
        separator_of(two, "p", "reward.terms[0].prm", tok)
