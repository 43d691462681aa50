"""Property: malformed input to load_records and the validators raises DataError or succeeds, nothing else."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tether.data import (
    Record,
    encode_prompt,
    load_records,
    preference_examples,
    prompt_examples,
    sft_examples,
    tokenize_preference,
    tokenize_sft,
)
from tether.common.errors import DataError, TetherError

SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])

FIELDS = ["prompt", "completion", "messages", "chosen", "rejected", "chosn", "promt", "role", "content"]
ROLES = ["user", "assistant", "system", "", " "]

scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=10,
)
short_text = st.text(alphabet="ab \n\t", max_size=6)
messages_like = st.lists(
    st.fixed_dictionaries(
        {},
        optional={
            "role": st.sampled_from(ROLES) | json_values,
            "content": short_text | json_values,
            "name": short_text,
        },
    )
    | json_values,
    max_size=4,
)
hh_string = st.lists(
    st.tuples(st.sampled_from(["\n\nHuman:", "\n\nAssistant:", "Human:", "Assistant:", ""]), short_text), max_size=4
).map(lambda parts: "".join(m + t for m, t in parts))
field_values = st.one_of(json_values, short_text, messages_like, hh_string)


@st.composite
def hh_pairs(draw):
    """chosen/rejected sharing a prefix: HH strings or message lists, possibly identical or malformed."""
    if draw(st.booleans()):
        prefix = draw(hh_string)
        return {"chosen": prefix + draw(hh_string | short_text), "rejected": prefix + draw(hh_string | short_text)}
    prefix = draw(messages_like)
    return {"chosen": prefix + draw(messages_like), "rejected": prefix + draw(messages_like)}


rows = st.one_of(
    st.dictionaries(st.sampled_from(FIELDS) | st.text(max_size=6), field_values, max_size=4),
    hh_pairs(),
    st.builds(lambda base, extra: {**base, **extra}, hh_pairs(),
              st.dictionaries(st.sampled_from(FIELDS), field_values, max_size=2)),
)


def validate_all(records, tok=None):
    """Run every validator (and, given a tokenizer, tokenize what passed); only tether errors may escape."""
    results = {}
    for name, fn in (("sft", sft_examples), ("prompt", prompt_examples), ("pref", preference_examples),
                     ("pref_skip", lambda r: preference_examples(r, on_identical="skip"))):
        try:
            results[name] = fn(records)
        except DataError as e:
            assert str(e).strip() and "\n" not in str(e)
    if tok is None:
        return
    try:
        for ex in results.get("sft", []):
            tokenize_sft(ex, tok, max_length=12)
        for ex in results.get("pref_skip", ([], {}))[0]:
            tokenize_preference(ex, tok, max_length=12, on_long="truncate")
        for ex in results.get("prompt", []):
            encode_prompt(ex.prompt, tok)
    except TetherError:
        pass


@SETTINGS
@given(data=st.lists(rows, min_size=1, max_size=4))
def test_random_rows_only_raise_data_error(tok, data):
    validate_all([Record(d, "rand.jsonl", i + 1) for i, d in enumerate(data)], tok)


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    return tmp_path_factory.mktemp("prop")


json_ish_lines = st.one_of(
    rows.map(json.dumps),
    json_values.map(json.dumps),
    st.text(alphabet='{}[]":, 0123nultrefase\\u', max_size=20),
    st.text(max_size=20),
)


@SETTINGS
@given(lines=st.lists(json_ish_lines, max_size=5), suffix=st.sampled_from([".jsonl", ".json"]))
def test_random_json_ish_lines_only_raise_data_error(scratch, tok, lines, suffix):
    path = scratch / f"lines{suffix}"
    path.write_text("\n".join(lines), encoding="utf-8", errors="surrogatepass")
    try:
        records = load_records(str(path))
    except DataError:
        return
    validate_all(records, tok)


@SETTINGS
@given(blob=st.binary(max_size=64) | st.lists(rows.map(json.dumps), max_size=3).map(
    lambda ls: "\n".join(ls).encode()) .flatmap(lambda b: st.binary(max_size=4).map(lambda junk: b + junk)),
    suffix=st.sampled_from([".jsonl", ".json", ".parquet"]))
def test_random_bytes_only_raise_data_error(scratch, blob, suffix):
    path = scratch / f"bytes{suffix}"
    path.write_bytes(blob)
    try:
        records = load_records(str(path))
    except DataError:
        return
    validate_all(records)
