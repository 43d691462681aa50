"""The generative judge's held-out metrics from its teacher-forced verdicts, hand-worked."""

from __future__ import annotations

import pytest

from tether.algos.judge_format import gold_agreement
from tether.data import Record
from tether.data.records import gold_margins
from tether.objectives.genrm import verdict_metrics


def test_verdict_metrics_pair_up_the_two_orders():
    # Pairs: right both times; right then wrong (picked A twice: position bias); wrong both times;
    # wrong then right (picked B twice: position bias).
    right = [True, True, True, False, False, False, False, True]
    out = verdict_metrics(right)
    assert out == {"eval/verdict_accuracy": 0.5, "eval/pair_accuracy": 0.25, "eval/position_bias": 0.5}


def test_verdict_metrics_against_gold():
    right = [True, True, True, False, False, False, False, True]
    # Gold prefers chosen in pairs 1 and 3, rejected in pair 2, ties pair 4.
    out = verdict_metrics(right, [0.4, 0.5, -1.0, 0.0])
    # Judge outcomes for chosen: 1, 0.5, 0, 0.5 -> with gold: 1, 0.5, 1 (pair 4 left out) -> 2.5 / 3.
    assert out["eval/gold_agreement"] == pytest.approx(2.5 / 3)
    # The labels name chosen: right on pairs 1 and 2, wrong on pair 3.
    assert out["eval/labels_gold_agreement"] == pytest.approx(2 / 3)
    assert out["eval/gold_pairs"] == 3.0


def test_gold_agreement_leaves_out_the_pairs_gold_ties():
    assert gold_agreement([1.0, 0.0, 0.75], [2.0, -0.1, 1.0]) == (pytest.approx(2.75 / 3), 3)
    assert gold_agreement([0.25, 1.0], [-3.0, 0.0]) == (0.75, 1)
    assert gold_agreement([1.0], [0.0]) == (None, 0)
    with pytest.raises(ValueError, match="2 outcomes for 1 gold margins"):
        gold_agreement([1.0, 0.0], [1.0])


def test_gold_margins_only_when_every_row_has_both_scores():
    rows = [Record({"gold_chosen": 1.5, "gold_rejected": -0.5}, "p.jsonl", 1),
            Record({"gold_chosen": 0, "gold_rejected": 0.25}, "p.jsonl", 2)]
    assert gold_margins(rows) == {("p.jsonl", 1): 2.0, ("p.jsonl", 2): -0.25}
    assert gold_margins([*rows, Record({"gold_chosen": 1.0}, "p.jsonl", 3)]) is None
    assert gold_margins([Record({"gold_chosen": True, "gold_rejected": 0.0}, "p.jsonl", 1)]) is None
