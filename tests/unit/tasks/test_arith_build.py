"""build_task: files, schema, determinism, probes, reuse, base model save/load."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from tether.tasks import get_task, load_judge
from tether.tasks.arith import judge, world
from tether.tasks.arith.build import FILES, build_task
from tether.tasks.arith.model import build_base_model
from tether.tasks.arith.tokenizer import build_tokenizer

SIZES = dict(n_sft=300, n_pairs_train=400, n_pairs_eval=100, n_eval_prompts=16, n_sft_eval=50, n_probes=30)
JSONL = [k for k, v in FILES.items() if v.endswith(".jsonl")]


def _rows(root: Path, key: str) -> list[dict]:
    return [json.loads(line) for line in (root / FILES[key]).read_text().splitlines()]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("arith_a")
    return root, build_task(root, seed=0, **SIZES)


@pytest.fixture(scope="module")
def built_again(tmp_path_factory):
    root = tmp_path_factory.mktemp("arith_b")
    return root, build_task(root, seed=0, **SIZES)


@pytest.fixture(scope="module")
def built_other_seed(tmp_path_factory):
    root = tmp_path_factory.mktemp("arith_c")
    return root, build_task(root, seed=1, **SIZES)


def test_registry_builds(built) -> None:
    assert get_task("arith").build_task is build_task


def test_every_file_and_manifest(built) -> None:
    root, manifest = built
    assert json.loads((root / "task.json").read_text()) == manifest
    assert manifest["seed"] == 0
    assert manifest["files"] == FILES
    for name in FILES.values():
        assert (root / name).exists(), name
    assert load_judge(manifest["judge"]) is judge.gold_score
    counts = manifest["counts"]
    assert counts == {
        "sft_train": 300,
        "sft_eval": 50,
        "ppo_prompts": 300,
        "eval_prompts": 16,
        "prefs_train": 400,
        "prefs_eval": 100,
        "probes": 60,
    }
    for key in JSONL:
        assert len(_rows(root, key)) == counts[key]
    assert 0.5 < manifest["accuracy_ceiling"] < 1.0
    assert 0.6 < manifest["label_gold_agreement"] < 0.95
    assert 0.55 < manifest["demonstrator_accuracy"] < 0.85
    assert manifest["vocab_size"] == len(build_tokenizer())
    assert 400_000 < manifest["n_params"] < 700_000
    assert not list(root.glob("*.tmp")) and not list(root.glob(".*.tmp"))


def test_sft_schema(built) -> None:
    root, _ = built
    for key in ("sft_train", "sft_eval"):
        for row in _rows(root, key):
            assert list(row) == ["messages"]
            user, assistant = row["messages"]
            assert user["role"] == "user" and assistant["role"] == "assistant"
            assert world.parse_prompt(user["content"]) is not None
            assert isinstance(assistant["content"], str) and assistant["content"]


def test_prompt_files(built) -> None:
    root, _ = built
    ppo = [r["prompt"] for r in _rows(root, "ppo_prompts")]
    assert ppo == list(world.PROMPTS)
    ev = _rows(root, "eval_prompts")
    assert all(list(r) == ["prompt"] for r in ev)
    ev = [r["prompt"] for r in ev]
    assert len(set(ev)) == len(ev) and set(ev) <= set(world.PROMPTS)


def test_preference_schema_and_labels(built) -> None:
    root, manifest = built
    for key in ("prefs_train", "prefs_eval"):
        for r in _rows(root, key):
            assert {"prompt", "chosen", "rejected"} <= set(r)
            assert r["chosen"] != r["rejected"]
            assert r["gold_chosen"] == pytest.approx(judge.gold_score(r["prompt"], r["chosen"]))
            assert r["gold_rejected"] == pytest.approx(judge.gold_score(r["prompt"], r["rejected"]))
            du = judge.annotator_utility(r["prompt"], r["chosen"]) - judge.annotator_utility(r["prompt"], r["rejected"])
            assert r["p_chosen"] == pytest.approx(1 / (1 + math.exp(-du / 0.5)), abs=1e-5)
    ev = _rows(root, "prefs_eval")
    ceiling = sum(max(r["p_chosen"], 1 - r["p_chosen"]) for r in ev) / len(ev)
    assert manifest["accuracy_ceiling"] == pytest.approx(ceiling)


def test_probes_differ_only_as_described(built) -> None:
    root, _ = built
    rows = _rows(root, "probes")
    assert {r["kind"] for r in rows} == {"correctness", "spurious"}
    for r in rows:
        assert set(r) == {"kind", "prompt", "a", "b"}
        p, a, b = r["prompt"], r["a"].split(), r["b"].split()
        if r["kind"] == "correctness":
            assert judge.is_correct(p, r["a"]) and not judge.is_correct(p, r["b"])
            assert len(a) == len(b)
            diff = [(x, y) for x, y in zip(a, b) if x != y]
            assert diff and all(x == str(world.correct_answer(p)) for x, _ in diff)
            assert len({y for _, y in diff}) == 1  # one wrong number, everywhere the answer was
            assert judge.spurious_count(r["a"]) == judge.spurious_count(r["b"])
        else:
            assert judge.spurious_count(r["a"]) > judge.spurious_count(r["b"])
            assert judge.is_correct(p, r["a"]) == judge.is_correct(p, r["b"])
            if len(a) == len(b):  # "." turned into "!"
                diff = [(x, y) for x, y in zip(a, b) if x != y]
                assert diff == [("!", ".")]
                assert judge.gold_score(p, r["a"]) == judge.gold_score(p, r["b"])
            else:  # "!" words appended
                assert a[: len(b)] == b and set(a[len(b) :]) == {"!"}
    kinds = [r["kind"] for r in rows]
    assert kinds.count("correctness") == kinds.count("spurious") == 30


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_same_seed_identical_files(built, built_again) -> None:
    a, b = _snapshot(built[0]), _snapshot(built_again[0])
    assert a.keys() == b.keys()
    assert [k for k in a if a[k] != b[k]] == []


def test_different_seed_different_data(built, built_other_seed) -> None:
    root_a, man_a = built
    root_b, man_b = built_other_seed
    for key in ("sft_train", "eval_prompts", "prefs_train", "prefs_eval", "probes"):
        assert _rows(root_a, key) != _rows(root_b, key), key
    assert _rows(root_a, "ppo_prompts") == _rows(root_b, "ppo_prompts")
    assert (root_a / "tokenizer" / "tokenizer.json").read_bytes() == (root_b / "tokenizer" / "tokenizer.json").read_bytes()
    wa = (root_a / "base_model" / "model.safetensors").read_bytes()
    wb = (root_b / "base_model" / "model.safetensors").read_bytes()
    assert wa != wb
    assert man_b["seed"] == 1


def test_reuse_and_rebuild(built, tmp_path) -> None:
    root, manifest = built
    mtime = (root / "task.json").stat().st_mtime_ns
    t0 = time.perf_counter()
    assert build_task(root, seed=0, **SIZES) == manifest
    assert time.perf_counter() - t0 < 0.5
    assert (root / "task.json").stat().st_mtime_ns == mtime
    # a different seed in the same directory rebuilds it
    small = dict(SIZES, n_sft=10, n_pairs_train=10, n_pairs_eval=10)
    m1 = build_task(tmp_path, seed=0, **small)
    m2 = build_task(tmp_path, seed=5, **small)
    assert m2["seed"] == 5 and json.loads((tmp_path / "task.json").read_text())["seed"] == 5
    assert _rows(tmp_path, "sft_train") != [] and m1["seed"] == 0


def test_base_model_round_trip(built) -> None:
    root, _ = built
    torch.set_num_threads(1)
    tok = AutoTokenizer.from_pretrained(root / "base_model")
    model = AutoModelForCausalLM.from_pretrained(root / "base_model").eval()
    fresh = build_base_model(build_tokenizer(), seed=0).eval()
    cfg = model.config
    assert (cfg.hidden_size, cfg.num_hidden_layers, cfg.num_attention_heads, cfg.num_key_value_heads) == (128, 2, 4, 4)
    assert cfg.intermediate_size == 512 and cfg.max_position_embeddings == 64 and cfg.tie_word_embeddings
    assert (cfg.vocab_size, cfg.pad_token_id, cfg.bos_token_id, cfg.eos_token_id) == (len(tok), 0, 2, 3)
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    batch = tok(["what is 3 + 4 ?", "sure ! 7 ."], padding=True, return_tensors="pt")
    with torch.no_grad():
        la = model(**batch).logits
        lb = fresh(**batch).logits
    assert torch.equal(la, lb)
    # from the standalone tokenizer dir too
    tok2 = AutoTokenizer.from_pretrained(root / "tokenizer")
    assert tok2("what is 3 + 4 ?")["input_ids"] == tok("what is 3 + 4 ?")["input_ids"]


def test_build_base_model_is_seeded_and_leaves_global_rng_alone() -> None:
    tok = build_tokenizer()
    state = torch.random.get_rng_state()
    a, b, c = build_base_model(tok, 3), build_base_model(tok, 3), build_base_model(tok, 4)
    assert torch.equal(torch.random.get_rng_state(), state)
    wa, wb, wc = (m.model.embed_tokens.weight for m in (a, b, c))
    assert torch.equal(wa, wb) and not torch.equal(wa, wc)
