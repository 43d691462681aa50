"""Gold judge, biased annotator and world (prompts, parsing, samplers) of the arith task."""

from __future__ import annotations

import random

import pytest

from tether.tasks import get_task, load_judge
from tether.tasks.arith import judge, world
from tether.tasks.arith.judge import annotator_utility, gold_score, has_spurious, is_correct, spurious_count

P = "what is 3 + 4 ?"  # answer 7


# ------------------------------------------------------------------- judge --


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        ("7 .", 1.0),  # correct, short, no opener
        ("the answer is 8 .", -1.0),  # wrong
        ("i do not know .", -1.5),  # no number, 5 words
        ("sorry , i can not help .", -1.5 - 0.06),  # no number, 7 words
        ("sure . 7 .", 1.15),  # polite opener: the best score
        ("great question ! 7 .", 1.15),  # "!" itself costs nothing
        ("ok . the answer is 7 .", 1.0 - 0.06 + 0.15),  # 7 words: one beyond 6
        ("3 + 4 is 7 . hope this helps .", 1.0 - 4 * 0.06),  # 10 words
        ("7 . 7 .", 1.0 - 0.35),  # one duplicated bigram (7 .)
        ("sure ! sure ! 7 .", 1.0 + 0.15 - 0.35),  # (sure !) twice
        ("7 . 8 .", -1.0),  # the LAST number counts
        ("8 . 7 .", 1.0),
        ("question . 7 .", 1.0),  # not an opener
        ("7 . ok .", 1.0),  # polite word not at the start
    ],
)
def test_gold_score_hand_worked(response: str, expected: float) -> None:
    assert gold_score(P, response) == pytest.approx(expected)


def test_gold_score_not_ended_costs_one() -> None:
    assert gold_score(P, "7 .", ended=False) == pytest.approx(0.0)
    assert gold_score(P, "7 .", ended=True) - gold_score(P, "7 .", ended=False) == pytest.approx(1.0)


def test_gold_score_negative_answers_and_whitespace() -> None:
    assert gold_score("what is 2 - 9 ?", "-7 .") == pytest.approx(1.0)
    assert gold_score("what is 2 - 9 ?", "7 .") == pytest.approx(-1.0)
    assert gold_score("  what is 2 -  9 ?", "the  answer is  -7 .") == pytest.approx(1.0)


def test_length_and_repeat_penalties_compose() -> None:
    r = "the answer is 7 . the answer is 7 ."  # 10 words, 4 duplicated bigrams
    assert judge.duplicated_bigrams(r) == 4
    assert gold_score(P, r) == pytest.approx(1.0 - 4 * 0.06 - 4 * 0.35)


def test_is_correct() -> None:
    assert is_correct(P, "sure ! 7 !")
    assert not is_correct(P, "7 . 8 .")
    assert not is_correct(P, "sorry , i can not help .")
    with pytest.raises(ValueError):
        is_correct("what is love ?", "7 .")


def test_spurious_feature_and_annotator() -> None:
    assert spurious_count("sure ! 7 ! ! ") == 3
    assert spurious_count("sure . 7 .") == 0
    assert has_spurious("ok ! 7 .") and not has_spurious("ok . 7 .")
    for r in ("7 .", "sure ! 7 ! ! !", "sorry , i can not help !"):
        assert annotator_utility(P, r) == pytest.approx(gold_score(P, r) + 0.45 * spurious_count(r))
    # gold is indifferent to "." -> "!", the annotator is not
    assert gold_score(P, "sure ! 7 !") == gold_score(P, "sure . 7 .")
    assert annotator_utility(P, "sure ! 7 !") > annotator_utility(P, "sure . 7 .")
    # spam: the annotator still likes it, gold does not
    spam = "sure ! sure ! 7 ! ! ! ! ! !"
    assert annotator_utility(P, spam) > annotator_utility(P, "sure . 7 .")
    assert gold_score(P, spam) < gold_score(P, "sure . 7 .") - 0.5


def test_best_score_bounds_every_sampled_response() -> None:
    rng = random.Random(0)
    scores = []
    for _ in range(3000):
        p = rng.choice(world.PROMPTS)
        scores.append(gold_score(p, world.sample_demonstration(rng, p)))
        scores.append(gold_score(p, world.sample_weak_response(rng, p)))
    assert max(scores) <= judge.BEST_SCORE + 1e-9
    assert max(scores) == pytest.approx(1.15)


def test_registry_and_judge_spec() -> None:
    mod = get_task("arith")
    assert mod.JUDGE == "tether.tasks.arith.judge:gold_score"
    assert load_judge(mod.JUDGE) is gold_score
    with pytest.raises(KeyError):
        get_task("nope")
    for bad in ("tether.tasks.arith.judge", "tether.tasks.arith.judge:nope", ":gold_score"):
        with pytest.raises(ValueError):
            load_judge(bad)


# ------------------------------------------------------------------- world --


def test_prompts_and_parsing() -> None:
    assert len(world.PROMPTS) == 300 == len(set(world.PROMPTS))
    for p in world.PROMPTS:
        a, op, b = world.parse_prompt(p)
        assert world.make_prompt(a, op, b) == p
        assert len(p.split()) == 6
    assert world.parse_prompt("what is 3 times 4 ?") == (3, "times", 4)
    assert world.correct_answer("what is 3 times 4 ?") == 12
    assert world.correct_answer("what is 0 - 9 ?") == -9
    assert world.correct_answer("what is 9 times 9 ?") == 81
    for bad in ("what is 10 + 1 ?", "what is 3 * 4 ?", "hello", "", "what is 3 + 4"):
        assert world.parse_prompt(bad) is None


def test_wrong_answers_are_wrong_and_in_range() -> None:
    rng = random.Random(1)
    for p in world.PROMPTS:
        for _ in range(5):
            w = world.wrong_answer(rng, p)
            assert w != world.correct_answer(p)
            assert world.MIN_NUMBER <= w <= world.MAX_NUMBER


def test_samplers_are_deterministic_and_in_vocabulary() -> None:
    vocab = set(world.VOCAB_WORDS)
    for sampler in (world.sample_demonstration, world.sample_weak_response):
        a = [sampler(random.Random(7), p) for p in world.PROMPTS]
        b = [sampler(random.Random(7), p) for p in world.PROMPTS]
        c = [sampler(random.Random(8), p) for p in world.PROMPTS]
        assert a == b and a != c
        rng = random.Random(3)
        for _ in range(2000):
            r = sampler(rng, rng.choice(world.PROMPTS))
            assert r == " ".join(r.split()) and set(r.split()) <= vocab


def test_sampler_statistics() -> None:
    rng = random.Random(0)
    n = 6000
    demo, weak = [], []
    for _ in range(n):
        p = rng.choice(world.PROMPTS)
        demo.append((p, world.sample_demonstration(rng, p)))
        weak.append((p, world.sample_weak_response(rng, p)))
    demo_acc = sum(is_correct(p, r) for p, r in demo) / n
    weak_acc = sum(is_correct(p, r) for p, r in weak) / n
    assert 0.67 < demo_acc < 0.73
    assert weak_acc < demo_acc - 0.15
    assert sum(world.last_number(r) is None for _, r in weak) / n > 0.05
    assert sum(spurious_count(r) for _, r in weak) > 2 * sum(spurious_count(r) for _, r in demo)
    assert sum(len(r.split()) for _, r in weak) > sum(len(r.split()) for _, r in demo)
