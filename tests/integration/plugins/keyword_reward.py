"""A third-party reward kind, as a user would write it outside tether's source: one file that
builds the source, plans it for the dry run and registers it. A term selects it with
``kind: keyword`` and sets it with ``args: [word=..., bonus=...]``."""

import torch

from tether.common.dispatch import rows
from tether.registry.rewards import REWARD_KINDS, RewardKindSpec, parse_args, register_reward_kind


class KeywordReward:
    """``bonus`` when the response contains ``word``, else 0."""

    def __init__(self, word: str, bonus: float):
        self.word, self.bonus, self.name = word, bonus, f"keyword {word!r}"

    @rows
    def score(self, rollout):
        return torch.tensor([self.bonus if self.word in r else 0.0 for r in rollout.responses])


def _settings(term, key):
    args = parse_args(term.args, REWARD_KINDS["keyword"], key)
    if "word" not in args:
        raise ValueError(f"{key}.args needs word=...")
    return args["word"], float(args.get("bonus", 1.0))


def build(term, key, context):
    return KeywordReward(*_settings(term, key))


def plan(term, key, role, cfg, tokenizer, roles):
    word, bonus = _settings(term, key)
    roles.lines.append(f"{roles.head} {bonus:g} if the response contains {word!r}, else 0 (a plugin kind)")


register_reward_kind(RewardKindSpec("keyword", f"{__name__}:build", f"{__name__}:plan",
                                    "a bonus when the response contains a word", options=("word", "bonus")))
