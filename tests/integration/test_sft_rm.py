"""SFT then reward model on the tiny task: checkpoints, metrics, run dirs, response-only loss."""

from __future__ import annotations

import json
import math
import os

import pytest
import torch
import yaml
from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer

from stage_helpers import RM_STEPS, SFT_STEPS, sft_overrides
from card_checks import assert_model_card
from tether.config import RewardModelConfig, SFTConfig, load_config, to_dict
from tether.data import collate_right, load_records, sft_examples, tokenize_sft
from tether.common.errors import ConfigError
from tether.objectives.reward_model import evaluate_pairs, pair_scores, run_reward_model
from tether.objectives.sft import run_sft
from tether.objectives.shared import sft_batch_loss
from tether.objectives.shared import load_pairs
from tether.metrics.logger import read_metrics
from tether.models import load_causal_lm, load_scalar_model, load_tokenizer, score_offset
from tether.models.forward import last_token_scores, position_ids
from tether.models.packing import set_padding_free
from tether.runs import MANIFEST

pytestmark = pytest.mark.slow


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


# -- SFT ----------------------------------------------------------------------------------
def test_sft_checkpoint_loads_with_plain_transformers(trained):
    out = trained["sft"]
    assert (out / MANIFEST).is_file()
    model = AutoModelForCausalLM.from_pretrained(out)
    tok = AutoTokenizer.from_pretrained(out)
    assert tok.pad_token_id != tok.eos_token_id
    trained_model = trained["sft_result"]["engine"].model
    for (name, a), (_, b) in zip(model.state_dict().items(), trained_model.state_dict().items()):
        assert torch.equal(a, b), name
    # and it differs from the base model it started from
    base = AutoModelForCausalLM.from_pretrained(trained["task"] / "base_model")
    assert not torch.equal(base.model.embed_tokens.weight, model.model.embed_tokens.weight)
    card = assert_model_card(out, "sft", metric="eval/loss")
    assert card.data.base_model is None  # a local model without a card names no hub base
    assert "| `optim.lr` | 0.001 |" in card.text and f"starting from `{trained['task'] / 'base_model'}`" in card.text


def test_sft_metrics_and_loss_decreases(trained):
    rows = read_metrics(trained["sft"] / "metrics.jsonl")
    assert all(r["stage"] == "sft" for r in rows)
    train = [r for r in rows if "train/loss" in r]
    assert [r["step"] for r in train] == list(range(1, SFT_STEPS + 1))  # log_every=1
    assert all(_finite(r["train/loss"]) and _finite(r["optim/grad_norm"]) for r in train)
    first, last = train[0]["train/loss"], train[-1]["train/loss"]
    assert last < 0.9 * first, (first, last)
    evals = [r for r in rows if "eval/loss" in r]
    assert evals and evals[-1]["step"] == SFT_STEPS and _finite(evals[-1]["eval/loss"])
    assert rows[0]["data/train_examples"] == 400 and rows[0]["data/eval_examples"] == 50
    result = trained["sft_result"]
    assert result["steps"] == SFT_STEPS


def test_sft_config_yaml_saved(trained):
    saved = yaml.safe_load((trained["sft"] / "config.yaml").read_text())
    assert saved == {"stage": "sft", "workdir": os.getcwd(), **to_dict(trained["sft_cfg"])}
    # The saved file is a valid preset for the same stage.
    saved.pop("stage")
    saved.pop("workdir")
    (trained["root"] / "resaved.yaml").write_text(yaml.safe_dump(saved))
    assert load_config(SFTConfig, trained["root"] / "resaved.yaml") == trained["sft_cfg"]


def _sft_batch(task, tok, n=6):
    examples = sft_examples(load_records(str(task / "sft_train.jsonl")))[:n]
    toks = [tokenize_sft(ex, tok, 64) for ex in examples]
    return collate_right([t.input_ids for t in toks], tok.pad_token_id, [t.loss_mask for t in toks])


def test_sft_loss_has_no_gradient_at_prompt_positions(trained):
    task = trained["task"]
    tok = load_tokenizer(str(trained["sft"]))
    model = load_causal_lm(str(trained["sft"]), tok)
    set_padding_free(model, False)  # per padded position (packed passes equal these: test_packed_equivalence)
    batch = _sft_batch(task, tok)
    ids, attn, mask = batch["input_ids"], batch["attention_mask"], batch["loss_mask"]
    assert ((mask == 0) & (attn == 1)).any(), "premise: the batch has prompt tokens"
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=attn, position_ids=position_ids(attn)).logits
    # The LM head reads the final norm's output position by position: its gradient is the loss's
    # dependence on each position's logits.
    final = []
    hook = model.model.norm.register_forward_hook(lambda module, args, out: final.append(out) or out.retain_grad())
    total = int(mask[:, 1:].sum())
    loss = sft_batch_loss(model, batch, total)
    loss.backward()
    hook.remove()
    per_position = final[0].grad.abs().sum(-1)  # (B, T): position t predicts token t + 1
    target = mask[:, 1:]
    assert (per_position[:, :-1][target == 0] == 0).all()  # prompt and padding targets: no gradient
    assert (per_position[:, -1] == 0).all()
    assert (per_position[:, :-1][target == 1] > 0).all()  # every response token (incl. EOS) counts
    # The value is the mean NLL over response tokens.
    logp = torch.log_softmax(logits.float(), -1)[:, :-1].gather(-1, ids[:, 1:, None])[..., 0]
    torch.testing.assert_close(loss.detach(), -(logp * target).sum() / target.sum(), atol=1e-5, rtol=1e-5)


def test_sft_loss_is_exact_under_gradient_accumulation(trained):
    tok = load_tokenizer(str(trained["sft"]))
    model = load_causal_lm(str(trained["sft"]), tok)
    task = trained["task"]
    examples = sft_examples(load_records(str(task / "sft_train.jsonl")))[:6]
    toks = [tokenize_sft(ex, tok, 64) for ex in examples]
    total = sum(sum(t.loss_mask[1:]) for t in toks)

    def collate(chunk):
        return collate_right([t.input_ids for t in chunk], tok.pad_token_id, [t.loss_mask for t in chunk])

    with torch.no_grad():
        full = sft_batch_loss(model, collate(toks), total)
        parts = sft_batch_loss(model, collate(toks[:2]), total) + sft_batch_loss(model, collate(toks[2:]), total)
    torch.testing.assert_close(full, parts, atol=1e-5, rtol=0)


# -- reward model -------------------------------------------------------------------------
def test_rm_checkpoint_loads_with_plain_transformers(trained):
    out = trained["rm"]
    assert (out / MANIFEST).is_file()
    plain = AutoModelForSequenceClassification.from_pretrained(out).eval()
    assert plain.config.num_labels == 1
    offset = trained["rm_result"]["score_offset"]
    assert _finite(offset) and score_offset(plain) == pytest.approx(offset)

    tok = load_tokenizer(str(out))
    ours = load_scalar_model(str(out), tok)
    _, _, evals, _ = load_pairs(trained["rm_cfg"], tok)
    seqs = [p.prompt_ids + p.chosen_ids for p in evals[:8]] + [p.prompt_ids + p.rejected_ids for p in evals[:8]]
    batch = collate_right(seqs, tok.pad_token_id)
    with torch.no_grad():
        hf = plain(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits[:, 0]
        mine = last_token_scores(ours, batch["input_ids"], batch["attention_mask"])
    torch.testing.assert_close(hf, mine, atol=1e-5, rtol=0)
    assert hf.std() > 0
    card = assert_model_card(out, "rm", role="reward", metric="eval/accuracy")
    assert "reward-model" in card.data.tags and f"reward.models=[{out}]" in card.text


def test_rm_metrics_and_normalisation(trained):
    rows = read_metrics(trained["rm"] / "metrics.jsonl")
    train = [r for r in rows if "train/loss" in r]
    assert [r["step"] for r in train] == list(range(1, RM_STEPS + 1))
    assert all(_finite(r["train/loss"]) and 0 <= r["train/accuracy"] <= 1 for r in train)
    final = [r for r in rows if "eval/accuracy" in r][-1]
    assert 0 <= final["eval/accuracy"] <= 1 and _finite(final["eval/loss"])
    assert any("rm/score_offset" in r for r in rows)
    # After the gauge fix, held-out responses score 0 on average.
    tok = load_tokenizer(str(trained["rm"]))
    model = load_scalar_model(str(trained["rm"]), tok)
    _, _, evals, _ = load_pairs(trained["rm_cfg"], tok)
    metrics = evaluate_pairs(model, evals, tok.pad_token_id, 64, offset=score_offset(model))
    assert abs(metrics["eval/score_mean"]) < 1e-4
    assert metrics["eval/accuracy"] == pytest.approx(final["eval/accuracy"])
    saved = yaml.safe_load((trained["rm"] / "config.yaml").read_text())
    assert saved == {"stage": "rm", "workdir": os.getcwd(), **to_dict(trained["rm_cfg"])}


def test_pair_scores_are_chosen_then_rejected(trained):
    tok = load_tokenizer(str(trained["rm"]))
    model = load_scalar_model(str(trained["rm"]), tok)
    _, _, evals, _ = load_pairs(trained["rm_cfg"], tok)
    pairs = evals[:3]
    with torch.no_grad():
        c, r = pair_scores(model, pairs, tok.pad_token_id)
        swapped_c, swapped_r = pair_scores(model, pairs[::-1], tok.pad_token_id)
    torch.testing.assert_close(c, swapped_c.flip(0), atol=1e-5, rtol=0)
    torch.testing.assert_close(r, swapped_r.flip(0), atol=1e-5, rtol=0)


# -- run directories ----------------------------------------------------------------------
def test_run_dir_holding_another_run_is_refused(trained, tmp_path):
    task = trained["task"]
    out = tmp_path / "run"
    out.mkdir()
    other = {"stage": "sft", **to_dict(trained["sft_cfg"])}
    other["run"]["seed"] = 123
    (out / "config.yaml").write_text(yaml.safe_dump(other))
    (out / "metrics.jsonl").write_text(json.dumps({"stage": "sft", "step": 1, "old": True}) + "\n")
    quick = ["max_steps=1", "optim.batch_size=4", "data.eval=null", "data.eval_size=0"]

    cfg = load_config(SFTConfig, None, sft_overrides(task, out, *quick))
    with pytest.raises(ConfigError) as info:
        run_sft(cfg)
    assert str(out) in str(info.value) and "run.overwrite" in str(info.value)
    assert yaml.safe_load((out / "config.yaml").read_text()) == other  # untouched
    assert "old" in (out / "metrics.jsonl").read_text()

    # Another stage into an SFT directory is refused too.
    rm_cfg = load_config(RewardModelConfig, None, [
        f"run.out={trained['sft']}", f"model.name_or_path={trained['sft']}", f"data.train={task / 'prefs_train.jsonl'}",
    ])
    with pytest.raises(ConfigError, match="different run"):
        run_reward_model(rm_cfg)

    cfg = load_config(SFTConfig, None, sft_overrides(task, out, *quick, "run.overwrite=true"))
    run_sft(cfg)
    assert yaml.safe_load((out / "config.yaml").read_text()) == {"stage": "sft", "workdir": os.getcwd(), **to_dict(cfg)}
    rows = read_metrics(out / "metrics.jsonl")
    assert rows and not any(r.get("old") for r in rows)
    assert (out / MANIFEST).is_file()
    AutoModelForCausalLM.from_pretrained(out)
