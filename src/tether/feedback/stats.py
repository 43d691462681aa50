"""`tether label --stats`: who labelled what, agreement (Cohen's κ for two annotators, Fleiss'
κ for more), each annotator's agreement with the others' majority, and the majority-vote file."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from tether.feedback.kappa import agreement_with_majority, cohen_kappa, fleiss_kappa, majority
from tether.feedback.store import LabelStore, _append, _rewrite

CATEGORIES = ("a", "b", "tie")  # response A better, response B better, tie


def verdicts(store: LabelStore) -> dict[str, dict[str, str]]:
    """pair_id -> annotator -> "a" | "b" | "tie" (skips are not verdicts)."""
    out: dict[str, dict[str, str]] = {}
    for who, actions in store.history.items():
        for action in actions:
            row = action.row
            if action.file == store.out:
                out.setdefault(row["pair_id"], {})[who] = row["preferred"]
            elif action.file == store.ties:
                out.setdefault(row["pair_id"], {})[who] = "tie"
    return out


def label_stats(store: LabelStore, gold: dict[str, float] | None = None) -> dict:
    """The statistics `tether label --stats` prints; ``gold``: pair_id -> a trusted scorer's score of
    response A minus response B (:func:`gold_margins`), for each annotator's agreement with it."""
    by_pair = verdicts(store)
    annotators = sorted({who for labels in by_pair.values() for who in labels})
    result: dict = {"pairs": len(store.pairs), "pairs_labelled": len(by_pair), "annotators": {},
                    "cohen_kappa": None, "fleiss_kappa": None}
    for who in annotators:
        mine = [labels[who] for labels in by_pair.values() if who in labels]
        result["annotators"][who] = {"labels": len(mine), **{c: mine.count(c) for c in CATEGORIES}}
    for who, rate in agreement_with_majority(by_pair).items():
        result["annotators"][who]["agreement_with_majority"] = rate
    if len(annotators) == 2:
        a, b = annotators
        shared = [labels for labels in by_pair.values() if a in labels and b in labels]
        if shared:
            result["cohen_kappa"] = cohen_kappa([s[a] for s in shared], [s[b] for s in shared])
            result["cohen_pairs"] = len(shared)
    rated = Counter(len(labels) for labels in by_pair.values() if len(labels) >= 2)
    if len(annotators) >= 3 and rated:
        n = rated.most_common(1)[0][0]  # Fleiss needs the same number of raters on every item
        table = [[list(labels.values()).count(c) for c in CATEGORIES] for labels in by_pair.values()
                 if len(labels) == n]
        result["fleiss_kappa"] = fleiss_kappa(table)
        result["fleiss_pairs"], result["fleiss_raters"] = len(table), n
    judges = judge_agreement(by_pair, store)
    if judges:
        result["judges"] = judges
    if gold is not None:
        result["gold"] = agreement_with_gold(by_pair, gold)
    return result


def gold_margins(store: LabelStore, scorer, key: str = "--gold") -> dict[str, float]:
    """pair_id -> ``scorer(prompt, response_a) - scorer(prompt, response_b)`` for every pair;
    a scorer that fails or returns no number is an error naming ``key`` and the pair."""
    from tether.common.errors import ConfigError

    out = {}
    for pair in store.pairs:
        scores = []
        for response in (pair.response_a, pair.response_b):
            try:
                value = scorer(pair.prompt, response)
            except Exception as err:  # the user's function: its failure, named, not a trace from here
                raise ConfigError(f"{key}: the scorer failed on pair {pair.pair_id!r}: {type(err).__name__}: {err}") \
                    from None
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
                raise ConfigError(f"{key}: the scorer returned {value!r} for pair {pair.pair_id!r}; expected a number.")
            scores.append(float(value))
        out[pair.pair_id] = scores[0] - scores[1]
    return out


def agreement_with_gold(by_pair: dict[str, dict[str, str]], gold: dict[str, float]) -> dict[str, dict]:
    """Per annotator (people and judges): the share of their verdicts naming the response the gold
    scorer prefers (a tie counts half), over the pairs they labelled that gold does not tie
    (:func:`tether.algos.judge_format.gold_agreement`), and how many pairs that is."""
    from tether.algos.judge_format import gold_agreement

    outcome = {"a": 1.0, "b": 0.0, "tie": 0.5}
    out = {}
    for who in sorted({w for labels in by_pair.values() for w in labels}):
        mine = [(outcome[labels[who]], gold[pid]) for pid, labels in by_pair.items() if who in labels and pid in gold]
        rate, pairs = gold_agreement([o for o, _ in mine], [m for _, m in mine])
        out[who] = {"agreement": rate, "pairs": pairs}
    return out


def judge_agreement(by_pair: dict[str, dict[str, str]], store: LabelStore) -> dict[str, dict]:
    """Per judge annotator (``judge:<model>``): Cohen's κ with each person on the pairs both labelled,
    and with the people's majority (pairs with a clear one among the people who labelled them), and
    the judge's self-consistency under the order swap (:func:`tether.feedback.judge_labels.self_consistency`)."""
    from tether.feedback.judge_labels import self_consistency

    consistency = self_consistency(store)
    judges = sorted({who for labels in by_pair.values() for who in labels if who.startswith("judge:")}
                    | set(consistency))
    out = {}
    for judge in judges:
        entry: dict = {"labels": sum(judge in labels for labels in by_pair.values()), "kappa_with": {}}
        people = sorted({who for labels in by_pair.values() for who in labels if not who.startswith("judge:")})
        for person in people:
            shared = [labels for labels in by_pair.values() if judge in labels and person in labels]
            if shared:
                entry["kappa_with"][person] = {"kappa": cohen_kappa([s[judge] for s in shared],
                                                                    [s[person] for s in shared]),
                                               "pairs": len(shared)}
        votes = [(labels[judge], majority([v for who, v in labels.items() if not who.startswith("judge:")]))
                 for labels in by_pair.values() if judge in labels and any(not w.startswith("judge:") for w in labels)]
        votes = [(j, m) for j, m in votes if m is not None]
        if votes:
            entry["kappa_with_majority"] = cohen_kappa([j for j, _ in votes], [m for _, m in votes])
            entry["majority_pairs"] = len(votes)
            entry["agreement_with_majority"] = sum(j == m for j, m in votes) / len(votes)
        entry.update(consistency.get(judge, {}))
        out[judge] = entry
    return out


def export_majority(store: LabelStore, path: str | Path) -> dict:
    """Write one preference row per pair whose verdicts have a clear majority for A or B (ties and
    split votes are left out); returns the counts."""
    by_pair = verdicts(store)
    path = Path(path)
    _rewrite(path, [])
    kept = tie = split = 0
    for pair in store.pairs:
        labels = by_pair.get(pair.pair_id)
        if not labels:
            continue
        winner = majority(list(labels.values()))
        if winner is None:
            split += 1
        elif winner == "tie":
            tie += 1
        else:
            good, bad = (pair.response_a, pair.response_b) if winner == "a" else (pair.response_b, pair.response_a)
            _append(path, {"prompt": pair.prompt, "chosen": good, "rejected": bad, "pair_id": pair.pair_id,
                           "votes": dict(Counter(labels.values()))})
            kept += 1
    return {"exported": kept, "majority_tie": tie, "no_majority": split}


def format_stats(stats: dict) -> str:
    lines = [f"pairs: {stats['pairs']}, labelled: {stats['pairs_labelled']}"]
    for who, s in stats["annotators"].items():
        rate = s.get("agreement_with_majority")
        lines.append(f"  {who}: {s['labels']} labels (A {s['a']}, B {s['b']}, tie {s['tie']}); agreement with the "
                     f"others' majority {'-' if rate is None else f'{rate:.3f}'}")
    if stats.get("cohen_kappa") is not None:
        lines.append(f"Cohen's kappa: {stats['cohen_kappa']:.3f} over {stats['cohen_pairs']} pairs both labelled")
    if stats.get("fleiss_kappa") is not None:
        lines.append(f"Fleiss' kappa: {stats['fleiss_kappa']:.3f} over {stats['fleiss_pairs']} pairs with "
                     f"{stats['fleiss_raters']} annotators each")
    for judge, j in stats.get("judges", {}).items():
        with_people = ", ".join(f"{who} {k['kappa']:.3f} ({k['pairs']} pairs)" for who, k in j["kappa_with"].items())
        lines.append(f"{judge}: kappa with {with_people or 'no person (no shared pairs)'}")
        if j.get("kappa_with_majority") is not None:
            lines.append(f"  with the people's majority: kappa {j['kappa_with_majority']:.3f}, agreement "
                         f"{j['agreement_with_majority']:.3f} over {j['majority_pairs']} pairs")
        if j.get("consistency") is not None:
            lines.append(f"  self-consistency under the order swap: {j['consistency']:.3f} ({j['position_bias']} of "
                         f"{j['both_orders']} pairs picked the same position twice)")
    for who, g in stats.get("gold", {}).items():
        rate = "-" if g["agreement"] is None else f"{g['agreement']:.3f}"
        lines.append(f"{who}: agreement with the gold scorer {rate} over {g['pairs']} pairs it does not tie")
    return "\n".join(lines)
