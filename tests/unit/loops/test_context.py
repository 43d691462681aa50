"""Length limits fitted to the models' context (docs/reliability.md, first new-user trial, class 2),
on hand-worked numbers."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tether.common.errors import ConfigError
from tether.loops.common import LengthLimit, fit_to_context, smallest_context
from tether.models import context_length


def config(**fields):
    return SimpleNamespace(**fields)


@pytest.mark.parametrize("cfg,expected", [
    (config(max_position_embeddings=64), 64),
    (config(n_positions=1024), 1024),          # GPT-2
    (config(seq_length=8192), 8192),
    (config(max_position_embeddings=True), None),  # a bool is not a length
    (config(hidden_size=32), None),
])
def test_context_length(cfg, expected):
    assert context_length(cfg) == expected
    assert context_length(SimpleNamespace(config=cfg)) == expected  # a model works too


def test_smallest_context_names_the_model():
    models = {"a": config(max_position_embeddings=64), "b": config(n_positions=32), "c": config()}
    assert smallest_context(models) == (32, "b")
    assert smallest_context({"c": config()}) == (None, "")


def test_limit_within_the_context_is_kept():
    assert fit_to_context(64, "data.max_length", {"m": config(max_position_embeddings=64)}) == LengthLimit(64)
    assert fit_to_context(512, "data.max_length", {"m": config()}) == LengthLimit(512)  # no limit known


def test_limit_past_the_context_is_capped_and_says_why():
    limit = fit_to_context(512, "data.max_length", {"gpt2": config(n_positions=32)})
    assert limit.tokens == 32
    assert "data.max_length=512" in limit.capped_by and "'gpt2' is 32 positions" in limit.capped_by


def test_reserved_tokens_leave_the_rest_to_the_prompt():
    # 256 + 24 > 64: prompts get 64 - 24 = 40 tokens.
    limit = fit_to_context(256, "rollout.max_prompt_length", {"m": config(max_position_embeddings=64)},
                           24, "rollout.max_new_tokens")
    assert limit.tokens == 40 and "minus rollout.max_new_tokens=24" in limit.capped_by
    # 16 + 48 = 64 fits exactly.
    assert fit_to_context(16, "rollout.max_prompt_length", {"m": config(max_position_embeddings=64)},
                          48, "rollout.max_new_tokens") == LengthLimit(16)


def test_reserved_tokens_that_fill_the_context_are_a_config_error():
    with pytest.raises(ConfigError, match=r"'rollout.max_new_tokens' = 64: .*'m' \(64 positions\).*at most 63"):
        fit_to_context(8, "rollout.max_prompt_length", {"m": config(max_position_embeddings=64)},
                       64, "rollout.max_new_tokens")
