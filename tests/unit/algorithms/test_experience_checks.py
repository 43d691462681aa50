"""What an algorithm's experience() returns is checked where the RL loop calls it
(algorithms/checks.py experience_of): every built-in passes, and a plugin's advantages of the
wrong shape, a missing stats dict or a non-Experience are one paragraph naming the algorithm,
its class, the field, what came and what was expected; nothing is broadcast."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from tether.algorithms import ALGORITHMS, algorithm
from tether.algorithms.checks import check_experience, experience_of
from tether.config import RLConfig, load_config
from tether.common.errors import TrainingError
from tether.types import Experience, Rollout

B, A = 4, 3


def rollout() -> Rollout:
    ids = torch.ones(B, A, dtype=torch.long)
    mask = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 0, 0], [1, 1, 1]])
    return Rollout(ids, ids, ids, mask, torch.ones(B, dtype=torch.bool), ["p"] * B, ["r"] * B)


def inputs(critic: bool):
    torch.manual_seed(0)
    logp, ref = -torch.rand(B, A), -torch.rand(B, A)
    return logp, ref, torch.rand(B, A) if critic else None, torch.rand(B), 0.1


BUILT_IN = ("ppo", "grpo", "rloo", "reinforce_pp", "online_dpo", "rs")


@pytest.mark.parametrize("name", BUILT_IN)
def test_every_built_in_algorithms_experience_passes(name):
    spec = ALGORITHMS[name]
    cfg = load_config(RLConfig, None, ["model.name_or_path=m", "prompts=p", "reward.models=[r]", f"algorithm={name}",
                                        "group.size=2", "rollout.batch_size=2", "rl.minibatch_size=4"])
    algo = algorithm(name, cfg)
    exp, stats = experience_of(algo, name, rollout(), *inputs(spec.needs_critic))
    assert isinstance(exp, Experience) and isinstance(stats, dict)


class Plugin:
    """A plugin algorithm whose experience() returns what ``answer`` makes of a correct one."""

    samples_per_prompt = 1

    def __init__(self, answer):
        self.answer = answer

    def experience(self, rollout, logprobs, ref_logprobs, values, scores, kl_coef):
        adv = (scores - scores.mean())[:, None] * rollout.response_mask
        return self.answer(Experience(rollout, logprobs, ref_logprobs, None, scores, adv, adv, adv))


def refused(answer) -> str:
    with pytest.raises(TrainingError) as info:
        experience_of(Plugin(answer), "my_pg", rollout(), *inputs(False))
    text = str(info.value)
    assert "\n" not in text and "Algorithm 'my_pg' (" in text and ":Plugin)" in text
    return text


def test_advantages_of_one_per_response_are_refused_not_broadcast():
    text = refused(lambda exp: (dataclasses.replace(exp, advantages=exp.scores.clone()), {}))
    assert "returned advantages as a torch.float32 tensor of shape (4,)" in text
    assert "4 responses x 3 response tokens" in text and "shape (4, 3)" in text and "Nothing is broadcast" in text


@pytest.mark.parametrize("field, value, needle", [
    ("returns", torch.zeros(B, A + 1), "returns as a torch.float32 tensor of shape (4, 4)"),
    ("advantages", torch.zeros(B, A, dtype=torch.long), "torch.int64 tensor of shape (4, 3)"),
    ("rewards", None, "rewards as None"),
    ("scores", torch.zeros(B, 1), "scores as a torch.float32 tensor of shape (4, 1)"),
    ("advantages", [[0.0] * A] * B, "advantages as a list"),
])
def test_each_field_of_the_wrong_kind_is_named(field, value, needle):
    text = refused(lambda exp: (dataclasses.replace(exp, **{field: value}), {}))
    assert needle in text, text


def test_a_lone_experience_or_another_answer_is_refused():
    assert "returned an Experience; expected a tuple (Experience, dict" in refused(lambda exp: exp)
    assert "returned (an Experience, None)" in refused(lambda exp: (exp, None))
    assert "returned (a dict, a dict)" in refused(lambda exp: ({}, {}))


def test_a_correct_answer_comes_back_as_it_was():
    answer = Plugin(lambda exp: (exp, {"x": 1.0})).experience(rollout(), *inputs(False))
    assert check_experience(answer, rollout(), "my_pg") is not None
    exp, stats = check_experience(answer, rollout(), "my_pg")
    assert exp is answer[0] and stats == {"x": 1.0}
