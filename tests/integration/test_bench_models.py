"""`tether bench --model`: a real architecture's config (here a tiny Qwen2-shaped one) with random
weights, PPO and GRPO end to end through the CLI; `--write-model` as a stand-in for a hub id; and
the bad `--model`, `--device`, `--algorithm` inputs as one-paragraph errors."""

from __future__ import annotations

import json

import pytest
import torch

from tether.bench.shapes import model_config
from tether.cli import main

from bad_input_helpers import assert_clean_error, cli

TINY = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            intermediate_size=64, vocab_size=1000, max_position_embeddings=128)
RUN = ["--iterations", "2", "--threads", "1", "--batch", "2", "--response-length", "4", "--no-peak"]


@pytest.fixture(scope="module")
def tiny_config(tmp_path_factory):
    """A directory with only a config.json: Qwen2.5-0.5B's architecture at a toy size."""
    out = tmp_path_factory.mktemp("tiny_qwen")
    model_config("qwen2.5-0.5b", **TINY).save_pretrained(out)
    return out


@pytest.fixture
def no_start(monkeypatch):
    """Fails the test if the benchmark starts (bad input must be refused before any work)."""
    import tether.distributed

    monkeypatch.setattr(tether.distributed, "DistributedSession",
                        lambda *a, **k: (_ for _ in ()).throw(AssertionError("bench started")))


@pytest.mark.parametrize("algorithm", ["ppo", "grpo"])
def test_bench_model_path_runs_and_reports_memory(tiny_config, algorithm, capsys):
    code = main(["bench", "--model", str(tiny_config), "--algorithm", algorithm, *RUN])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    report = json.loads(captured.out)
    assert report["model"] == str(tiny_config) and report["algorithm"] == algorithm and report["size"] is None
    assert report["peak_rss_mb"] >= report["rss_before_models_mb"] > 0  # (the peak may be an earlier test's)
    assert report["peak_device_mb"] is None  # a CPU run
    roles = set(report["role_params"])
    critic = {"critic"} if algorithm == "ppo" else set()
    assert roles == {"actor", "reference", "reward"} | critic
    assert report["role_params"]["actor"]["trained"] == report["params"]["policy"]
    split = report["predicted_peak_split"]
    kinds = {k: v for k, v in split.items() if k not in ("counts", "phase")}
    assert {"weights", "gradients", "optimizer"} <= set(kinds) and split["counts"]
    assert report["predicted_peak_mb"] == pytest.approx(sum(kinds.values()), abs=0.1 * len(kinds))
    assert report["predicted_peak_mb"] > 0
    assert report["iteration_s"]["median"] > 0
    phases = {"generate", "logprobs", "ref_logprobs", "reward", "update"} | ({"values"} if critic else set())
    rates = report["tokens_per_s"]
    assert set(rates) == phases and rates["logprobs"] is None  # the rollout's own log-probs: no forward
    assert all(rates[p] > 0 for p in phases - {"logprobs"})
    group = 1 if algorithm == "ppo" else 4
    assert report["config"]["episodes"] == 2 * group
    assert report["params"]["policy"] > 1000 * 32  # the 1000-token vocabulary is in the model


def test_bench_model_lora_predicts_one_copy_of_the_base(tiny_config, capsys):
    code = main(["bench", "--model", str(tiny_config), "--lora", "4", "--grad-ckpt", *RUN])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    roles = json.loads(captured.out)["role_params"]
    # The reference is the actor's base with the adapters off, the reward model the critic's base:
    # their weights are counted once, with the actor and the critic.
    assert roles["reference"] == roles["reward"] == {"frozen": 0, "trained": 0}
    assert 0 < roles["actor"]["trained"] < roles["actor"]["frozen"]


def test_write_model_is_a_checkpoint_tether_loads(tiny_config, tmp_path, capsys):
    from tether.models.loading import load_causal_lm, load_tokenizer

    out = tmp_path / "qwen-tiny"
    assert main(["bench", "--model", str(tiny_config), "--write-model", str(out)]) == 0
    tok = load_tokenizer(str(out))
    model = load_causal_lm(str(out), tok)
    assert len(tok) == TINY["vocab_size"] == model.config.vocab_size  # no pad token had to be added
    assert type(model).__name__ == "Qwen2ForCausalLM" and model.config.num_hidden_layers == 2
    assert model.lm_head.weight is model.model.embed_tokens.weight
    assert model.config.eos_token_id == tok.eos_token_id
    ids = tok("what is 2 + 2 ?", return_tensors="pt")["input_ids"]
    assert model(ids).logits.shape == (1, ids.shape[1], TINY["vocab_size"])
    assert not [p for p in tmp_path.iterdir() if p.name != "qwen-tiny"]  # no staging directory left
    # The written directory serves as --model too, with its own tokenizer.
    capsys.readouterr()
    assert main(["bench", "--model", str(out), *RUN]) == 0
    assert json.loads(capsys.readouterr().out)["model"] == str(out)


def test_write_model_refuses_a_non_empty_directory(tiny_config, tmp_path, capsys):
    (tmp_path / "keep.txt").write_text("mine")
    code, err = cli(capsys, ["bench", "--model", str(tiny_config), "--write-model", str(tmp_path)])
    assert_clean_error(code, err, "bench", "--write-model", "not an empty directory")
    assert [p.name for p in tmp_path.iterdir()] == ["keep.txt"]


def _broken_config(tmp_path):
    (tmp_path / "config.json").write_text("{not json")
    return tmp_path


@pytest.mark.parametrize("case", ["unknown name", "no directory", "no config.json", "broken config.json",
                                  "not a causal LM", "model and size", "write without model", "unknown algorithm",
                                  "scaling with grpo"])
def test_bench_bad_model_inputs_are_one_paragraph(case, tmp_path, capsys, no_start):
    argv, needles = {
        "unknown name": (["--model", "qwen9-0.1b"], ["--model 'qwen9-0.1b'", "qwen2.5-0.5b"]),
        "no directory": (["--model", str(tmp_path / "missing")], ["neither a known shape"]),
        "no config.json": (["--model", str(tmp_path)], ["without a config.json"]),
        "broken config.json": (["--model", str(tmp_path)], ["config.json could not be read"]),
        "not a causal LM": (["--model", str(tmp_path)], ["T5Config", "cannot build"]),
        "scaling with grpo": (["--size", "micro", "--scaling", "--algorithm", "grpo"], ["--scaling", "--algorithm"]),
        "model and size": (["--model", "smollm2-135m", "--size", "micro"], ["--size", "give one"]),
        "write without model": (["--write-model", str(tmp_path / "w")], ["--write-model needs --model"]),
        "unknown algorithm": (["--size", "micro", "--algorithm", "dpo"], ["--algorithm 'dpo'", "grpo"]),
    }[case]
    if case == "broken config.json":
        _broken_config(tmp_path)
    if case == "not a causal LM":
        (tmp_path / "config.json").write_text(json.dumps({"model_type": "t5", "vocab_size": 100}))
    code, err = cli(capsys, ["bench", *argv])
    assert_clean_error(code, err, "bench", *needles)
    assert not (tmp_path / "w").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device")
def test_bench_missing_device_is_one_paragraph(tiny_config, capsys, no_start):
    code, err = cli(capsys, ["bench", "--model", str(tiny_config), "--device", "cuda", *RUN])
    assert_clean_error(code, err, "bench", "--device", "no CUDA device")
