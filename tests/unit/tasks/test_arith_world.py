"""The weak sampler's pairs: always two different responses; shared-style pairs differ only in the number."""

import random

from tether.tasks.arith import world


def _numbers(text: str) -> list[str]:
    return [w for w in text.split() if w.lstrip("-").isdigit()]


def test_weak_pairs_differ_and_half_share_their_style():
    rng = random.Random(0)
    same_style = 0
    n = 2000
    for _ in range(n):
        prompt = rng.choice(world.PROMPTS)
        a, b = world.sample_weak_pair(rng, prompt)
        assert a != b
        wa, wb = a.split(), b.split()
        if len(wa) == len(wb):
            diff = [i for i, (x, y) in enumerate(zip(wa, wb)) if x != y]
            # Differing words are numbers only: the same template with another answer.
            if all(wa[i].lstrip("-").isdigit() and wb[i].lstrip("-").isdigit() for i in diff):
                same_style += 1
    # WEAK_P_SAME_STYLE = 0.5 of pairs share the style (plus a few independent pairs that match by chance).
    assert 0.45 < same_style / n < 0.6


def test_weak_pairs_are_deterministic_for_a_seed():
    draw = lambda seed: [world.sample_weak_pair(random.Random(seed), p) for p in world.PROMPTS[:50]]  # noqa: E731
    assert draw(3) == draw(3)
    assert draw(3) != draw(4)
