"""one_line: a library's message shortened for a one-paragraph error, never cut inside a word."""

from tether.common.errors import one_line


def test_short_text_is_only_collapsed():
    assert one_line("a  b\n\tc", 40) == "a b c"


def test_long_text_is_cut_at_a_word_boundary_and_marked():
    text = "the file /very/long/path/model.safetensors is not a valid checkpoint for this architecture"
    got = one_line(text, 30)
    assert got == "the file ..."
    assert one_line(text, 45) == "the file /very/long/path/model.safetensors is ..."
    for limit in range(5, len(text)):
        shown = one_line(text, limit).removesuffix(" ...")
        assert text.startswith(shown) and (len(shown) == len(text) or text[len(shown)] == " "), limit


def test_cut_exactly_at_a_space_keeps_the_whole_word():
    assert one_line("alpha beta gamma", 10) == "alpha beta ..."


def test_a_single_long_word_is_cut_where_it_must_be():
    assert one_line("x" * 50, 10) == "xxxxxxxxxx ..."
