"""The multi-step demo task: gold step labels and judges by hand, the tokenizer covers the world,
and the built files hold what they say (held-out problems kept out, labels the gold ones)."""

from __future__ import annotations

import json
import random

import pytest

from tether.tasks.steps import judge, world
from tether.tasks.steps.build import build_task

PROMPT = "what is ( 3 plus 4 ) times 5 ?"


@pytest.mark.parametrize("response, labels, gold, right", [
    ("3 plus 4 is 7 ; 7 times 5 is 35", [True, True], 1.0, True),
    ("3 plus 4 is 7 ; 7 times 5 is 36", [True, False], 0.5, False),
    ("3 plus 4 is 8 ; 8 times 5 is 40", [False, False], 0.0, False),  # right from a wrong start: not correct
    ("3 plus 4 is 7", [True], 0.5, False),
    ("35", [False], 0.0, True),  # the answer alone: right, but no correct step
    ("3 plus 4 is 7 ; ; 7 times 5 is 35 ; 35", [True, True, False], 1.0, True),
])
def test_gold_labels_and_judges_by_hand(response, labels, gold, right):
    assert world.step_labels(PROMPT, response) == labels
    assert judge.gold_score(PROMPT, response) == gold
    assert judge.is_correct(PROMPT, response) is right
    assert judge.gold_score(PROMPT, response, ended=False) == 0.0
    assert judge.answer_score(PROMPT, response) == float(right) and judge.answer_score(PROMPT, response, False) == 0.0


def test_problems_and_chat_prompts():
    assert len(world.PROMPTS) == 9 * 9 ** 3 and world.step_values("what is ( 9 times 9 ) times 9 ?") == (81, 729)
    assert world.step_values("what is ( 1 minus 9 ) times 9 ?") == (-8, -72)
    chat = [{"role": "user", "content": PROMPT}]
    assert judge.is_correct(chat, "3 plus 4 is 7 ; 7 times 5 is 35") and judge.gold_score("not a problem", "1") == 0.0
    assert judge.gold_reward([PROMPT, PROMPT], ["... 35", "... 34"]) == [1.0, 0.0]


def test_every_word_of_the_world_is_one_token():
    from tether.tasks.steps.tokenizer import build_tokenizer

    tok = build_tokenizer()
    ids = tok(" ".join(world.VOCAB_WORDS), add_special_tokens=False)["input_ids"]
    assert len(ids) == len(world.VOCAB_WORDS) and tok.unk_token_id not in ids
    for problem in (world.PROMPTS[0], world.PROMPTS[-1], "what is ( 1 minus 9 ) times 9 ?"):
        steps = world.sample_steps(random.Random(0), problem, 0.0)  # slips included
        text = f"{problem} {world.join_steps(steps)}"
        assert tok.unk_token_id not in tok(text)["input_ids"] and tok.decode(tok(text, add_special_tokens=False)[
            "input_ids"]) == text


def test_the_built_files(tmp_path):
    sizes = dict(n_sft=40, n_sft_eval=8, n_prm=60, n_prm_eval=10, n_pairs=30, n_pairs_eval=6, n_eval_prompts=20)
    manifest = build_task(tmp_path, seed=3, **sizes)
    assert build_task(tmp_path, seed=3, **sizes) == manifest  # a complete directory is reused

    def rows(name):
        return [json.loads(line) for line in (tmp_path / f"{name}.jsonl").read_text().splitlines()]

    held = {r["prompt"] for r in rows("eval_prompts")}
    assert len(held) == 20 and not held & {r["prompt"] for r in rows("rl_prompts")}
    assert not held & {r["messages"][0]["content"] for r in rows("sft_train")}
    assert not held & {r["prompt"] for name in ("prm_train", "prefs_train") for r in rows(name)}
    assert {r["prompt"] for r in rows("prm_eval")} <= held
    for r in rows("prm_train"):
        assert r["labels"] == world.step_labels(r["prompt"], world.join_steps(r["completions"]))
    for r in rows("prefs_train") + rows("prefs_eval"):
        assert judge.is_correct(r["prompt"], r["chosen"]) and not judge.is_correct(r["prompt"], r["rejected"])
        assert r["gold_chosen"] == judge.gold_score(r["prompt"], r["chosen"])
    assert len(rows("prefs_train")) == 30 and manifest["step_separator"] == ";"
    assert 0 < manifest["prm_correct_step_share"] < 1


@pytest.mark.parametrize("name, cls", [("steps_sft", "SFTConfig"), ("steps_prm", "PRMConfig"),
                                       ("steps_rm", "RewardModelConfig")])
def test_the_presets_load_and_point_at_the_task(name, cls):
    from pathlib import Path

    import tether.config as config

    cfg = config.load_config(getattr(config, cls), Path(__file__).parents[3] / "configs" / "demo" / f"{name}.yaml")
    assert cfg.run.out.startswith("runs/steps/") and cfg.data.train.startswith("runs/steps/task/")
    assert getattr(cfg, "step_separator", world.SEPARATOR) == world.SEPARATOR


@pytest.mark.parametrize("name, term", [("steps_ppo", "prm"), ("steps_ppo_rm", "models"), ("steps_grpo", "prm")])
def test_the_rl_presets_load_with_their_reward(name, term):
    from pathlib import Path

    from tether.config import RLConfig, load_config

    cfg = load_config(RLConfig, Path(__file__).parents[3] / "configs" / "demo" / f"{name}.yaml")
    assert cfg.algorithm == name.split("_")[1] and cfg.prompts.startswith("runs/steps/task/")
    assert getattr(cfg.reward.terms[0], term) and cfg.reward.terms[1].weight == 0
