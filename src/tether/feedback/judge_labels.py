"""RLAIF labelling: an LLM judge labels comparison pairs into the same files people's labels go to.

Each pair is asked in both orders (A then B, B then A: Zheng et al. 2023's swap, to cancel position
bias) with the pairwise rubric; :func:`tether.algos.judge_format.pairwise_outcome` turns the two
verdicts into one: A or B when both orders agree (or one agrees and the other ties), a tie when both
tie or when the judge picked the same *position* twice (position bias, counted). A pair whose
verdict could not be read in either order gets no label (counted; a later run asks again). Labels
are recorded in the :class:`~tether.feedback.store.LabelStore` under the annotator ``judge:<model>``,
so the judge is one more annotator beside people: `tether rm` reads its labels, and
`tether label --stats` reports its agreement with each person and with their majority, and its
self-consistency under the swap (from ``OUT.judge.jsonl``, one row per pair it was asked about).
"""

from __future__ import annotations

import json
from pathlib import Path

from tether.algos.judge_format import DEFAULT_PAIRWISE_RUBRIC, PREFERENCE_PATTERN, fill, pairwise_outcome, \
    parse_preference
from tether.feedback.store import LabelStore, _append

CHUNK = 64  # pairs asked at once between progress lines


def judge_file(store: LabelStore) -> Path:
    """Where the judge's two verdicts per pair are kept: ``OUT.judge.jsonl`` beside the labels."""
    return store.out.with_name(store.out.name + ".judge.jsonl")


def annotator_name(model: str) -> str:
    """The judge's annotator name in the label files: ``judge:<model>``."""
    return f"judge:{model}"


def label_with_judge(client, store: LabelStore, rubric: str = DEFAULT_PAIRWISE_RUBRIC,
                     pattern: str = PREFERENCE_PATTERN, name: str | None = None, say=print) -> dict:
    """Label every pair of ``store`` the judge has not labelled yet (``client``: a
    :class:`~tether.roles.judge_client.JudgeClient` or :class:`~tether.roles.local_judge.LocalJudge`);
    returns the counts: a, b, tie, position_bias (of the ties), failed (no verdict in either order)."""
    name = name or annotator_name(client.model)
    todo = [p for p in store.pairs if p.pair_id not in store.seen_by(name)]
    counts = {"a": 0, "b": 0, "tie": 0, "position_bias": 0, "failed": 0}
    for start in range(0, len(todo), CHUNK):
        chunk = todo[start:start + CHUNK]
        asks = []
        for pair in chunk:
            for a, b in ((pair.response_a, pair.response_b), (pair.response_b, pair.response_a)):
                asks.append([{"role": "user", "content": fill(rubric, prompt=pair.prompt, response_a=a, response_b=b)}])
        answers = client.ask(asks)
        for n, pair in enumerate(chunk):
            first, swapped = (parse_preference(x, pattern) for x in answers[2 * n:2 * n + 2])
            outcome, disagreed = pairwise_outcome(first, swapped)
            _append(judge_file(store), {"pair_id": pair.pair_id, "annotator": name, "first": first,
                                        "swapped": swapped, "outcome": outcome, "position_bias": disagreed})
            if outcome is None:
                counts["failed"] += 1
                continue
            verdict = "a" if outcome > 0.5 else "b" if outcome < 0.5 else "tie"
            counts[verdict] += 1
            counts["position_bias"] += int(disagreed)
            store.record(name, pair.pair_id, {"a": "1", "b": "2", "tie": "tie"}[verdict], "a")
        say(f"judge {client.model}: {min(start + CHUNK, len(todo))}/{len(todo)} pairs asked "
            f"(A {counts['a']}, B {counts['b']}, tie {counts['tie']}, no verdict {counts['failed']})")
    return counts


def self_consistency(store: LabelStore) -> dict[str, dict]:
    """Per judge annotator, from ``OUT.judge.jsonl``: pairs asked, pairs with a verdict in both
    orders, and the share of those where both orders named the same response or both tied
    (``consistency``; position bias is the rest)."""
    path = judge_file(store)
    out: dict[str, dict] = {}
    if not path.is_file():
        return out
    latest: dict[tuple[str, str], dict] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            latest[row["annotator"], row["pair_id"]] = row  # a pair asked again: its last asking
    for (who, _), row in latest.items():
        s = out.setdefault(who, {"asked": 0, "both_orders": 0, "position_bias": 0})
        s["asked"] += 1
        if row["first"] is not None and row["swapped"] is not None:
            s["both_orders"] += 1
            s["position_bias"] += int(row["position_bias"])
    for s in out.values():
        s["consistency"] = 1 - s["position_bias"] / s["both_orders"] if s["both_orders"] else None
    return out
