"""``reward.terms``: a composed reward's config (config/reward_terms.py, config/rl_blocks.py)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from tether.config import RLConfig, describe, load_config, rebase_paths, save_config, to_dict
from tether.config.reward_terms import RewardTermConfig
from tether.common.errors import ConfigError

ROOT = Path(__file__).resolve().parents[3]
BASE = ["model.name_or_path=m", "prompts=p", "algorithm=grpo"]  # no critic: none needs a reward model
TWO_TERMS = "reward.terms=[{name: answer, callable: 'm:f'}, {name: length, length_penalty: 0.01, length_target: 8}]"


def ppo(*overrides, path=None):
    return load_config(RLConfig, path, [*BASE, *overrides])


def error_of(*overrides, path=None) -> str:
    with pytest.raises(ConfigError) as info:
        ppo(*overrides, path=path)
    return str(info.value)


def test_terms_from_yaml(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"reward": {"terms": [
        {"name": "rm", "models": ["a", "b"], "combine": "min", "weight": 0.5},
        {"name": "polite", "regex": "^sure", "weight": 0.1},
        {"name": "remote", "url": "http://h:8000", "api_key": "k"},
    ]}}))
    cfg = ppo(path=path)
    rm, polite, remote = cfg.reward.terms
    assert isinstance(rm, RewardTermConfig) and rm.models == ["a", "b"] and rm.combine == "min" and rm.weight == 0.5
    assert polite.regex == "^sure" and polite.weight == 0.1 and remote.weight == 1.0 and remote.api_key == "k"
    assert cfg.reward.model_sources() == [("a", "reward.terms[0].models"), ("b", "reward.terms[0].models")]


def test_terms_from_overrides_and_an_item_by_its_index():
    cfg = ppo(TWO_TERMS, "reward.terms[1].weight=2", "reward.terms[0].callable=pkg.mod:fn")
    answer, length = cfg.reward.terms
    assert (answer.name, answer.callable, answer.weight) == ("answer", "pkg.mod:fn", 1.0)
    assert (length.length_penalty, length.length_target, length.weight) == (0.01, 8, 2.0)


def test_an_index_past_the_list_names_the_list():
    msg = error_of(TWO_TERMS, "reward.terms[2].weight=2")
    assert "'reward.terms'" in msg and "2 item(s)" in msg and "[2]" in msg
    assert "no list" in error_of("reward.terms[0].weight=2", "reward.models=[r]")


def test_save_load_and_to_dict_round_trip(tmp_path):
    cfg = ppo(TWO_TERMS)
    assert to_dict(cfg)["reward"]["terms"][1]["length_penalty"] == 0.01
    save_config(cfg, tmp_path / "c.yaml")
    assert load_config(RLConfig, tmp_path / "c.yaml") == cfg


def test_a_term_model_path_is_rebased(tmp_path):
    (tmp_path / "rm").mkdir()
    data = to_dict(ppo("reward.terms=[{name: rm, models: [rm]}]"))
    rebased = rebase_paths(RLConfig, data, tmp_path)
    assert rebased["reward"]["terms"][0]["models"] == [str(tmp_path / "rm")]
    assert data["reward"]["terms"][0]["models"] == ["rm"]  # the input is left alone


def test_terms_exclude_the_single_source_keys():
    msg = error_of(TWO_TERMS, "reward.models=[r]")
    assert "'reward.terms'" in msg and "'reward.models'" in msg and "second source" in msg
    assert "'reward.callable'" in error_of(TWO_TERMS, "reward.callable=m:g")


def test_no_source_at_all_names_terms_too():
    assert "'reward.terms'" in error_of()


def test_duplicate_names_name_both_terms():
    msg = error_of("reward.terms=[{name: a, regex: x}, {name: b, regex: y}, {name: a, regex: z}]")
    assert "'reward.terms[2].name'" in msg and "reward.terms[0]" in msg


@pytest.mark.parametrize("name", ["", "has space", "1st", "a/b"])
def test_a_name_must_be_an_identifier(name):
    msg = error_of(f"reward.terms=[{{name: '{name}', regex: x}}]")
    assert "'reward.terms[0].name'" in msg


def test_a_term_is_exactly_one_source():
    msg = error_of("reward.terms=[{name: a, regex: x}, {name: b, weight: 2}]")
    assert "'reward.terms[1]'" in msg and "no reward source" in msg and "length_penalty" in msg
    msg = error_of("reward.terms=[{name: a, callable: 'm:f', regex: x}]")
    assert "'reward.terms[0]'" in msg and "'callable' and 'regex'" in msg


def test_an_unknown_term_key_is_named_with_its_index():
    msg = error_of("reward.terms=[{name: a, regex: x}, {name: b, regexp: y}]")
    assert "'reward.terms[1].regexp'" in msg and "Did you mean 'reward.terms[1].regex'" in msg
    assert "'reward.terms[0]'" in error_of("reward.terms=[rm]") and "mapping" in error_of("reward.terms=[rm]")


def test_values_are_checked_with_their_keys():
    assert "'reward.terms[0].weight'" in error_of("reward.terms=[{name: a, regex: x, weight: big}]")
    assert "'reward.terms[0].length_target'" in error_of(
        "reward.terms=[{name: a, length_penalty: 0.1, length_target: -1}]")
    assert "'reward.terms[0].length_penalty'" in error_of("reward.terms=[{name: a, length_penalty: -0.1}]")


def test_an_invalid_regex_is_a_config_error_naming_the_key():
    msg = error_of("reward.terms=[{name: a, regex: '(unclosed'}]")
    assert "'reward.terms[0].regex'" in msg and "regular expression" in msg


@pytest.mark.parametrize("term, key", [
    ("{name: a, callable: 'm:f', combine: min}", "combine"),
    ("{name: a, models: [r1, r2], std_coef: 2}", "std_coef"),
    ("{name: a, models: [r], std_coef: 2}", "std_coef"),
    ("{name: a, regex: x, api_key: k}", "api_key"),
    ("{name: a, regex: x, length_target: 4}", "length_target"),
])
def test_a_term_setting_that_would_do_nothing_is_refused(term, key):
    msg = error_of(f"reward.terms=[{term}]")
    assert f"'reward.terms[0].{key}'" in msg and "no effect" in msg


def test_the_blocks_own_combine_is_refused_beside_terms():
    assert "'reward.combine'" in error_of(TWO_TERMS, "reward.combine=min")


def test_critic_from_the_reward_takes_the_first_model_term_or_refuses():
    from tether.roles.sources import critic_source

    cfg = ppo("algorithm=ppo", "reward.terms=[{name: a, regex: x}, {name: rm, models: [r1, r2]}]")
    assert critic_source(cfg) == ("r1", "reward.terms[1].models")
    msg = error_of("algorithm=ppo", TWO_TERMS)  # critic.init defaults to reward
    assert "'critic.init'" in msg and "reward.terms" in msg and "critic.init=policy" in msg
    assert ppo("algorithm=ppo", TWO_TERMS, "critic.init=policy").critic.init == "policy"


def test_the_term_list_is_one_described_key_and_every_term_field_has_help():
    rows = {key: help_text for key, _, help_text in describe(RLConfig)}
    assert "length_penalty" in rows["reward.terms"] and not any(k.startswith("reward.terms.") for k in rows)
    assert all(f.metadata["help"].strip() for f in dataclasses.fields(RewardTermConfig))


def test_the_verifiable_demo_preset_loads():
    cfg = load_config(RLConfig, ROOT / "configs" / "demo" / "grpo_verifiable.yaml")
    assert cfg.run.out.startswith("runs/demo") and not cfg.reward.models and not cfg.needs_critic
    assert [t.name for t in cfg.reward.terms] == ["answer", "length", "polite"]
    assert cfg.reward.terms[0].callable == "tether.tasks.arith.verify:answer_reward"


def test_objective_and_constraint_keys_are_checked():
    cfg = ppo("reward.terms=[{name: gold, callable: 'm:f', normalize: true}, "
              "{name: bang, regex: '!', limit: 0.3, multiplier_lr: 0.05, multiplier_max: 10}]")
    gold, bang = cfg.reward.terms
    assert gold.normalize and bang.limit == 0.3 and bang.multiplier_lr == 0.05 and bang.multiplier_max == 10
    assert "with no limit" in error_of("reward.terms=[{name: a, regex: x, multiplier_lr: 0.05}]")
    assert "on a cost constraint (its limit" in error_of(
        "reward.terms=[{name: a, regex: x}, {name: b, regex: y, limit: 0.1, normalize: true}]")
    assert "on a cost constraint (its multiplier weighs it" in error_of(
        "reward.terms=[{name: a, regex: x}, {name: b, regex: y, limit: 0.1, weight: 3}]")
    assert "every term is a cost constraint" in error_of("reward.terms=[{name: b, regex: y, limit: 0.1}]")
    assert "multiplier_init' = 5.0 is above" in error_of(
        "reward.terms=[{name: a, regex: x}, {name: b, regex: y, limit: 0.1, multiplier_init: 5, multiplier_max: 1}]")
    # a zero weight on every objective is still nothing to learn, whatever the constraints
    assert "every term's weight is 0" in error_of(
        "reward.terms=[{name: a, regex: x, weight: 0}, {name: b, regex: y, limit: 0.1}]")


def test_a_term_logged_as_an_objective_may_not_take_the_loops_own_names():
    assert "objective/kl is the loop's own metric" in error_of(
        "reward.terms=[{name: kl, regex: x, normalize: true}]")
    ppo("reward.terms=[{name: kl, regex: x}]")  # a plain sum logs reward/<name> only
