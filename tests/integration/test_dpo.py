"""`tether dpo` on the tiny task's preference pairs (the reward-model stage's files): the implicit
reward learns to rank held-out pairs; IPO and LoRA (reference = adapters off) run too."""

from __future__ import annotations

import json

import pytest

from card_checks import assert_model_card
from stage_helpers import killed_run_resumes_bitwise
from tether.cli import main
from tether.metrics.logger import read_metrics

pytestmark = pytest.mark.slow


def dpo_args(trained, out, *extra):
    task = trained["task"]
    return [f"run.out={out}", "run.progress=false", "run.log_every=5", "run.threads=1",
            f"model.name_or_path={trained['sft']}", f"data.train={task / 'prefs_train.jsonl'}",
            f"data.eval={task / 'prefs_eval.jsonl'}", "data.max_length=64", "optim.lr=1e-3", "optim.batch_size=16",
            "max_steps=30", "eval_every=30", *extra]


def final_eval(out):
    return [r for r in read_metrics(out / "metrics.jsonl") if "eval/accuracy" in r][-1]


def test_dpo_learns_to_rank_held_out_pairs(trained, tmp_path, capsys):
    out = tmp_path / "dpo"
    assert main(["dpo", *dpo_args(trained, out)]) == 0
    result = json.loads(capsys.readouterr().out)
    last = final_eval(out)
    print(f"\nDPO implicit reward: held-out accuracy {last['eval/accuracy']:.3f}, margin {last['eval/margin']:+.3f} "
          f"(explicit RM: {trained['rm_result']['eval/accuracy']:.3f})")
    assert last["eval/accuracy"] > 0.6 and last["eval/margin"] > 0
    assert result["eval/accuracy"] == pytest.approx(last["eval/accuracy"])
    assert (out / "model.safetensors").exists()
    assert_model_card(out, "dpo", metric="eval/accuracy")


def test_ipo_and_a_lora_policy(trained, tmp_path):
    for name, extra in (("ipo", ["dpo.loss=ipo", "max_steps=10", "eval_every=10"]),
                        ("lora", ["lora.r=4", "lora.alpha=8", "max_steps=10", "eval_every=10", "optim.lr=5e-3"])):
        out = tmp_path / name
        assert main(["dpo", *dpo_args(trained, out, *extra)]) == 0
        first = [r for r in read_metrics(out / "metrics.jsonl") if "train/loss" in r][0]
        last = final_eval(out)
        assert last["eval/loss"] < first["train/loss"] + 1e-6, (name, first, last)


def test_a_short_run_scores_only_the_rows_it_trains_on(trained, tmp_path, monkeypatch):
    """2 steps of 8 pairs from 300: the reference forwards those 16 rows (and the held-out pairs),
    not the whole file; no NaN (the rows it skipped) reaches a loss."""
    import tether.objectives.shared as shared
    from tether.loops.common import batch_indices

    forwarded, inside = [], []
    reference_of, pair_logprobs = shared.reference_of, shared.pair_logprobs

    def counting_reference_of(*args, **kwargs):
        inside.append(True)
        try:
            return reference_of(*args, **kwargs)
        finally:
            inside.pop()

    def counting_pair_logprobs(model, pairs, *args):
        if inside:
            forwarded.extend(pairs)
        return pair_logprobs(model, pairs, *args)

    monkeypatch.setattr(shared, "reference_of", counting_reference_of)
    monkeypatch.setattr(shared, "pair_logprobs", counting_pair_logprobs)
    task, out = trained["task"], tmp_path / "short"
    evals = tmp_path / "eval.jsonl"
    evals.write_text("".join((task / "prefs_eval.jsonl").read_text().splitlines(keepends=True)[:5]))
    assert main(["dpo", *dpo_args(trained, out, "max_steps=2", "eval_every=2", "optim.batch_size=8",
                                  f"data.eval={evals}", "run.log_every=1")]) == 0
    trained_rows = {i for idx in batch_indices(300, 8, 2, 0) for i in idx.tolist()}
    assert len(forwarded) == len(trained_rows) + 5 == 21  # was 300 + 5
    rows = [r for r in read_metrics(out / "metrics.jsonl") if "train/loss" in r]
    assert len(rows) == 2 and all(r["train/loss"] == r["train/loss"] for r in rows)  # finite, not NaN


def test_a_killed_dpo_run_resumes_bitwise(trained, tmp_path):
    """SIGKILL at step 5 of 6 (checkpoints every 2 steps), then --resume: the reference log-probs
    of the rows the run draws, computed again, are the uninterrupted run's, and so is the result."""

    def args(out):
        return dpo_args(trained, out, "max_steps=6", "eval_every=3", "optim.batch_size=8", "run.save_every=2",
                        "run.log_every=1")

    killed_run_resumes_bitwise("dpo", args, tmp_path)
