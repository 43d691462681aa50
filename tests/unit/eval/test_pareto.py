"""The Pareto front (eval/pareto.py) on hand-worked points: gold up, '!' rate down."""

from __future__ import annotations

import pytest

from tether.eval.pareto import dominates, pareto_front

UP_DOWN = (1, -1)


def test_domination_needs_every_objective_and_one_strictly():
    assert dominates((0.5, 0.2), (0.4, 0.3), UP_DOWN)
    assert dominates((0.5, 0.3), (0.4, 0.3), UP_DOWN)  # equal '!' rate, more gold
    assert not dominates((0.5, 0.3), (0.5, 0.3), UP_DOWN)  # equal: neither
    assert not dominates((0.6, 0.4), (0.4, 0.3), UP_DOWN)  # a trade-off: neither
    with pytest.raises(ValueError, match="senses must each be"):
        dominates((1, 2), (1, 2), (1, 0))


def test_the_front_keeps_trade_offs_and_ties_and_drops_the_dominated():
    # (gold, '!' rate): c is beaten by b on both; a, b, d trade gold for '!'; e ties a
    points = [(0.1, 0.1), (0.4, 0.3), (0.3, 0.5), (0.6, 0.8), (0.1, 0.1)]
    assert pareto_front(points, UP_DOWN) == [0, 1, 3, 4]
    assert pareto_front(points, (1, 1)) == [3]  # both more-is-better: (0.6, 0.8) beats them all
    assert pareto_front([], UP_DOWN) == []


def test_gold_at_kl_interpolates_where_the_run_first_reaches_it():
    from tether.eval.pareto import gold_at_kl, matched_kl

    curve = [(0.0, -0.3), (0.5, 0.1), (1.5, 0.3), (1.0, 0.6)]  # KL may fall back later: the first crossing counts
    assert gold_at_kl(curve, 0.25) == pytest.approx(-0.1)
    assert gold_at_kl(curve, 1.0) == pytest.approx(0.2)
    assert gold_at_kl(curve, 0.5) == pytest.approx(0.1) and gold_at_kl(curve, 0.0) == -0.3
    assert gold_at_kl(curve, 2.0) is None and gold_at_kl([], 0.1) is None
    assert gold_at_kl([(0.0, -0.3), (-0.02, -0.1)], -0.01) == pytest.approx(-0.2)  # a sampled KL below 0
    assert gold_at_kl([(0.0, -0.3), (0.4, 0.1)], 0.4) == pytest.approx(0.1)
    target, golds = matched_kl({"a": curve, "b": [(0.0, -0.3), (0.4, 0.5), (0.8, 0.9)]})
    assert target == 0.8  # b ends at 0.8; a reached it between 0.5 and 1.5
    assert golds == {"a": pytest.approx(0.16), "b": pytest.approx(0.9)}
