"""What must fit a prompt's group of responses is checked with the config (config/rl_blocks.py
check_group_counts), not when the first group is ranked or updated, after the models are loaded
and a rollout sampled: rejection sampling's selection.keep, and token-budget micro-batches under
an algorithm that compares a group's responses."""

from __future__ import annotations

import pytest

from tether.registry.algorithms import ALGORITHMS, AlgorithmSpec, register_algorithm
from tether.config import RLConfig, load_config
from tether.common.errors import ConfigError

MINIMAL = ["model.name_or_path=m", "prompts=p", "reward.models=[r]"]
RS = "r" + "s"  # the registry spells the name


def rl(*overrides):
    return load_config(RLConfig, None, [*MINIMAL, *overrides])


def one_paragraph(text: str) -> None:
    assert "\n" not in text and "Traceback" not in text


def test_more_winners_than_samples_is_refused_naming_both_keys():
    with pytest.raises(ConfigError) as err:
        rl(f"algorithm={RS}", "group.size=4", "rollout.batch_size=2", "rl.minibatch_size=4", "selection.keep=5")
    text = str(err.value)
    one_paragraph(text)
    assert "Config key 'selection.keep' = 5" in text and "group.size = 4;" in text and "at most 4" in text
    assert "raise group.size to at least 5" in text


def test_the_default_group_size_is_named_as_the_algorithms_default():
    """group.size unset: rejection sampling's default of 4 is what keep must fit."""
    with pytest.raises(ConfigError) as err:
        rl(f"algorithm={RS}", "rollout.batch_size=2", "rl.minibatch_size=4", "selection.keep=6")
    assert f"group.size = 4 ({RS}'s default)" in str(err.value)


@pytest.mark.parametrize("keep", [1, 3, 4])
def test_winners_up_to_the_group_pass(keep):
    cfg = rl(f"algorithm={RS}", "group.size=4", "rollout.batch_size=2", "rl.minibatch_size=4", f"selection.keep={keep}")
    assert cfg.selection.keep == keep


def test_rs_dry_run_stops_on_it_before_any_model_is_read(tiny_task, tmp_path, capsys, monkeypatch):
    import transformers

    from tether.cli import main

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained",
                        lambda *a, **k: pytest.fail("from_pretrained was called"))
    task = tiny_task["dir"]
    code = main([RS, f"model.name_or_path={task / 'base_model'}", f"prompts={task / 'ppo_prompts.jsonl'}",
                 "reward.callable=tether.tasks.arith.judge:gold_reward", "group.size=2", "selection.keep=3",
                 f"run.out={tmp_path / 'run'}", "--dry-run"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "Traceback" not in err and "\n" not in err
    assert "'selection.keep' = 3" in err and "group.size = 2" in err
    assert not (tmp_path / "run").exists()


@pytest.fixture
def whole_groups_plugin():
    """A plugin's algorithm whose loss compares a group's responses (registry whole_groups), that
    does not list rl.micro_batch_tokens among the keys it ignores."""
    name = "group_pairs_probe"
    register_algorithm(AlgorithmSpec(name, object, "Group pairs", "x", "x", needs_critic=False, default_group_size=2,
                                     min_group_size=2, whole_groups=True))
    yield name
    ALGORITHMS.pop(name, None)


def test_token_budget_micro_batches_under_a_whole_groups_algorithm_are_refused(whole_groups_plugin):
    with pytest.raises(ConfigError) as err:
        rl(f"algorithm={whole_groups_plugin}", "rollout.batch_size=2", "rl.minibatch_size=4",
           "rl.micro_batch_tokens=64")
    text = str(err.value)
    one_paragraph(text)
    assert "Config key 'rl.micro_batch_tokens' = 64" in text and f"algorithm={whole_groups_plugin}" in text
    assert "splitting the groups" in text and "rl.grad_accum_steps" in text
    assert rl(f"algorithm={whole_groups_plugin}", "rollout.batch_size=2", "rl.minibatch_size=4").algorithm


def test_token_budget_micro_batches_under_a_row_algorithm_pass():
    assert rl("algorithm=grpo", "rollout.batch_size=2", "rl.minibatch_size=8",
              "rl.micro_batch_tokens=64").rl.micro_batch_tokens == 64


@pytest.mark.parametrize("name", ["grpo", "rloo", "online_dpo", RS])
def test_a_group_of_one_is_refused_with_the_config_for_every_algorithm_comparing_a_group(name):
    """The sibling count check (the registry's min_group_size), also before any model is read."""
    with pytest.raises(ConfigError, match=r"'group.size' = 1: .* at least 2"):
        rl(f"algorithm={name}", "group.size=1", "rollout.batch_size=4", "rl.minibatch_size=4")
