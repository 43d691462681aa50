"""RLAIF labelling (feedback/judge_labels.py, `tether label --judge-url`): a judge on loopback labels a
pairs file in both orders into the files people's labels go to, as the annotator judge:<model>;
`tether label --stats` then gives its kappa with each person and with their majority, and its
self-consistency under the swap."""

from __future__ import annotations

import json

import pytest
from judge_server import FakeJudge

from tether.cli import main
from tether.feedback.judge_labels import judge_file, label_with_judge, self_consistency
from tether.feedback.stats import gold_margins, label_stats
from tether.feedback.store import LabelStore, load_pairs

PAIRS = [("p1", "what is 1 + 1 ?", "2", "two is the answer"), ("p2", "what is 2 + 2 ?", "4 ! 4 !", "4"),
         ("p3", "what is 3 + 3 ?", "6", "6"), ("p4", "what is 4 + 4 ?", "BIAS", "8 is it"),
         ("p5", "what is 5 + 5 ?", "10", "MUTE")]


def verdict(text: str) -> str:
    """Prefers the shorter answer; picks whichever is shown first when BIAS is one of the two; no
    verdict with MUTE."""
    a = text.split("Answer A:\n", 1)[1].split("\n\nAnswer B:", 1)[0]
    b = text.split("Answer B:\n", 1)[1].split("\n\n", 1)[0]
    if "MUTE" in (a, b):
        return "hmm"
    if "BIAS" in (a, b):
        return "Winner: A"
    return "Winner: tie" if len(a) == len(b) else f"Winner: {'A' if len(a) < len(b) else 'B'}"


@pytest.fixture
def server():
    s = FakeJudge(answer=verdict)
    yield s
    s.close()


@pytest.fixture
def pairs_file(tmp_path):
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps({"pair_id": i, "prompt": p, "response_a": a, "response_b": b}) + "\n"
                            for i, p, a, b in PAIRS))
    return path


def test_the_judge_labels_both_orders_into_the_people_s_files(server, pairs_file, tmp_path, capsys):
    out = tmp_path / "labels.jsonl"
    assert main(["label", "--pairs", str(pairs_file), "--out", str(out), "--judge-url", server.url,
                 "--judge-model", "judge-1"]) == 0
    said = capsys.readouterr().out
    assert "the judge labelled 4 pairs" in said and "A 1, B 1, tie 2, of which 1 for position bias; 1 without" in said
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert {r["pair_id"]: r["chosen"] for r in rows} == {"p1": "2", "p2": "4"}  # the shorter wins
    assert all(r["annotator"] == "judge:judge-1" for r in rows)
    ties = [json.loads(line)["pair_id"] for line in (tmp_path / "labels.jsonl.ties.jsonl").read_text().splitlines()]
    assert ties == ["p3", "p4"]  # equal lengths; BIAS picked as A both times: position bias
    assert server.requests == 10  # 5 pairs x 2 orders
    # asked again, the judge labels only what it has not: the MUTE pair
    store = LabelStore(load_pairs(pairs_file), out)
    assert label_with_judge(_client(server), store, say=lambda _: None)["failed"] == 1
    assert server.requests == 12


def _client(server):
    from tether.roles.judge_client import JudgeClient

    return JudgeClient(server.url, "judge-1", timeout_s=5)


def test_stats_give_the_judge_s_kappa_with_people_and_its_self_consistency(server, pairs_file, tmp_path, capsys):
    out = tmp_path / "labels.jsonl"
    store = LabelStore(load_pairs(pairs_file), out, overlap=3)
    label_with_judge(_client(server), store, say=lambda _: None)
    # alice agrees with the judge everywhere it labelled; bob disagrees on p1
    for who, verdicts in {"alice": {"p1": "a", "p2": "b", "p3": "tie", "p4": "tie"},
                          "bob": {"p1": "b", "p2": "b", "p3": "tie", "p4": "tie"}}.items():
        for pid, v in verdicts.items():
            store.record(who, pid, {"a": "1", "b": "2", "tie": "tie"}[v], "a")
    stats = label_stats(store)
    judge = stats["judges"]["judge:judge-1"]
    assert judge["kappa_with"]["alice"] == {"kappa": pytest.approx(1.0), "pairs": 4}
    # with bob: agree on 3 of 4; judge a,b,tie,tie; bob b,b,tie,tie -> po 0.75, pe = (1*0 + 1*2 + 2*2)/16
    assert judge["kappa_with"]["bob"]["kappa"] == pytest.approx((0.75 - 6 / 16) / (1 - 6 / 16))
    assert judge["majority_pairs"] == 3  # p1 has no majority between alice and bob
    assert judge["agreement_with_majority"] == 1.0
    # self-consistency: 4 pairs read in both orders, one picked A both times
    assert judge["both_orders"] == 4 and judge["position_bias"] == 1 and judge["consistency"] == 0.75
    assert self_consistency(store)["judge:judge-1"]["asked"] == 5 and judge_file(store).is_file()
    assert main(["label", "--pairs", str(pairs_file), "--out", str(out), "--stats"]) == 0
    text = capsys.readouterr().out
    assert "judge:judge-1: kappa with alice 1.000 (4 pairs)" in text and "self-consistency under the order swap: 0.750" in text


def test_stats_give_everyone_s_agreement_with_a_gold_scorer(server, pairs_file, tmp_path, capsys):
    out = tmp_path / "labels.jsonl"
    store = LabelStore(load_pairs(pairs_file), out, overlap=3)
    label_with_judge(_client(server), store, say=lambda _: None)  # p1 a, p2 b, p3 tie, p4 tie (position bias)
    for who, verdicts in {"alice": {"p1": "a", "p2": "b", "p3": "tie", "p4": "tie"},
                          "bob": {"p1": "b", "p2": "b", "p4": "tie"}}.items():
        for pid, v in verdicts.items():
            store.record(who, pid, {"a": "1", "b": "2", "tie": "tie"}[v], "a")
    gold = gold_margins(store, lambda prompt, response: -len(response))  # shorter is better
    assert gold == {"p1": 16.0, "p2": -6.0, "p3": 0.0, "p4": 3.0, "p5": 2.0}
    stats = label_stats(store, gold)["gold"]
    # p3 is a gold tie, left out; p1 A and p2 B are right, the tie on p4 counts half
    assert stats["judge:judge-1"] == {"agreement": pytest.approx(2.5 / 3), "pairs": 3}
    assert stats["alice"] == {"agreement": pytest.approx(2.5 / 3), "pairs": 3}
    assert stats["bob"] == {"agreement": pytest.approx(1.5 / 3), "pairs": 3}
    # a scorer that answers no number is named with the pair
    assert main(["label", "--pairs", str(pairs_file), "--out", str(out), "--stats", "--gold", "operator:contains"]) == 2
    assert "--gold: the scorer returned False for pair 'p1'; expected a number" in capsys.readouterr().err
    assert main(["label", "--pairs", str(pairs_file), "--out", str(out), "--gold", "operator:sub"]) == 2
    assert "add --stats" in capsys.readouterr().err


@pytest.mark.parametrize("extra, needle", [
    (["--judge-url", "http://127.0.0.1:9"], "needs --judge-model"),
    (["--judge-model", "m"], "--judge-model is set without --judge-url"),
    (["--judge-url", "http://x", "--judge-path", "y", "--judge-model", "m"], "both set"),
    (["--stats", "--judge-url", "http://x", "--judge-model", "m"], "label with the judge first"),
    (["--judge-url", "http://127.0.0.1:9", "--judge-model", "m"], "could not be reached"),
])
def test_bad_judge_flags_are_named(pairs_file, tmp_path, capsys, extra, needle):
    assert main(["label", "--pairs", str(pairs_file), "--out", str(tmp_path / "o.jsonl"), *extra]) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err
