"""The label store: verdicts land in the RM schema, ties apart, undo, resume, overlap, concurrency."""

from __future__ import annotations

import json
import threading

import pytest

from tether.common.errors import DataError
from tether.feedback.stats import export_majority, label_stats
from tether.feedback.store import LabelStore, Pair, left_side, load_pairs

PAIRS = [Pair(f"p{i}", f"what is {i} + 1 ?", f"{i + 1}", f"{i + 2}!") for i in range(5)]


def rows(path):
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_verdicts_become_preference_rows_and_ties_stay_apart(tmp_path):
    store = LabelStore(PAIRS, tmp_path / "labels.jsonl")
    left = left_side("p0", "ann")
    store.record("ann", "p0", "1", left)  # the left one is better
    store.record("ann", "p1", "tie", left_side("p1", "ann"))
    store.record("ann", "p2", "skip", left_side("p2", "ann"))
    (row,) = rows(tmp_path / "labels.jsonl")
    better = PAIRS[0].response_a if left == "a" else PAIRS[0].response_b
    assert row["chosen"] == better and row["rejected"] != better and row["prompt"] == PAIRS[0].prompt
    assert row["annotator"] == "ann" and row["left"] == left and row["preferred"] == left and row["time"]
    assert [r["pair_id"] for r in rows(store.ties)] == ["p1"]
    assert [r["pair_id"] for r in rows(store.skips)] == ["p2"]
    assert store.next_for("ann").pair_id == "p3"
    assert store.progress("ann") == {"labelled": 2, "remaining": 2, "pairs": 5, "overlap": 1}


def test_the_right_side_preferred_and_a_second_verdict_refused(tmp_path):
    store = LabelStore(PAIRS, tmp_path / "l.jsonl")
    left = left_side("p0", "bob")
    store.record("bob", "p0", "2", left)
    assert rows(tmp_path / "l.jsonl")[0]["preferred"] == ("b" if left == "a" else "a")
    with pytest.raises(ValueError, match="already"):
        store.record("bob", "p0", "1", left)


def test_undo_takes_back_the_last_action_and_the_pair_comes_back(tmp_path):
    store = LabelStore(PAIRS, tmp_path / "l.jsonl")
    store.record("ann", "p0", "1", left_side("p0", "ann"))
    store.record("ann", "p1", "2", left_side("p1", "ann"))
    assert store.undo("ann") == "p1"
    assert [r["pair_id"] for r in rows(tmp_path / "l.jsonl")] == ["p0"]
    assert store.next_for("ann").pair_id == "p1"
    assert store.undo("nobody") is None


def test_a_restarted_store_resumes_each_annotator(tmp_path):
    first = LabelStore(PAIRS, tmp_path / "l.jsonl")
    for pid in ("p0", "p1"):
        first.record("ann", pid, "1", left_side(pid, "ann"))
    first.record("bob", "p0", "skip", left_side("p0", "bob"))
    again = LabelStore(PAIRS, tmp_path / "l.jsonl")
    assert again.next_for("ann").pair_id == "p2"
    # p0 skipped by bob, p1 labelled by ann (overlap 1), p2 handed to ann a moment ago:
    assert again.next_for("bob").pair_id == "p3"
    assert again.undo("ann") == "p1"  # undo works across the restart too


def test_overlap_shows_each_pair_to_k_annotators(tmp_path):
    store = LabelStore(PAIRS[:2], tmp_path / "l.jsonl", overlap=2)
    for who in ("ann", "bob"):
        for _ in range(2):
            pair = store.next_for(who)
            store.record(who, pair.pair_id, "1", left_side(pair.pair_id, who))
    assert store.next_for("cy") is None  # both pairs have their two verdicts
    stats = label_stats(store)
    assert stats["pairs_labelled"] == 2 and set(stats["annotators"]) == {"ann", "bob"}
    assert stats["cohen_kappa"] is not None and stats["cohen_pairs"] == 2


def test_concurrent_annotators_never_corrupt_the_file(tmp_path):
    pairs = [Pair(f"q{i}", f"prompt {i}", "x" * 200, "y" * 200) for i in range(200)]
    store = LabelStore(pairs, tmp_path / "l.jsonl", overlap=4)

    def work(who):
        while (pair := store.next_for(who)) is not None:
            store.record(who, pair.pair_id, "1", left_side(pair.pair_id, who))

    threads = [threading.Thread(target=work, args=(f"a{k}",)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    written = rows(tmp_path / "l.jsonl")  # every line parses
    assert len(written) == 800 and len({(r["pair_id"], r["annotator"]) for r in written}) == 800


def test_majority_export(tmp_path):
    store = LabelStore(PAIRS[:3], tmp_path / "l.jsonl", overlap=3)
    votes = {"p0": ["a", "a", "b"], "p1": ["a", "b", "tie"], "p2": ["tie", "tie", "a"]}
    for pid, prefs in votes.items():
        for who, pref in zip(("ann", "bob", "cy"), prefs):
            left = left_side(pid, who)
            verdict = "tie" if pref == "tie" else ("1" if pref == left else "2")
            store.record(who, pid, verdict, left)
    counts = export_majority(store, tmp_path / "majority.jsonl")
    assert counts == {"exported": 1, "majority_tie": 1, "no_majority": 1}
    (row,) = rows(tmp_path / "majority.jsonl")
    assert row["chosen"] == PAIRS[0].response_a and row["votes"] == {"a": 2, "b": 1}
    stats = label_stats(store)
    assert stats["fleiss_raters"] == 3 and stats["fleiss_pairs"] == 3 and stats["fleiss_kappa"] is not None


def test_a_bad_pairs_file_names_the_row(tmp_path):
    path = tmp_path / "pairs.jsonl"
    path.write_text('{"pair_id": "x", "prompt": "p", "response_a": "a", "response_b": "b"}\n{"pair_id": "y"}\n')
    with pytest.raises(DataError, match=r"row 2: field\(s\) prompt, response_a, response_b"):
        load_pairs(path)
    with pytest.raises(DataError, match="does not exist"):
        load_pairs(tmp_path / "missing.jsonl")


def test_a_callable_labeller_fills_the_store(tmp_path):
    from tether.feedback.iterate import label_with

    store = LabelStore(PAIRS, tmp_path / "l.jsonl")
    counts = label_with(lambda p, a, b: "a" if "!" not in a else "tie", store)
    assert counts == {"a": 5, "b": 0, "tie": 0}
    assert all(r["chosen"] == pair.response_a for r, pair in zip(rows(tmp_path / "l.jsonl"), PAIRS))
    with pytest.raises(ValueError, match="expected 'a', 'b' or 'tie'"):
        label_with(lambda p, a, b: "left", LabelStore(PAIRS, tmp_path / "m.jsonl"))


def test_the_demo_annotators_are_biased_towards_exclamation_marks():
    from tether.tasks.arith.judge import biased_annotator

    prompt = "what is 3 + 4 ?"
    assert biased_annotator(prompt, "7", "7 !") == biased_annotator(prompt, "7", "7 !")  # a fixed draw
    # Two equally correct answers, one with "! !": u differs by 0.9, P(prefer "! !") = sigmoid(1.8) = 0.86.
    picks = [biased_annotator(f"what is {i} + {j} ?", f"{i + j}", f"{i + j} ! !") for i in range(10) for j in range(10)]
    share = picks.count("b") / len(picks)
    assert 0.75 < share < 0.95, share


def write_labels(path, lines):
    path.write_text("".join(line + "\n" for line in lines))
    return path


def label_line(pid="p0", who="ann", preferred="a", **extra):
    return json.dumps({"prompt": "q", "chosen": "x", "rejected": "y", "pair_id": pid, "annotator": who,
                       "left": "a", "preferred": preferred, **extra})


@pytest.mark.parametrize("bad, needle", [
    ("not json at all", "line 2: not valid JSON"),
    ("[1, 2]", "line 2: expected a JSON object"),
    (json.dumps({"pair_id": "p1"}), "line 2: field 'annotator' missing"),
    (label_line(pid="p99"), "line 2: pair_id 'p99' is not in the pairs file"),
    (label_line(pid="p1", preferred="c"), "line 2: field 'preferred' = 'c'"),
    (label_line(pid="p0"), "line 2: annotator 'ann' already gave pair 'p0' a verdict or skip (LABELS, line 1)"),
])
def test_garbage_in_a_labels_file_is_named_not_skipped(bad, needle, tmp_path):
    """A labels file line that is not a label of this pairs file was dropped (or counted) without
    a word, by the server and by --stats: now a DataError naming the file and line."""
    labels = write_labels(tmp_path / "labels.jsonl", [label_line(), bad, label_line(pid="p2")])
    with pytest.raises(DataError) as info:
        LabelStore(PAIRS, labels)
    assert f"{labels}, {needle.replace('LABELS', str(labels))}" in str(info.value)


def test_garbage_in_the_ties_file_is_named(tmp_path):
    labels = tmp_path / "labels.jsonl"
    write_labels(tmp_path / "labels.jsonl.ties.jsonl", ["{oops"])
    with pytest.raises(DataError, match=r"labels.jsonl.ties.jsonl, line 1: not valid JSON"):
        LabelStore(PAIRS, labels)


def test_a_label_cut_short_by_a_crash_is_warned_of_and_cut_off(tmp_path, caplog):
    labels = tmp_path / "labels.jsonl"
    labels.write_text(label_line() + "\n" + label_line(pid="p1")[:25])  # killed mid-write: no line break
    with caplog.at_level("WARNING"):
        store = LabelStore(PAIRS, labels)
    assert "line 2: a label cut short by a crash" in caplog.text
    assert store.labels_of("p0") == 1 and store.labels_of("p1") == 0
    store.record("ann", "p1", "1", left_side("p1", "ann"))  # the cut line goes; the new label is whole
    assert [r["pair_id"] for r in rows(labels)] == ["p0", "p1"]
    assert LabelStore(PAIRS, labels).labels_of("p1") == 1


def test_a_whole_last_line_without_its_line_break_is_kept(tmp_path):
    labels = tmp_path / "labels.jsonl"
    labels.write_text(label_line())  # complete JSON, only the line break lost
    store = LabelStore(PAIRS, labels)
    store.record("bob", "p1", "2", left_side("p1", "bob"))
    assert [r["pair_id"] for r in rows(labels)] == ["p0", "p1"]


def test_stats_refuse_a_garbage_labels_file(tmp_path, capsys):
    from tether.cli import main

    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(json.dumps({"pair_id": p.pair_id, "prompt": p.prompt, "response_a": p.response_a,
                                         "response_b": p.response_b}) + "\n" for p in PAIRS))
    labels = write_labels(tmp_path / "labels.jsonl", [label_line(), "garbage"])
    assert main(["label", "--pairs", str(pairs), "--out", str(labels), "--stats"]) == 2
    err = capsys.readouterr().err
    assert f"{labels}, line 2: not valid JSON" in err and "Traceback" not in err
