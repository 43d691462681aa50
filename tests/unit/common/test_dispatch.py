"""Role methods declare how a placement dispatches them (``tether.common.dispatch``): the reading
methods of the built-in roles split by rows, generation engines split by prompts, the rest go to
every worker."""

from __future__ import annotations

import pytest

from tether.common.dispatch import ALL, PROMPTS, ROWS, declarations, dispatch_of, prompts, rows, split_prompts
from tether.roles import Actor, CallableReward, Critic, EnsembleReward, ModelReward, Reference, SharedTrunkCritic
from tether.roles.remote_reward import RemoteReward
from tether.rollout.episodes import EpisodeEngine
from tether.rollout.hf import HFGenerationEngine
from tether.rollout.lean import LeanGenerationEngine
from tether.rollout.vllm_engine import VLLMGenerationEngine


class Scorer:
    @rows
    def lengths(self, batch):
        return [len(x) for x in batch]

    @prompts
    def sample(self, prompt_ids, texts, params):
        return texts

    def update(self, batch):
        return len(batch)

    @classmethod
    @rows
    def shared(cls, batch):
        return batch


def test_a_method_carries_its_declaration():
    role = Scorer()
    assert dispatch_of(role, "lengths") == ROWS
    assert dispatch_of(role, "sample") == PROMPTS
    assert dispatch_of(role, "update") == ALL
    assert dispatch_of(role, "shared") == ROWS
    assert dispatch_of(role, "missing") == ALL
    assert role.lengths(["ab", "c"]) == [2, 1]  # the decorator leaves the method as it was


def test_declarations_name_only_the_split_methods():
    assert declarations({"scorer": Scorer(), "plain": object()}) == {
        "scorer": {"lengths": ROWS, "sample": PROMPTS, "shared": ROWS}, "plain": {}}


def test_the_built_in_roles_declare_what_the_placements_used_to_list():
    # The table both placements kept: (role, method) split by rows; ("rollout", "generate") by prompts.
    for cls, method in [(Actor, "logprobs"), (Actor, "values"), (Reference, "logprobs"), (Critic, "values"),
                        (SharedTrunkCritic, "values"), (ModelReward, "score"), (CallableReward, "score"),
                        (EnsembleReward, "score"), (RemoteReward, "score")]:
        assert getattr(getattr(cls, method), "__tether_dispatch__", ALL) == ROWS, (cls.__name__, method)
    for cls in (LeanGenerationEngine, HFGenerationEngine, VLLMGenerationEngine, EpisodeEngine):
        assert getattr(cls.generate, "__tether_dispatch__", ALL) == PROMPTS, cls.__name__
    for cls, method in [(Actor, "update"), (Critic, "update"), (Actor, "state_dict"), (Actor, "save_pretrained")]:
        assert getattr(getattr(cls, method), "__tether_dispatch__", ALL) == ALL, (cls.__name__, method)


def test_prompt_aligned_keywords_are_split_with_the_prompts():
    second_half = lambda v: v[2:]  # noqa: E731
    ids, texts, kwargs = split_prompts(second_half, [[1], [2], [3]], ["a", "b", "c"],
                                       {"rows": [{"i": 0}, {"i": 1}, {"i": 2}], "chunk_size": 4})
    assert (ids, texts, kwargs) == ([[3]], ["c"], {"rows": [{"i": 2}], "chunk_size": 4})  # the rest whole
    assert split_prompts(second_half, [[1], [2], [3]], ["a", "b", "c"], {"rows": None})[2] == {"rows": None}
    with pytest.raises(ValueError, match="rows= holds 2 entries for 3 prompts"):
        split_prompts(second_half, [[1], [2], [3]], ["a", "b", "c"], {"rows": [{}, {}]})
