"""Settings under which no update can move the policy are refused with the config, naming the key."""

from __future__ import annotations

import pytest

from tether.config import RLConfig, load_config
from tether.common.errors import ConfigError

BASE = ["model.name_or_path=m", "prompts=p"]


def test_online_dpo_with_a_zero_fixed_beta_is_refused():
    with pytest.raises(ConfigError, match=r"'kl.coef' = 0 with algorithm=online_dpo.*zero gradient"):
        load_config(RLConfig, None, [*BASE, "reward.models=[r]", "algorithm=online_dpo", "kl.coef=0"])
    # An adaptive controller moves beta off 0; another algorithm's kl.coef=0 means no KL penalty.
    load_config(RLConfig, None, [*BASE, "reward.models=[r]", "algorithm=online_dpo", "kl.coef=0",
                                  "kl.controller=adaptive", "kl.target=6"])
    load_config(RLConfig, None, [*BASE, "reward.models=[r]", "algorithm=grpo", "kl.coef=0"])


def test_reward_terms_that_all_weigh_zero_are_refused():
    terms = "reward.terms=[{name: a, callable: 'm:f', weight: 0}, {name: b, callable: 'm:g', weight: 0.0}]"
    base_terms = [*BASE, "algorithm=grpo"]
    with pytest.raises(ConfigError, match=r"every term's weight is 0 \(a, b\)"):
        load_config(RLConfig, None, [*base_terms, terms])
    load_config(RLConfig, None, [*base_terms, terms.replace("weight: 0.0", "weight: 0.5")])
