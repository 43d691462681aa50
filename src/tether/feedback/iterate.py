"""`tether iterate`: the loop of the InstructGPT paper, run in rounds. Each round does four steps:

1. sample comparison pairs from the current policy (`tether pairs`, two samples at temperature 1);
2. label them, by a callable judge or by people on the labelling page;
3. retrain the reward model on every label so far: the task's original preference file plus
   each round's labels;
4. run PPO from the SFT model with the new reward model. That policy samples the next round's pairs.

Each round records what the reference texts ask about: the reward model's held-out accuracy,
its spurious bias (its score gain for `!` on the task's probes), and PPO's proxy and gold scores.
Together they show whether refreshing labels on the policy's own outputs shrinks what the policy
can exploit.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

from tether.registry.algorithms import DEFAULT_ALGORITHM
from tether.feedback.store import LabelStore, left_side, load_pairs

Labeller = Callable[[str, str, str], str]  # (prompt, response_a, response_b) -> "a" | "b" | "tie"


def label_with(labeller: Labeller, store: LabelStore, name: str = "judge") -> dict:
    """Every pair of ``store`` labelled by a callable; returns the counts of its verdicts."""
    counts = {"a": 0, "b": 0, "tie": 0}
    for pair in store.pairs:
        if pair.pair_id in store.seen_by(name):
            continue
        verdict = labeller(pair.prompt, pair.response_a, pair.response_b)
        if verdict not in counts:
            raise ValueError(f"the labeller returned {verdict!r} for pair {pair.pair_id}; expected 'a', 'b' or 'tie'")
        counts[verdict] += 1
        left = left_side(pair.pair_id, name)
        store.record(name, pair.pair_id, "tie" if verdict == "tie" else ("1" if verdict == left else "2"), left)
    return counts


def wait_for_people(store: LabelStore, say, poll_s: float = 2.0, report_s: float = 60.0) -> None:
    """Block until every pair has its ``overlap`` verdicts on the labelling page (skipped pairs
    wait for another annotator); says how many are left about every ``report_s`` seconds."""
    last = 0.0
    while True:
        missing = sum(1 for p in store.pairs if store.labels_of(p.pair_id) < store.overlap)
        if not missing:
            return
        if time.monotonic() - last >= report_s:
            say(f"waiting for {missing} pairs to be labelled on the page")
            last = time.monotonic()
        time.sleep(poll_s)


def combined_labels(base: Path, rounds: list[Path], out: Path) -> int:
    """The reward model's training file: the original preferences, then every round's labels."""
    lines = [line for path in [base, *rounds] if path.is_file() for line in path.read_text().splitlines() if line.strip()]
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return len(lines)


def round_prompts(prompts: list[dict], per_round: int, index: int) -> list[dict]:
    """Round ``index``'s ``per_round`` prompt rows, wrapping around the file (a prompt may come
    back in the same round: its two samples are new draws)."""
    start = (index * per_round) % max(len(prompts), 1)
    return [prompts[(start + i) % len(prompts)] for i in range(per_round)]


def iterate_demo(out: Path, demo: Path, rounds: int, pairs_per_round: int, labeller: Labeller | None,
                 seed: int = 0, overrides: dict | None = None, say=print, serve_page=None, judge=None) -> dict:
    """Run ``rounds`` rounds on the demo task from ``demo``'s SFT model; write ``out/iterate.json``.
    ``labeller`` None means people label on the page (``serve_page(store)`` starts it); ``judge``:
    (client, rubric) of an LLM judge that labels each round first (:mod:`tether.feedback.judge_labels`;
    with the page too, each pair then waits for a person's verdict as well)."""
    from tether.config import RLConfig, RewardModelConfig, load_config
    from tether.demo import preset, probe_margins
    from tether.feedback.pairs import PairSpec, sample_pairs
    from tether.loops.rl_run import run_rl
    from tether.objectives.reward_model import run_reward_model
    from tether.metrics.logger import read_metrics
    from tether.models import load_scalar_model, load_tokenizer
    from tether.data import encode_prompt, load_records, prompt_examples, prompt_text

    out.mkdir(parents=True, exist_ok=True)
    overrides = overrides or {}
    task = demo / "task"
    tokenizer = load_tokenizer(str(demo / "sft"))
    examples = prompt_examples(load_records(str(task / "ppo_prompts.jsonl")))
    policy, label_files, table = demo / "sft", [], [baseline(demo, tokenizer)]
    for r in range(1, rounds + 1):
        here = out / f"round{r}"
        here.mkdir(exist_ok=True)
        chosen = round_prompts(examples, pairs_per_round, r - 1)
        rows, counts = sample_pairs(PairSpec("temperature", str(policy), seed=seed + r), [prompt_text(e.prompt) for e in chosen],
                                    [encode_prompt(e.prompt, tokenizer) for e in chosen], tokenizer)
        pairs_file = here / "pairs.jsonl"
        pairs_file.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
        store = LabelStore(load_pairs(pairs_file), here / "labels.jsonl",
                           overlap=2 if judge is not None and serve_page is not None else 1)
        say(f"round {r}: {len(rows)} pairs from {policy.name} ({counts['identical_dropped']} identical and "
            f"{counts['empty_dropped']} with an empty response dropped)")
        if judge is not None:
            from tether.feedback.judge_labels import label_with_judge

            verdicts = label_with_judge(judge[0], store, judge[1], say=say)
        if labeller is not None:
            verdicts = label_with(labeller, store)
        elif serve_page is not None:
            stop = serve_page(store)
            wait_for_people(store, say)
            stop()
            verdicts = verdicts if judge is not None else {}
        label_files.append(store.out)
        train = here / "rm_train.jsonl"
        n_train = combined_labels(task / "prefs_train.jsonl", label_files, train)
        common = [f"run.seed={seed}", "run.overwrite=true", "run.progress=false"]
        rm_cfg = load_config(RewardModelConfig, preset("rm"), [
            f"run.out={here / 'rm'}", f"model.name_or_path={demo / 'sft'}", f"data.train={train}",
            f"data.eval={task / 'prefs_eval.jsonl'}", *common, *overrides.get("rm", [])])
        say(f"round {r}: reward model on {n_train} pairs")
        rm = run_reward_model(rm_cfg)
        ppo_cfg = load_config(RLConfig, preset(DEFAULT_ALGORITHM), [
            f"run.out={here / DEFAULT_ALGORITHM}", f"model.name_or_path={demo / 'sft'}", f"prompts={task / 'ppo_prompts.jsonl'}",
            f"reward.models=[{here / 'rm'}]", f"eval.prompts={task / 'eval_prompts.jsonl'}", *common,
            *overrides.get(DEFAULT_ALGORITHM, [])])
        say(f"round {r}: PPO from SFT with this reward model")
        run_rl(ppo_cfg)
        last = [row for row in read_metrics(here / DEFAULT_ALGORITHM / "metrics.jsonl") if "eval/gold_score" in row][-1]
        probes = probe_margins(load_scalar_model(str(here / "rm"), tokenizer), tokenizer, task / "probes.jsonl")
        table.append({"round": r, "pairs": len(rows), "verdicts": verdicts, "rm_train_pairs": n_train,
                      "rm_accuracy": rm["eval/accuracy"], **probes,
                      "ppo_proxy": last["eval/proxy_score"], "ppo_gold": last["eval/gold_score"],
                      "ppo_kl": last["eval/kl"]})
        policy = here / DEFAULT_ALGORITHM
        (out / "iterate.json").write_text(json.dumps({"rounds": table}, indent=2), encoding="utf-8")
    return {"rounds": table}


def baseline(demo: Path, tokenizer) -> dict:
    """Round 0: the demo's own reward model (the task's original labels) and, when the demo
    directory holds one, its PPO run."""
    from tether.demo import probe_margins
    from tether.metrics.logger import read_metrics
    from tether.models import load_scalar_model

    rm_rows = [r for r in read_metrics(demo / "rm" / "metrics.jsonl") if "eval/accuracy" in r]
    probes = probe_margins(load_scalar_model(str(demo / "rm"), tokenizer), tokenizer, demo / "task" / "probes.jsonl")
    n_train = sum(1 for line in (demo / "task" / "prefs_train.jsonl").read_text().splitlines() if line.strip())
    row = {"round": 0, "pairs": 0, "verdicts": {}, "rm_train_pairs": n_train, "rm_accuracy": rm_rows[-1]["eval/accuracy"],
           **probes, "ppo_proxy": None, "ppo_gold": None, "ppo_kl": None}
    if (demo / DEFAULT_ALGORITHM / "metrics.jsonl").is_file():
        last = [r for r in read_metrics(demo / DEFAULT_ALGORITHM / "metrics.jsonl") if "eval/gold_score" in r][-1]
        row.update(ppo_proxy=last["eval/proxy_score"], ppo_gold=last["eval/gold_score"], ppo_kl=last["eval/kl"])
    return row


def format_rounds(table: list[dict]) -> str:
    lines = ["| round | pairs labelled | RM train pairs | RM held-out accuracy | RM `!` bias | RM correct-answer margin | "
             "PPO proxy | PPO gold | PPO KL |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    def f(x, fmt="{:+.3f}"):
        return "—" if x is None else fmt.format(x)

    for row in table:
        lines.append(f"| {row['round']} | {row['pairs']} | {row['rm_train_pairs']} | {row['rm_accuracy']:.3f} | "
                     f"{row['spurious_bias']:+.3f} | {row['correct_margin']:+.3f} | {f(row['ppo_proxy'])} | "
                     f"{f(row['ppo_gold'])} | {f(row['ppo_kl'], '{:.2f}')} |")
    return "\n".join(lines)

