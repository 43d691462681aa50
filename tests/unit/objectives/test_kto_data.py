"""KTO's mismatched pairs (each row's response after another row's prompt, for z₀), its file rows
and the desirable-to-undesirable ratio the run starts by reporting."""

from __future__ import annotations

from tether.data import TokenizedUnpaired, UnpairedExample
from tether.objectives.kto import desirable_ratio, file_rows, mismatched_partners, ratio_notice, with_mismatched


def test_every_row_gets_another_row_with_another_prompt():
    prompts = [(1,), (2,), (3,), (4,), (5,)]
    partners = mismatched_partners(prompts, seed=0)
    assert all(j != i for i, j in enumerate(partners))
    assert sorted(partners) == list(range(5))  # the next row in one shuffled cycle: each prompt used once
    assert mismatched_partners(prompts, seed=0) == partners  # a pure function of the seed
    assert mismatched_partners(prompts, seed=1) != partners


def test_a_row_skips_the_rows_that_share_its_prompt():
    # Rows split from one pair share a prompt: 0 and 1, 2 and 3.
    prompts = [(1,), (1,), (2,), (2,)]
    partners = mismatched_partners(prompts, seed=3)
    assert all(prompts[j] != prompts[i] for i, j in enumerate(partners))


def test_with_one_prompt_the_next_row_and_with_one_row_itself():
    assert all(j != i for i, j in enumerate(mismatched_partners([(1,)] * 3, seed=0)))
    assert mismatched_partners([(1,)], seed=0) == [0]


def test_the_mismatched_response_is_cut_to_fit_after_the_other_prompt():
    rows = [TokenizedUnpaired([1, 2, 3, 4], [5], True), TokenizedUnpaired([6], [7, 8, 9, 10], False)]
    a, b = with_mismatched(rows, seed=0, max_length=5)
    assert (a.kl_prompt_ids, a.kl_completion_ids) == ([6], [5])
    assert (b.kl_prompt_ids, b.kl_completion_ids) == ([1, 2, 3, 4], [7])  # 5 - 4 tokens of room
    assert (b.prompt_ids, b.completion_ids) == ([6], [7, 8, 9, 10])  # the row itself unchanged


def test_file_rows_keep_a_split_pair_together():
    def ex(row, pair):
        return UnpairedExample("p", "c", True, "f", row, pair)

    rows = [ex(1, 1), ex(1, 1), ex(2, None), ex(3, None), ex(4, 4), ex(4, 4)]
    assert [[e.row for e in group] for group in file_rows(rows)] == [[1, 1], [2], [3], [4, 4]]


def test_the_ratio_and_the_papers_advice():
    assert desirable_ratio(300, 100, 1.0, 3.0) == 1.0
    assert desirable_ratio(4, 3, 1.0, 1.0) == 4 / 3
    assert desirable_ratio(5, 0, 1.0, 1.0) is None
    assert "[1, 4/3]" not in ratio_notice({"desirable": 3, "undesirable": 3, "desirable_weight_ratio": 1.0})
    assert "[1, 4/3]" in ratio_notice({"desirable": 1, "undesirable": 3, "desirable_weight_ratio": 1 / 3})
    assert "no undesirable rows" in ratio_notice({"desirable": 3, "undesirable": 0})
