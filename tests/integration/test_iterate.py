"""`tether iterate --demo` at toy size: pairs from the policy, a callable judge labels them, the
reward model retrains on every label so far, PPO runs with it; the per-round table is written."""

from __future__ import annotations

import json

import pytest

from tether.cli import main

pytestmark = pytest.mark.slow

TINY = ["rm:max_steps=4", "rm:optim.batch_size=16", "rm:eval_every=4", "rm:run.threads=1",
        "ppo:rl.iterations=2", "ppo:rollout.batch_size=16", "ppo:rl.minibatch_size=16",
        "ppo:rollout.max_new_tokens=8", "ppo:eval.every=1", "ppo:run.threads=1"]


def test_two_rounds_with_the_biased_annotators(trained, tmp_path, capsys):
    demo = tmp_path / "demo"
    demo.mkdir()
    for name, target in (("task", trained["task"]), ("sft", trained["sft"]), ("rm", trained["rm"])):
        (demo / name).symlink_to(target)
    out = tmp_path / "iterate"
    sets = [f"--set={s}" for s in TINY]
    assert main(["iterate", "--demo", "--from", str(demo), "--out", str(out), "--rounds", "2",
                 "--pairs-per-round", "12", *sets]) == 0
    rounds = json.loads((out / "iterate.json").read_text())["rounds"]
    assert [r["round"] for r in rounds] == [0, 1, 2]
    base = sum(1 for line in (trained["task"] / "prefs_train.jsonl").read_text().splitlines() if line.strip())
    assert rounds[1]["rm_train_pairs"] == base + rounds[1]["pairs"]
    assert rounds[2]["rm_train_pairs"] == base + rounds[1]["pairs"] + rounds[2]["pairs"]  # every label so far
    for r in rounds[1:]:
        assert sum(r["verdicts"].values()) == r["pairs"] > 0
        for key in ("rm_accuracy", "spurious_bias", "correct_margin", "ppo_proxy", "ppo_gold", "ppo_kl"):
            assert isinstance(r[key], float), key
    labels = [json.loads(line) for line in (out / "round2" / "labels.jsonl").read_text().splitlines()]
    assert labels and all(row["annotator"] == "judge" for row in labels)
    assert "| 2 |" in capsys.readouterr().out


def test_a_round_labelled_by_a_judge_then_people_on_the_page(trained, tmp_path):
    """--judge-url with --page: an LLM judge labels the round's pairs first; the round then serves the
    labelling page and goes on once a person has labelled every pair too; the reward model trains
    on both."""
    import threading

    import httpx2
    from judge_server import FakeJudge

    from tether.algos.judge_format import DEFAULT_PAIRWISE_RUBRIC
    from tether.roles.judge_client import JudgeClient

    from tether.commands.demo import parse_sets
    from tether.commands.iterate import _page_server
    from tether.feedback.iterate import iterate_demo

    demo = tmp_path / "demo"
    demo.mkdir()
    for name, target in (("task", trained["task"]), ("sft", trained["sft"]), ("rm", trained["rm"])):
        (demo / name).symlink_to(target)
    labelled = []

    def person(url):
        def work():
            with httpx2.Client(base_url=url, timeout=30) as http:
                while not (nxt := http.post("api/next", json={"annotator": "ann"}).json())["done"]:
                    http.post("api/label", json={"annotator": "ann", "pair_id": nxt["pair_id"], "verdict": "1",
                                                 "left": nxt["left"]}).raise_for_status()
                    labelled.append(nxt["pair_id"])
        threading.Thread(target=work, daemon=True).start()

    server = FakeJudge(answer=lambda text: "Winner: A")  # position bias: every pair a tie
    try:
        result = iterate_demo(tmp_path / "out", demo, 1, 6, None, overrides=parse_sets(TINY, ("rm", "ppo")),
                              serve_page=_page_server(0, person), say=lambda text: None,
                              judge=(JudgeClient(server.url, "judge-1"), DEFAULT_PAIRWISE_RUBRIC))
    finally:
        server.close()
    (round1,) = result["rounds"][1:]
    assert round1["pairs"] == len(labelled) > 0 and round1["rm_train_pairs"] > round1["pairs"]
    assert round1["verdicts"]["tie"] == round1["verdicts"]["position_bias"] == round1["pairs"]
    ties = (tmp_path / "out" / "round1" / "labels.jsonl.ties.jsonl").read_text().splitlines()
    assert len(ties) == round1["pairs"] and all('"judge:judge-1"' in t for t in ties)
