"""κ against hand-worked and published examples."""

import pytest

from tether.feedback.kappa import agreement_with_majority, cohen_kappa, fleiss_kappa, majority


def test_cohen_kappa_of_a_worked_two_by_two_table():
    # 50 items: both yes 20, A yes / B no 5, A no / B yes 10, both no 15.
    # p_o = 35/50 = 0.7; A says yes 25/50, B says yes 30/50: p_e = 0.5*0.6 + 0.5*0.4 = 0.5; kappa = 0.4.
    a = ["yes"] * 20 + ["yes"] * 5 + ["no"] * 10 + ["no"] * 15
    b = ["yes"] * 20 + ["no"] * 5 + ["yes"] * 10 + ["no"] * 15
    assert cohen_kappa(a, b) == pytest.approx(0.4)


def test_cohen_kappa_perfect_and_chance():
    assert cohen_kappa(["A", "B", "tie"], ["A", "B", "tie"]) == pytest.approx(1.0)
    # Always the opposite of each other with balanced labels: p_o = 0, p_e = 0.5 -> -1.
    assert cohen_kappa(["A", "B"] * 5, ["B", "A"] * 5) == pytest.approx(-1.0)
    assert cohen_kappa(["A"] * 4, ["A"] * 4) == 1.0  # p_e = 1: defined as 1 for perfect agreement
    with pytest.raises(ValueError):
        cohen_kappa(["A"], [])


# Fleiss (1971) as worked in the literature (e.g. Wikipedia, "Fleiss' kappa"): 10 items, 14 raters,
# 5 categories; P-bar = 0.378, P-bar_e = 0.213, kappa = 0.210.
FLEISS_TABLE = [
    [0, 0, 0, 0, 14], [0, 2, 6, 4, 2], [0, 0, 3, 5, 6], [0, 3, 9, 2, 0], [2, 2, 8, 1, 1],
    [7, 7, 0, 0, 0], [3, 2, 6, 3, 0], [2, 5, 3, 2, 2], [6, 5, 2, 1, 0], [0, 2, 2, 3, 7],
]


def test_fleiss_kappa_published_example():
    assert fleiss_kappa(FLEISS_TABLE) == pytest.approx(0.210, abs=5e-4)


def test_fleiss_kappa_hand_worked_small():
    # 3 items, 3 raters, categories (A, B): rows (3,0), (0,3), (2,1).
    # P_i = 1, 1, (4+1-3)/6 = 1/3 -> p_o = 7/9; p_A = 5/9, p_B = 4/9 -> p_e = 41/81;
    # kappa = (7/9 - 41/81) / (1 - 41/81) = (22/81) / (40/81) = 0.55.
    assert fleiss_kappa([[3, 0], [0, 3], [2, 1]]) == pytest.approx(0.55)
    with pytest.raises(ValueError, match="same number"):
        fleiss_kappa([[2, 0], [1, 0]])


def test_majority_and_agreement_with_the_others():
    assert majority(["A", "A", "B"]) == "A" and majority(["A", "B"]) is None and majority([]) is None
    by_item = {1: {"ann": "A", "bob": "A", "cy": "B"}, 2: {"ann": "B", "bob": "B", "cy": "B"},
               3: {"ann": "tie", "bob": "A", "cy": "B"}}
    # ann: item 1 others (A, B) no majority; item 2 others B -> hit; item 3 others (A, B) none -> 1/1.
    # bob: item 1 others (A, B) none; item 2 hit; item 3 others (tie, B) none -> 1/1.
    # cy: item 1 others A -> miss; item 2 hit; item 3 others (tie, A) none -> 1/2.
    assert agreement_with_majority(by_item) == {"ann": 1.0, "bob": 1.0, "cy": 0.5}
