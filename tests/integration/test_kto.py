"""`tether kto` on the tiny task: on the reward-model stage's preference pairs (each split into a
desirable and an undesirable row) and on unpaired labelled rows, the implicit reward learns to
put desirable responses above undesirable ones on held-out data; z₀ is the same however a batch
is cut into micro-batches; LoRA, the model card, a killed run's resume and the dry run."""

from __future__ import annotations

import json

import pytest
from card_checks import assert_model_card
from stage_helpers import killed_run_resumes_bitwise
from test_dpo import dpo_args as pair_args  # the same pairs as DPO's tests

from tether.cli import main
from tether.metrics.logger import read_metrics

pytestmark = pytest.mark.slow


def kto_args(trained, out, *extra):
    # batch 32 rows = DPO's 16 pairs; KTO's beta and lr as DPO's tests.
    return pair_args(trained, out, "optim.batch_size=32", "max_steps=20", "eval_every=20", *extra)


def unpaired_file(pairs_path, out_path, every_desirable=False):
    """Unpaired rows from a pair file: the chosen response of even rows (desirable), the rejected
    one of odd rows (undesirable), so that no prompt has both; or every chosen response."""
    lines = [json.loads(line) for line in pairs_path.read_text().splitlines() if line.strip()]
    rows = [{"prompt": r["prompt"], "completion": r["chosen"], "label": True} if every_desirable or i % 2 == 0
            else {"prompt": r["prompt"], "completion": r["rejected"], "label": False} for i, r in enumerate(lines)]
    out_path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return out_path


def rows(out, key):
    return [r for r in read_metrics(out / "metrics.jsonl") if key in r]


def test_kto_on_pairs_ranks_held_out_pairs(trained, tmp_path, capsys):
    out = tmp_path / "kto"
    assert main(["kto", *kto_args(trained, out, "run.log_every=1")]) == 0
    result = json.loads(capsys.readouterr().out)
    counts = rows(out, "data/train_rows")[0]
    assert counts["data/train_rows"] == 2 * 300 and counts["data/desirable"] == counts["data/undesirable"] == 300
    assert counts["data/desirable_weight_ratio"] == 1.0
    first, last = rows(out, "train/loss")[0], rows(out, "eval/loss")[-1]
    print(f"\nKTO on pairs: held-out accuracy {last['eval/accuracy']:.3f}, margin {last['eval/margin']:+.3f}, "
          f"z0 {last['eval/kl_reference']:.3f}, loss {first['train/loss']:.3f} -> {last['eval/loss']:.3f}")
    # Both rewards start at 0 (the policy is the reference): loss 0.5, z0 0, margin 0.
    assert first["train/loss"] == pytest.approx(0.5, abs=1e-3)
    assert first["kto/kl_reference"] == pytest.approx(0.0, abs=1e-4)
    # 20 steps reach accuracy 0.57, margin +0.15 here; both rewards fall (to about -1.7), the
    # desirable ones less. DPO's pairwise loss ranks these pairs better (> 0.6 in 30 steps).
    assert last["eval/accuracy"] > 0.5 and last["eval/margin"] > 0.1 and last["eval/loss"] < first["train/loss"]
    assert last["eval/desirable_reward"] > last["eval/undesirable_reward"]
    assert result["eval/accuracy"] == pytest.approx(last["eval/accuracy"])
    assert (out / "model.safetensors").exists()
    assert_model_card(out, "kto", metric="eval/accuracy")


def test_kto_on_unpaired_rows(trained, tmp_path):
    task = trained["task"]
    train = unpaired_file(task / "prefs_train.jsonl", tmp_path / "train.jsonl")
    out = tmp_path / "kto"
    assert main(["kto", *kto_args(trained, out, f"data.train={train}")]) == 0
    counts = rows(out, "data/train_rows")[0]
    assert counts["data/train_rows"] == 300 and counts["data/desirable"] == 150
    last = rows(out, "eval/loss")[-1]
    print(f"\nKTO on unpaired rows: held-out accuracy {last['eval/accuracy']:.3f}, margin {last['eval/margin']:+.3f}")
    # 0.57 and +0.21 here (held out: the pair file, so the accuracy is pairwise); 0.5 is the
    # reference's own loss (every reward 0).
    assert last["eval/margin"] > 0.1 and last["eval/loss"] < 0.5


def test_z0_and_the_step_do_not_depend_on_the_micro_batches(trained, tmp_path):
    """z₀ is the whole batch's, so 4 micro-batches give the one-batch step (to float rounding).
    Desirable rows only: the policy raises their responses after any prompt, so z₀ leaves 0."""
    train = unpaired_file(trained["task"] / "prefs_train.jsonl", tmp_path / "train.jsonl", every_desirable=True)

    def run(name, *extra):
        out = tmp_path / name
        assert main(["kto", *kto_args(trained, out, f"data.train={train}", "max_steps=4", "eval_every=4",
                                      "run.log_every=1", "optim.batch_size=16", *extra)]) == 0
        return rows(out, "train/loss")

    one, four = run("one"), run("four", "optim.grad_accum_steps=4")
    assert one[-1]["kto/kl_reference"] > 0.01 and "train/undesirable_reward" not in one[-1]
    for a, b in zip(one, four):
        for key in ("train/loss", "kto/kl_reference", "train/desirable_reward"):
            assert b[key] == pytest.approx(a[key], rel=1e-5, abs=1e-6), key


def test_a_lora_policy(trained, tmp_path):
    out = tmp_path / "lora"
    assert main(["kto", *kto_args(trained, out, "lora.r=4", "lora.alpha=8", "max_steps=10", "eval_every=10",
                                  "optim.lr=5e-3")]) == 0
    last = rows(out, "eval/loss")[-1]
    print(f"\nKTO with LoRA: margin {last['eval/margin']:+.3f}, loss {last['eval/loss']:.4f}")
    assert last["eval/loss"] < 0.5 and last["eval/margin"] > 0
    assert (out / "adapter").is_dir()


def test_a_killed_kto_run_resumes_bitwise(trained, tmp_path):
    """SIGKILL at step 5 of 6 (checkpoints every 2 steps), then --resume: the result is the
    uninterrupted run's."""

    def args(out):
        return kto_args(trained, out, "max_steps=6", "eval_every=3", "optim.batch_size=8", "run.save_every=2",
                        "run.log_every=1")

    killed_run_resumes_bitwise("kto", args, tmp_path)


def test_the_dry_run_plans_the_reference_and_the_ratio(trained, tmp_path, capsys):
    out = tmp_path / "kto"
    assert main(["kto", *kto_args(trained, out), "--dry-run"]) == 0
    plan = capsys.readouterr().out
    assert "600 rows" in plan and "300 desirable and 300 undesirable" in plan
    assert "reference  log-probs" in plan and "mismatched" in plan
    assert not out.exists()
