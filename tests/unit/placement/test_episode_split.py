"""Episodes on several ranks or workers: each runs the episodes of its share of the prompts (the
prompt rows split with the prompts) and the shares joined give the one-process rollout, field for
field: the action masks, the per-turn rewards (a share whose environments gave none included) and
the episode records."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import tether.distributed.shard as shard
import tether.placement.data_parallel as data_parallel
from tether.bench.shapes import sized_tokenizer
from tether.common.dispatch import declarations
from tether.environments.base import Episodes, Step
from tether.placement.data_parallel import DataParallelPlacement
from tether.placement.local import LocalPlacement
from tether.placement.ray_placement import Group, RayPlacement
from tether.rollout.base import SamplingParams, concat_rollouts
from tether.rollout.episodes import EpisodeEngine
from tether.types import Rollout

PARAMS = SamplingParams(max_new_tokens=8)


class FollowUps:
    """A row's ``follow`` texts as the user's next turns; each turn rewarded ``row["reward"]`` (None: no reward)."""

    tools: list = []

    def reset(self, row: dict, where: str) -> list[dict]:
        self.pending, self.reward = list(row["follow"]), row.get("reward")
        return [{"role": "user", "content": row["prompt"]}]

    def step(self, text: str) -> Step:
        if not self.pending:
            return Step([], self.reward, done=True)
        return Step([{"role": "user", "content": self.pending.pop(0)}], self.reward)


class Answers:
    """Samples, for an episode of prompt ``p``, the words 'about p' once per turn and the stop token."""

    def __init__(self, tokenizer):
        self.tokenizer, self.stop = tokenizer, tokenizer.convert_tokens_to_ids("<|im_end|>")
        self.seen: list[list[str]] = []

    def generate(self, prompt_ids, prompts, params, chunk_size=None) -> Rollout:
        self.seen.append(list(prompts))
        rows = [self.tokenizer.encode(f"about {p}", add_special_tokens=False) + [self.stop] for p in prompts]
        width = max(map(len, rows))
        ids = torch.tensor([r + [0] * (width - len(r)) for r in rows])
        mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows])
        return Rollout(torch.zeros(len(rows), 1, dtype=torch.long), torch.ones(len(rows), 1, dtype=torch.long), ids,
                       mask, torch.ones(len(rows), dtype=torch.bool), list(prompts), [""] * len(rows),
                       sampled_logprobs=-0.5 * mask.float())


# Five episodes of 1 to 3 turns; only the last two rows' environments give rewards.
ROWS = [{"prompt": f"q{i}", "follow": [f"more {i}"] * (i % 3), **({"reward": 0.5 * i} if i >= 3 else {})}
        for i in range(5)]
TEXTS = [r["prompt"] for r in ROWS]
IDS = [[1]] * len(ROWS)  # not read: each episode renders its own opening


@pytest.fixture(scope="module")
def tokenizer():
    return sized_tokenizer(2048)


def engine(tokenizer) -> EpisodeEngine:
    return EpisodeEngine(Answers(tokenizer), tokenizer, Episodes(FollowUps), max_turns=3, max_tokens=200)


def assert_same(got: Rollout, want: Rollout) -> None:
    for f in dataclasses.fields(Rollout):
        a, b = getattr(got, f.name), getattr(want, f.name)
        if isinstance(b, torch.Tensor):
            assert a is not None and torch.equal(a, b), f.name
        else:
            assert a == b, f.name


def test_a_share_without_rewards_joins_as_zeros_and_the_records_follow(tokenizer):
    first, second = engine(tokenizer).generate(IDS[:3], TEXTS[:3], PARAMS, rows=ROWS[:3]), \
        engine(tokenizer).generate(IDS[3:], TEXTS[3:], PARAMS, rows=ROWS[3:])
    assert first.token_rewards is None and second.token_rewards is not None
    joined = concat_rollouts([first, second], tokenizer.pad_token_id)
    assert_same(joined, engine(tokenizer).generate(IDS, TEXTS, PARAMS, rows=ROWS))
    assert [r.stats.turns for r in joined.episodes] == [1, 2, 3, 1, 2]
    # A part without an action mask (a single-turn share): every response token was sampled.
    plain = dataclasses.replace(second, action_mask=None, token_rewards=None, episodes=None)
    mixed = concat_rollouts([first, plain], tokenizer.pad_token_id)
    assert torch.equal(mixed.action_mask[3:, :plain.response_mask.shape[1]], plain.response_mask)
    assert mixed.token_rewards is None and mixed.episodes is None


def test_each_rank_runs_the_episodes_of_its_share(tokenizer, monkeypatch):
    # Rank 1 of 2: prompts and rows 3, 4 and 4 again (5 padded to 6); rank 0's share gathered before it.
    monkeypatch.setattr(shard, "world_size", lambda: 2)
    monkeypatch.setattr(shard, "rank", lambda: 1)
    monkeypatch.setattr(data_parallel, "rank", lambda: 1)
    rank0 = engine(tokenizer).generate(IDS[:3], TEXTS[:3], PARAMS, rows=ROWS[:3])
    monkeypatch.setattr(data_parallel, "all_gather_objects", lambda part: [rank0, part])
    mine = engine(tokenizer)
    placement = DataParallelPlacement(LocalPlacement({"rollout": mine}), pad_id=tokenizer.pad_token_id)
    out = placement.call("rollout", "generate", IDS, TEXTS, PARAMS, rows=ROWS)
    assert mine.engine.seen[0] == ["q3", "q4", "q4"]
    assert_same(out, engine(tokenizer).generate(IDS, TEXTS, PARAMS, rows=ROWS))


class _Remote:
    """A Ray worker's ``call``, run at once in this process."""

    def __init__(self, roles):
        self.roles = roles

    def remote(self, role, method, seed, kwargs, *args):
        return getattr(self.roles[role], method)(*args, **kwargs)


class _Worker:
    def __init__(self, roles):
        self.call = _Remote(roles)


def test_each_ray_worker_runs_the_episodes_of_its_share(tokenizer):
    workers = [{"rollout": engine(tokenizer)}, {"rollout": engine(tokenizer)}]
    placement = RayPlacement.__new__(RayPlacement)
    group = Group(("actor",), "actor", workers=[_Worker(w) for w in workers])
    placement.route, placement.groups, placement._puts = {"rollout": group}, [group], {}
    placement.dispatch, placement.pad_id = declarations(workers[0]), tokenizer.pad_token_id
    placement._get = lambda group, what, refs: refs
    assert placement.dispatch == {"rollout": {"generate": "prompts"}}
    out = placement.call("rollout", "generate", IDS, TEXTS, PARAMS, rows=ROWS)
    assert [w["rollout"].engine.seen[0] for w in workers] == [["q0", "q1", "q2"], ["q3", "q4", "q4"]]
    assert_same(out, engine(tokenizer).generate(IDS, TEXTS, PARAMS, rows=ROWS))
