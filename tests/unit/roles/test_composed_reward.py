"""A composed reward (roles/reward_terms.py): its built-in terms on hand-worked values, its
per-term scores split by rows on every placement, the loop's scoring helper, and how it is built."""

from __future__ import annotations

import pytest
import torch

import tether.distributed.shard as shard
import tether.placement.data_parallel as data_parallel
from tether.config import RLConfig, load_config
from tether.common.dispatch import ROWS, declarations
from tether.loops.rl_setup import score_rollout
from tether.placement import role
from tether.placement.data_parallel import DataParallelPlacement
from tether.placement.local import LocalPlacement
from tether.placement.ray_placement import Group, RayPlacement
from tether.roles import CallableReward, ComposedReward, LengthPenaltyReward, ModelReward, RegexReward
from tether.roles.sources import build_reward, reward_members
from tether.types import Rollout

RESPONSES = ["sure . 7 .", "the answer is 7", "ok ! 12 !", "no"]
LENGTHS = [5, 4, 6, 2]  # response tokens (EOS included), as the response mask counts them


def rollout(responses=RESPONSES, lengths=LENGTHS) -> Rollout:
    b, a = len(responses), max(lengths)
    mask = torch.tensor([[1] * n + [0] * (a - n) for n in lengths])
    return Rollout(prompt_ids=torch.ones(b, 2, dtype=torch.long), prompt_mask=torch.ones(b, 2, dtype=torch.long),
                   response_ids=torch.ones(b, a, dtype=torch.long) * mask, response_mask=mask,
                   ended=torch.ones(b, dtype=torch.bool), prompts=["what is 3 + 4 ?"] * b, responses=list(responses))


def last_is_seven(prompts, responses):
    return [float(r.split()[-1] == "7") for r in responses]


def composed() -> ComposedReward:
    return ComposedReward([("answer", 1.0, CallableReward(last_is_seven)),
                           ("length", 2.0, LengthPenaltyReward(0.5, 4)),
                           ("polite", 0.1, RegexReward(r"^(sure|ok)\b"))])


# answer: 0 (last word "."), 1, 0 ("!"), 0;  length: -0.5*max(0, L-4) = -0.5, 0, -1, 0;  polite: 1, 0, 1, 0
TERMS = torch.tensor([[0.0, -0.5, 1.0], [1.0, 0.0, 0.0], [0.0, -1.0, 1.0], [0.0, 0.0, 0.0]])
# 1*answer + 2*length + 0.1*polite
COMBINED = torch.tensor([-1.0 + 0.1, 1.0, -2.0 + 0.1, 0.0])


def test_built_in_terms_on_hand_worked_values():
    ro = rollout()
    torch.testing.assert_close(LengthPenaltyReward(0.5, 4).score(ro), torch.tensor([-0.5, 0.0, -1.0, 0.0]))
    torch.testing.assert_close(RegexReward(r"^(sure|ok)\b").score(ro), torch.tensor([1.0, 0.0, 1.0, 0.0]))
    torch.testing.assert_close(RegexReward(r"\d+$").score(ro), torch.tensor([0.0, 1.0, 0.0, 0.0]))


def test_composed_scores_each_term_and_their_weighted_sum():
    reward, ro = composed(), rollout()
    torch.testing.assert_close(reward.score_terms(ro), TERMS)
    torch.testing.assert_close(reward.score(ro), COMBINED)


def test_its_methods_are_declared_by_rows():
    assert declarations({"reward": composed()})["reward"] == {"score": ROWS, "score_terms": ROWS,
                                                               "score_terms_and_tokens": ROWS}


def test_the_loop_helper_gives_the_sum_and_each_terms_mean():
    cfg = load_config(RLConfig, None, [
        "model.name_or_path=m", "prompts=p", "algorithm=grpo",
        r"reward.terms=[{name: answer, callable: 'm:f'}, {name: length, length_penalty: 0.5, length_target: 4, "
        r"weight: 2}, {name: polite, regex: '^(sure|ok)\b', weight: 0.1}]"])
    proxy = role(LocalPlacement({"reward": composed()}), "reward")
    raw, stats, _ = score_rollout(proxy, rollout(), cfg, "cpu")
    torch.testing.assert_close(raw, COMBINED)
    assert stats == pytest.approx({"reward/answer": 0.25, "reward/length": -0.375, "reward/polite": 0.5})


def test_without_terms_the_helper_is_the_plain_score():
    cfg = load_config(RLConfig, None, ["model.name_or_path=m", "prompts=p", "reward.callable=m:f",
                                        "critic.init=policy"])
    proxy = role(LocalPlacement({"reward": CallableReward(last_is_seven)}), "reward")
    raw, stats, _ = score_rollout(proxy, rollout(), cfg, "cpu")
    assert raw.tolist() == [0.0, 1.0, 0.0, 0.0] and stats == {}


def test_data_parallel_scores_its_share_of_the_rows(monkeypatch):
    # Rank 1 of 2: rows 2 and 3 of 4; the gather (a collective) is recorded.
    monkeypatch.setattr(shard, "world_size", lambda: 2)
    monkeypatch.setattr(shard, "rank", lambda: 1)
    gathered = []
    monkeypatch.setattr(data_parallel, "gather_rows", lambda out, n, device: gathered.append((out, n)) or out)
    placement = DataParallelPlacement(LocalPlacement({"reward": composed()}), pad_id=0)
    out = placement.call("reward", "score_terms", rollout())
    torch.testing.assert_close(out, TERMS[2:])
    assert len(gathered) == 1 and gathered[0][1] == 4


class _Worker:
    """A Ray worker's ``call.remote`` run at once in this process."""

    def __init__(self, roles):
        self.call = self
        self.roles = roles

    def remote(self, role_name, method, seed, kwargs, *args):
        return getattr(self.roles[role_name], method)(*args, **kwargs)


def test_ray_splits_the_term_scores_over_the_group_and_joins_them_in_order():
    workers = [{"reward": composed()}, {"reward": composed()}]
    placement = RayPlacement.__new__(RayPlacement)
    group = Group(("reward",), "reward", workers=[_Worker(w) for w in workers])
    placement.ray, placement.route, placement.groups, placement._puts = None, {"reward": group}, [group], {}
    placement.dispatch = declarations(workers[0])
    placement._get = lambda group, what, refs: refs
    torch.testing.assert_close(placement.call("reward", "score_terms", rollout()), TERMS)


def test_build_reward_composes_the_terms_in_order():
    cfg = load_config(RLConfig, None, [
        "model.name_or_path=m", "prompts=p", "algorithm=grpo",
        "reward.terms=[{name: answer, callable: 'tether.tasks.arith.verify:answer_reward'}, "
        "{name: length, length_penalty: 0.1, length_target: 3, weight: 0.5}, {name: polite, regex: '^sure'}]"])
    reward = build_reward(cfg, tokenizer=None, settings=None)  # no model to load
    assert isinstance(reward, ComposedReward) and reward.names == ["answer", "length", "polite"]
    assert reward.weights == [1.0, 0.5, 1.0]
    answer, length, polite = reward.sources
    assert isinstance(answer, CallableReward) and isinstance(polite, RegexReward)
    assert (length.coef, length.target) == (0.1, 3)
    # "what is 3 + 4 ?": the last number is 7, 7, 12, none.
    torch.testing.assert_close(reward.score_terms(rollout())[:, 0], torch.tensor([1.0, 1.0, 0.0, 0.0]))


def test_reward_members_finds_the_models_inside_terms():
    model = ModelReward.__new__(ModelReward)
    reward = ComposedReward([("rm", 1.0, model), ("length", 1.0, LengthPenaltyReward(0.1, 0))])
    assert reward_members(reward) == [model]
