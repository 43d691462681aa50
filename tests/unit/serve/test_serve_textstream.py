"""Token-by-token text: stop sequences across tokens, held-back deltas, stream == final text."""

from __future__ import annotations

from tether.serve.textstream import TextAssembler


class PieceTokenizer:
    """decode = concatenation of fixed pieces; id 0 is a special token that decodes to nothing."""

    def __init__(self, pieces):
        self.pieces = pieces

    def decode(self, ids, skip_special_tokens=True):
        return "".join(self.pieces[i] for i in ids if not (skip_special_tokens and i == 0))


PIECES = ["<s>", "Hel", "lo", " wor", "ld", "!", " END", "\ufffd", "é"]


def feed(assembler, ids):
    deltas = [assembler.add(i) for i in ids]
    if not assembler.stopped:
        deltas.append(assembler.finish())
    return deltas


def test_no_stop_deltas_concatenate_to_text():
    a = TextAssembler(PieceTokenizer(PIECES))
    deltas = feed(a, [1, 2, 3, 4, 5])
    assert "".join(deltas) == a.text == "Hello world!"
    assert deltas[0] == "Hel"  # released as soon as it is decoded


def test_stop_sequence_spanning_tokens_is_cut_and_never_streamed():
    a = TextAssembler(PieceTokenizer(PIECES), stop=["o w"])
    deltas = feed(a, [1, 2, 3, 4])
    assert a.stopped and a.text == "Hell"
    assert "".join(deltas) == "Hell"
    assert not any("o" in d for d in deltas)


def test_text_that_could_start_a_stop_is_held_back():
    a = TextAssembler(PieceTokenizer(PIECES), stop=[" END"])
    assert a.add(1) == ""  # the last len(" END") - 1 = 3 characters are held back
    assert a.add(2) == "He"
    assert a.add(6) == "llo"  # " END" found: release up to it and stop
    assert a.stopped and a.text == "Hello"


def test_partial_character_is_held_until_complete():
    tok = PieceTokenizer(PIECES)
    a = TextAssembler(tok)
    assert a.add(1) == "Hel"
    assert a.add(7) == ""  # a lone U+FFFD: the rest of the character is still coming
    assert a.finish() == "\ufffd"  # at the end whatever is there is released


def test_special_tokens_decode_to_nothing():
    a = TextAssembler(PieceTokenizer(PIECES))
    feed(a, [1, 0, 2])
    assert a.text == "Hello"


def test_non_incremental_mode_decodes_once_at_the_end():
    a = TextAssembler(PieceTokenizer(PIECES), incremental=False)
    assert [a.add(i) for i in (1, 2, 3)] == ["", "", ""]
    assert a.finish() == "Hello wor" and a.text == "Hello wor"


def test_stop_found_in_first_token():
    a = TextAssembler(PieceTokenizer(PIECES), stop=["Hel"])
    assert a.add(1) == "" and a.stopped and a.text == ""
    assert a.finish() == ""
