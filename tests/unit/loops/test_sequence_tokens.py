"""perf/tokens_per_s counts what goes through the model, padding left out: a demonstration's
sequence, a pair's prompt twice with each response; in a padded batch (token-budget bins with
model.padding_free=false) a pair is two sequences as long as its longer response."""

from tether.data.tokenize import TokenizedPreference, TokenizedSFT, TokenizedUnpaired
from tether.loops.supervised import padded_tokens, sequence_tokens


def test_a_demonstration_counts_its_sequence():
    assert sequence_tokens(TokenizedSFT(input_ids=[1, 2, 3, 4], loss_mask=[0, 0, 1, 1])) == 4


def test_a_pair_counts_the_prompt_with_each_response():
    pair = TokenizedPreference(prompt_ids=[1, 2, 3], chosen_ids=[4, 5], rejected_ids=[6, 7, 8, 9])
    assert sequence_tokens(pair) == 3 + 2 + 3 + 4


def test_a_kto_row_counts_its_prompt_and_response_not_its_mismatched_pair():
    row = TokenizedUnpaired([1, 2, 3], [4, 5], True, kl_prompt_ids=[6, 7, 8, 9], kl_completion_ids=[4, 5])
    assert sequence_tokens(row) == padded_tokens(row) == 5


def test_anything_else_counts_nothing():
    assert sequence_tokens(7) == 0


def test_in_a_padded_batch_a_pair_is_two_sequences_as_long_as_its_longer_response():
    pair = TokenizedPreference(prompt_ids=[1, 2, 3], chosen_ids=[4, 5], rejected_ids=[6, 7, 8, 9])
    assert padded_tokens(pair) == 2 * (3 + 4)
    assert padded_tokens(TokenizedSFT(input_ids=[1, 2, 3, 4], loss_mask=[0, 0, 1, 1])) == 4
