"""Bad arguments to `tether eval` and `tether serve` through the real CLI (docs/reliability.md,
first new-user trial, class 4): one `tether COMMAND: error:` paragraph naming the flag and the
value, exit code 2, no traceback, and all of it before any model (eval: before any prompt file,
config or tokenizer for plain argument errors; before any weights for the context checks).
`tether serve` binds its socket before loading the models, so a busy port is an error in a moment
and no "serving on" banner is printed. Valid runs still work.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

import tether.models
import tether.serve.server
from tether.cli import build_parser
from tether.common.errors import ConfigError

from bad_input_helpers import LONG_PROMPT, assert_clean_error, good_prompts, write_jsonl

BANNER = "tether serve: '"


class ReachedWeights(Exception):
    """A patched weight loader was reached: every check before it passed."""


def cli_any(capsys, argv: list[str]) -> tuple[int, str, str]:
    """Like ``cli``, also for argparse's own errors (SystemExit), with stdout."""
    from tether.cli import main

    try:
        code = main(argv)
    except SystemExit as exit_:
        code = exit_.code
    captured = capsys.readouterr()
    return code, captured.err, captured.out


@pytest.fixture(scope="module")
def rm_dir(task, tmp_path_factory) -> Path:
    """A scalar-head (num_labels=1) checkpoint of the base model: a stand-in reward model."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    path = tmp_path_factory.mktemp("eval-rm") / "rm"
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = AutoModelForSequenceClassification.from_pretrained(task / "base_model", num_labels=1)
    model.save_pretrained(path)
    AutoTokenizer.from_pretrained(task / "base_model").save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def short_rm(rm_dir, tmp_path_factory) -> Path:
    """The reward model with a 32-token context in its config (only its config is ever read)."""
    path = tmp_path_factory.mktemp("eval-rm-short") / "rm"
    shutil.copytree(rm_dir, path)
    cfg = json.loads((path / "config.json").read_text())
    cfg["max_position_embeddings"] = 32
    (path / "config.json").write_text(json.dumps(cfg))
    return path


def _forbid(monkeypatch, target, name: str) -> None:
    def loaded(*args, **kwargs):
        raise AssertionError(f"{name} was called before the arguments were checked")

    monkeypatch.setattr(target, name, loaded)


@pytest.fixture
def nothing_loaded(monkeypatch):
    """Argument errors come before any prompt file, model config, tokenizer or weights is read."""
    import transformers

    import tether.data

    for name in ("load_causal_lm", "load_scalar_model", "load_tokenizer"):
        _forbid(monkeypatch, tether.models, name)
    _forbid(monkeypatch, tether.data, "load_records")
    monkeypatch.setattr(transformers.AutoConfig, "from_pretrained",
                        lambda *a, **k: (_ for _ in ()).throw(AssertionError("AutoConfig loaded too early")))


@pytest.fixture
def no_weights(monkeypatch):
    """Context checks come after the configs and the tokenizer but before any weights."""

    def reached(*args, **kwargs):
        raise ReachedWeights()

    monkeypatch.setattr(tether.models, "load_causal_lm", reached)
    monkeypatch.setattr(tether.models, "load_scalar_model", reached)


def eval_args(task: Path, out: Path, *extra: str, prompts: Path | None = None) -> list[str]:
    base = str(task / "base_model")
    return ["eval", "--policy", base, "--reference", base, "--prompts", str(prompts or task / "eval_prompts.jsonl"),
            "--max-prompts", "2", "--samples-per-prompt", "2", "--max-new-tokens", "4", "--threads", "1",
            "--out", str(out), *extra]


# --------------------------------------------------------------------------- eval: arguments

RM = "<rm>"  # replaced by the reward-model path
EVAL_CASES = {
    # name: (extra arguments, substrings the error line must hold)
    "temperature_negative": (["--temperature", "-1"], ("--temperature", "-1.0", "0 (greedy")),
    "temperature_nan": (["--temperature", "nan"], ("--temperature", "got nan")),
    "temperature_inf": (["--temperature", "inf"], ("--temperature", "got inf", "finite")),
    "temperature_minus_inf": (["--temperature=-inf"], ("--temperature", "got -inf")),
    "temperature_tiny": (["--temperature", "1e-40"], ("--temperature", "1e-40", ">= 1e-06")),
    "max_new_tokens_zero": (["--max-new-tokens", "0"], ("--max-new-tokens", "at least 1", "got 0")),
    "max_new_tokens_negative": (["--max-new-tokens", "-3"], ("--max-new-tokens", "got -3")),
    "max_prompts_zero": (["--max-prompts", "0"], ("--max-prompts", "at least 1", "got 0")),
    "max_prompts_negative": (["--max-prompts", "-1"], ("--max-prompts", "got -1")),
    "samples_per_prompt_zero": (["--samples-per-prompt", "0"], ("--samples-per-prompt", "got 0")),
    "samples_per_prompt_huge": (["--samples-per-prompt", str(10**20)], ("--samples-per-prompt", str(10**20))),
    "threads_negative": (["--threads", "-1"], ("--threads", "got -1")),
    "threads_huge": (["--threads", "5000"], ("--threads", "1024", "got 5000")),
    "seed_too_big": (["--seed", str(2**64)], ("--seed", str(2**64))),
    "seed_too_small": (["--seed", str(-(2**63) - 1)], ("--seed", str(-(2**63) - 1))),
    "best_of_n_zero": (["--best-of-n", "0", "--reward-model", RM], ("--best-of-n", "'0'", "1,2,4,8,16")),
    "best_of_n_non_numeric": (["--best-of-n", "a", "--reward-model", RM], ("--best-of-n", "'a'")),
    "best_of_n_negative_item": (["--best-of-n", "1,-2", "--reward-model", RM], ("--best-of-n", "'-2'")),
    "best_of_n_float": (["--best-of-n", "1.5", "--reward-model", RM], ("--best-of-n", "'1.5'")),
    "best_of_n_empty_item": (["--best-of-n", "1,,2", "--reward-model", RM], ("--best-of-n", "empty item")),
    "best_of_n_blank": (["--best-of-n", " ", "--reward-model", RM], ("--best-of-n", "empty item")),
    "best_of_n_huge": (["--best-of-n", str(10**20), "--reward-model", RM], ("--best-of-n", str(10**20))),
    "best_of_n_without_reward_model": (["--best-of-n", "1,4"], ("--best-of-n", "1,4", "--reward-model")),
    "best_of_n_greedy": (["--best-of-n", "2", "--temperature", "0", "--reward-model", RM],
                         ("--best-of-n", "--temperature 0", "greedy")),
    "policy_empty": (["--policy", ""], ("--policy", "empty")),
    "reference_blank": (["--reference", "  "], ("--reference", "empty")),
    "prompts_empty": (["--prompts", ""], ("--prompts", "empty")),
    "reward_model_empty": (["--reward-model", ""], ("--reward-model", "empty")),
    "judge_empty": (["--judge", ""], ("--judge", "empty")),
    "judge_no_colon": (["--judge", "os"], ("--judge", "'os'", "module:function")),
    "judge_no_module": (["--judge", "no_such_module_xyz:f"], ("--judge", "no_such_module_xyz")),
    "judge_no_function": (["--judge", "os:no_such_function"], ("--judge", "no_such_function")),
    "out_empty": (["--out", ""], ("--out", "empty")),
}


@pytest.mark.parametrize("case", sorted(EVAL_CASES))
def test_eval_bad_argument(case, task, rm_dir, tmp_path, capsys, nothing_loaded):
    extra, needles = EVAL_CASES[case]
    extra = [str(rm_dir) if a == RM else a for a in extra]
    out = tmp_path / "eval.json"
    argv = eval_args(task, out, *extra)
    if "--out" in extra:  # the case's own --out replaces the default one
        i = argv.index("--out")
        del argv[i : i + 2]
    code, err, stdout = cli_any(capsys, argv)
    assert_clean_error(code, err, "eval", *needles)
    assert not out.exists() and "nan" not in stdout


def test_eval_out_paths(task, tmp_path, capsys, nothing_loaded):
    missing = tmp_path / "no-such-dir" / "eval.json"
    code, err, _ = cli_any(capsys, eval_args(task, missing))
    assert_clean_error(code, err, "eval", "--out", str(missing), "does not exist")
    code, err, _ = cli_any(capsys, eval_args(task, tmp_path))  # a directory
    assert_clean_error(code, err, "eval", "--out", str(tmp_path), "is a directory")
    a_file = tmp_path / "file"
    a_file.write_text("x")
    code, err, _ = cli_any(capsys, eval_args(task, a_file / "eval.json"))
    assert_clean_error(code, err, "eval", "--out", str(a_file), "not a directory")


def test_eval_default_out_under_a_hub_id(task, capsys, nothing_loaded):
    """No --out and a --policy that is not a local directory: POLICY/eval.json cannot be written."""
    argv = eval_args(task, Path("x"))
    del argv[argv.index("--out") : argv.index("--out") + 2]
    argv[argv.index("--policy") + 1] = "some-org/some-model"
    code, err, _ = cli_any(capsys, argv)
    assert_clean_error(code, err, "eval", "--out", "some-org/some-model/eval.json", "does not exist")


@pytest.mark.parametrize("argv_tail, needles", [
    (["--max-prompts", "x"], ("--max-prompts", "'x'")),
    (["--temperature", "warm"], ("--temperature", "'warm'")),
    (["--seed", "1.5"], ("--seed", "'1.5'")),
    (["--max-new-tokens", ""], ("--max-new-tokens",)),
], ids=["max_prompts", "temperature", "seed", "max_new_tokens"])
def test_eval_non_numeric(argv_tail, needles, task, tmp_path, capsys, nothing_loaded):
    code, err, _ = cli_any(capsys, eval_args(task, tmp_path / "e.json", *argv_tail))
    assert_clean_error(code, err, "eval", *needles)


# --------------------------------------------------------------------------- eval: contexts


@pytest.mark.parametrize("max_new_tokens", ["64", "1000"])
def test_eval_max_new_tokens_past_the_context(max_new_tokens, task, tmp_path, capsys, no_weights, monkeypatch):
    _forbid(monkeypatch, tether.models, "load_tokenizer")  # the configs alone tell
    code, err, _ = cli_any(capsys, eval_args(task, tmp_path / "e.json", "--max-new-tokens", max_new_tokens))
    assert_clean_error(code, err, "eval", "--max-new-tokens", f"got {max_new_tokens}", "64-token context",
                       "the policy")


def test_eval_smallest_context_is_the_reward_models(task, short_rm, tmp_path, capsys, no_weights):
    code, err, _ = cli_any(capsys, eval_args(task, tmp_path / "e.json", "--max-new-tokens", "40",
                                             "--reward-model", str(short_rm)))
    assert_clean_error(code, err, "eval", "--max-new-tokens", "32-token context", "reward model", str(short_rm))


def test_eval_prompt_plus_new_tokens_past_the_context(task, tmp_path, capsys, no_weights):
    prompts = write_jsonl(tmp_path / "prompts.jsonl", good_prompts(3))
    code, err, _ = cli_any(capsys, eval_args(task, tmp_path / "e.json", "--max-new-tokens", "60",
                                             prompts=prompts))
    line = assert_clean_error(code, err, "eval", str(prompts), "row 1", "--max-new-tokens is 60", "64")
    assert re.search(r"the prompt is \d+ tokens", line)


def test_eval_prompt_alone_fills_the_context(task, tmp_path, capsys, no_weights):
    prompts = write_jsonl(tmp_path / "prompts.jsonl", [*good_prompts(1), {"prompt": LONG_PROMPT}])
    code, err, _ = cli_any(capsys, eval_args(task, tmp_path / "e.json", prompts=prompts))
    assert_clean_error(code, err, "eval", str(prompts), "row 2", "--max-new-tokens", "64", "fills the context")
    # Rows past --max-prompts are not used, so not checked: the weights are reached.
    with pytest.raises(ReachedWeights):
        cli_any(capsys, eval_args(task, tmp_path / "e.json", "--max-prompts", "1", prompts=prompts))


def test_eval_missing_model_names_the_flag(task, tmp_path, capsys, no_weights):
    missing = tmp_path / "no-such-policy"
    argv = eval_args(task, tmp_path / "e.json")
    argv[argv.index("--policy") + 1] = str(missing)
    code, err, _ = cli_any(capsys, argv)
    assert_clean_error(code, err, "eval", "--policy", str(missing), "does not exist")


def test_eval_empty_prompts_file(task, tmp_path, capsys, no_weights):
    prompts = write_jsonl(tmp_path / "prompts.jsonl", [])
    code, err, stdout = cli_any(capsys, eval_args(task, tmp_path / "e.json", prompts=prompts))
    assert_clean_error(code, err, "eval", str(prompts), "empty")
    assert "nan" not in stdout


# --------------------------------------------------------------------------- eval: valid runs


@pytest.mark.parametrize("extra", [
    [],
    ["--temperature", "0", "--judge", "tether.tasks.arith.judge:gold_score"],  # 0 = greedy decoding
    ["--reward-model", "<rm>", "--best-of-n", "1,2,2", "--temperature", "0.7", "--seed", str(-5)],
], ids=["sampled", "greedy_with_judge", "best_of_n_with_duplicates"])
def test_eval_valid_runs(extra, task, rm_dir, tmp_path, capsys):
    extra = [str(rm_dir) if a == RM else a for a in extra]
    out = tmp_path / "eval.json"
    code, err, stdout = cli_any(capsys, eval_args(task, out, *extra))
    assert code == 0, err
    assert "Traceback" not in err and "nan" not in stdout.lower()
    result = json.loads(out.read_text())
    assert result["policy"]["n"] == result["reference"]["n"] == 4  # 2 prompts x 2 samples
    assert stdout.splitlines()[0].split() == ["reference", "policy"]
    if "--best-of-n" in extra:
        assert [row["n"] for row in result["best_of_n"]] == [1, 2]
        assert "best-of-2" in stdout
    if "--temperature" in extra and extra[extra.index("--temperature") + 1] == "0":
        assert result["policy"]["gold_score"] == result["reference"]["gold_score"]  # same model, greedy
        assert result["samples"][0]["policy"] == result["samples"][2]["policy"]  # both samples of prompt 1


# --------------------------------------------------------------------------- serve: arguments


@pytest.fixture
def serve_forbidden(monkeypatch):
    """Argument errors come before the socket is bound and before any model is loaded."""
    from tether.serve.service import ModelService

    _forbid(monkeypatch, tether.serve.server, "bind_socket")
    monkeypatch.setattr(ModelService, "load", classmethod(
        lambda cls, *a, **k: (_ for _ in ()).throw(AssertionError("models loaded before the checks"))))


@pytest.fixture
def no_models(monkeypatch):
    """The socket may be bound for real; the models must not be loaded."""
    from tether.serve.service import ModelService

    monkeypatch.setattr(ModelService, "load", classmethod(
        lambda cls, *a, **k: (_ for _ in ()).throw(AssertionError("models loaded after a bind error"))))


def serve_args(task: Path, *extra: str) -> list[str]:
    return ["serve", "--model", str(task / "base_model"), "--threads", "1", *extra]


SERVE_CASES = {
    "port_too_big": (["--port", "70000"], ("--port", "0 to 65535", "got 70000")),
    "port_negative": (["--port", "-1"], ("--port", "got -1")),
    "host_empty": (["--host", ""], ("--host", "empty")),
    "threads_negative": (["--threads", "-2"], ("--threads", "got -2")),
    "seed_too_big": (["--seed", str(2**64)], ("--seed", str(2**64))),
    "shutdown_timeout_negative": (["--shutdown-timeout", "-1"], ("--shutdown-timeout", "got -1.0")),
    "shutdown_timeout_nan": (["--shutdown-timeout", "nan"], ("--shutdown-timeout", "got nan")),
    "shutdown_timeout_inf": (["--shutdown-timeout", "inf"], ("--shutdown-timeout", "got inf")),
    "batch_wait_negative": (["--batch-wait-ms", "-1"], ("--batch-wait-ms", "got -1.0")),
    "batch_wait_nan": (["--batch-wait-ms", "nan"], ("--batch-wait-ms", "got nan")),
    "batch_wait_huge": (["--batch-wait-ms", "1e12"], ("--batch-wait-ms", "10000")),
    "max_n_zero": (["--max-n", "0"], ("--max-n", "got 0")),
    "vllm_memory_without_vllm": (["--gpu-memory-utilization", "0.5"], ("--gpu-memory-utilization", "--engine vllm")),
    "vllm_memory_zero": (["--engine", "vllm", "--gpu-memory-utilization", "0"], ("--gpu-memory-utilization", "got 0.0")),
    "vllm_max_model_len_zero": (["--engine", "vllm", "--max-model-len", "0"], ("--max-model-len", "got 0")),
    "max_batch_size_zero": (["--max-batch-size", "0"], ("--max-batch-size", "got 0")),
    "queue_depth_negative": (["--queue-depth", "-1"], ("--queue-depth", "got -1")),
    "max_body_bytes_zero": (["--max-body-bytes", "0"], ("--max-body-bytes", "got 0")),
    "max_reward_pairs_zero": (["--max-reward-pairs", "0"], ("--max-reward-pairs", "got 0")),
    "max_prompt_tokens_zero": (["--max-prompt-tokens", "0"], ("--max-prompt-tokens", "got 0")),
    "default_max_tokens_zero": (["--default-max-tokens", "0"], ("--default-max-tokens", "got 0")),
    "max_tokens_limit_zero": (["--max-tokens-limit", "0"], ("--max-tokens-limit", "got 0")),
    "default_over_limit": (["--default-max-tokens", "600"], ("--default-max-tokens 600", "--max-tokens-limit 512")),
    "best_of_default_without_rm": (["--best-of-default", "2"], ("--best-of-default", "--reward-model")),
    "best_of_default_over_max_n": (["--best-of-default", "20", "--reward-model", RM],
                                   ("--best-of-default 20", "--max-n 16")),
    "best_of_default_zero": (["--best-of-default", "0"], ("--best-of-default", "got 0")),
    "model_empty": (["--model", ""], ("--model", "empty")),
    "reward_model_empty": (["--reward-model", ""], ("--reward-model", "empty")),
    "model_name_blank": (["--model-name", " "], ("--model-name", "empty")),
    "api_key_empty": (["--api-key", ""], ("--api-key", "empty")),
    "api_key_padded": (["--api-key", " key"], ("--api-key", "leading or trailing")),
    "api_key_newline": (["--api-key", "key\n"], ("--api-key", "printable ASCII")),
    "port_non_numeric": (["--port", "http"], ("--port", "'http'")),
    "max_n_non_numeric": (["--max-n", "many"], ("--max-n", "'many'")),
    "dtype_unknown": (["--dtype", "int8"], ("--dtype", "'int8'")),
}


@pytest.mark.parametrize("case", sorted(SERVE_CASES))
def test_serve_bad_argument(case, task, rm_dir, capsys, serve_forbidden):
    extra, needles = SERVE_CASES[case]
    extra = [str(rm_dir) if a == RM else a for a in extra]
    code, err, stdout = cli_any(capsys, serve_args(task, *extra))
    assert_clean_error(code, err, "serve", *needles)
    assert BANNER not in stdout


def test_serve_blank_api_key_variable(task, capsys, serve_forbidden, monkeypatch):
    monkeypatch.setenv("TETHER_API_KEY", "secret ")
    code, err, _ = cli_any(capsys, serve_args(task))
    assert_clean_error(code, err, "serve", "TETHER_API_KEY", "trailing")


def test_serve_default_max_tokens_follows_a_lower_limit(task):
    """Not giving --default-max-tokens with a limit below its default is valid: it is capped."""
    from tether.commands.serve import check_args, settings_from_args

    for argv, expected in ((["--max-tokens-limit", "100"], 100), ([], 256),
                           (["--max-tokens-limit", "100", "--default-max-tokens", "50"], 50),
                           (["--default-max-tokens", "256", "--max-tokens-limit", "256"], 256)):
        args = build_parser().parse_args(serve_args(task, *argv))
        check_args(args)
        settings = settings_from_args(args)
        settings.validate(False)
        assert settings.default_max_tokens == expected


# --------------------------------------------------------------------------- serve: the socket


def test_serve_busy_port(task, capsys, no_models):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        start = time.monotonic()
        code, err, stdout = cli_any(capsys, serve_args(task, "--port", str(port)))
        elapsed = time.monotonic() - start
    assert_clean_error(code, err, "serve", "--port", str(port), "already in use")
    assert BANNER not in stdout and "serving" not in stdout.lower()
    assert elapsed < 5, elapsed


@pytest.mark.parametrize("host, needles", [
    ("192.0.2.123", ("--host", "192.0.2.123", "not an address of this machine")),  # TEST-NET-1
    ("no-such-host.invalid", ("--host", "no-such-host.invalid", "cannot be resolved")),
    ("[::1]", ("--host", "[::1]", "without brackets")),
])
def test_serve_host_cannot_be_bound(host, needles, task, capsys, no_models):
    code, err, stdout = cli_any(capsys, serve_args(task, "--host", host, "--port", "0"))
    assert_clean_error(code, err, "serve", *needles)
    assert BANNER not in stdout


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root may bind any port")
def test_serve_privileged_port(task, capsys, no_models):
    code, err, stdout = cli_any(capsys, serve_args(task, "--port", "80"))
    assert_clean_error(code, err, "serve", "--port 80", "permission denied")
    assert BANNER not in stdout


def test_bind_socket_reserves_the_port():
    sock = tether.serve.server.bind_socket("127.0.0.1", 0)
    try:
        port = sock.getsockname()[1]
        assert port > 0
        with pytest.raises(ConfigError, match=f"--port {port}: 127.0.0.1:{port} is already in use"):
            tether.serve.server.bind_socket("127.0.0.1", port)
    finally:
        sock.close()
    tether.serve.server.bind_socket("127.0.0.1", port).close()  # free again once closed
    for port in (-1, 65536, True):
        with pytest.raises(ConfigError, match="--port"):
            tether.serve.server.bind_socket("127.0.0.1", port)


def test_serve_settings_validate_types():
    from tether.serve import ServeSettings

    for bad, flag in (({"batch_wait_ms": float("nan")}, "--batch-wait-ms"), ({"max_n": 2.5}, "--max-n"),
                      ({"queue_depth": True}, "--queue-depth")):
        with pytest.raises(ConfigError, match=flag):
            ServeSettings(**bad).validate(False)
    ServeSettings(batch_wait_ms=0).validate(False)


def test_serve_starts_on_a_free_port_and_stops_gracefully(task, tmp_path):
    """The real command in a child process: --port 0, banner with the bound port, /health, SIGTERM."""
    log = tmp_path / "serve.log"
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "TETHER_API_KEY": ""}
    with open(log, "w") as fh:
        proc = subprocess.Popen([sys.executable, "-m", "tether.cli", *serve_args(task, "--port", "0")],
                                stdout=fh, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + 90
        while "Uvicorn running on" not in log.read_text():
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        text = log.read_text()
        match = re.search(r"tether serve: 'base_model' on http://127\.0\.0\.1:(\d+)/v1 \(no API key\)", text)
        assert match, text
        port = int(match.group(1))
        assert port > 0 and f"Uvicorn running on http://127.0.0.1:{port}" in text
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=30) as resp:
            assert json.loads(resp.read())["status"] == "ok"
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
    text = log.read_text()
    assert "Shutting down" in text and "Finished server process" in text, text
    assert "Traceback" not in text, text


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here (tests/on_vllm)")
@pytest.mark.parametrize("command", ["serve", "eval"])
def test_the_vllm_engine_without_vllm_is_one_paragraph(command, task, tmp_path, capsys):
    argv = (serve_args(task, "--engine", "vllm", "--port", "0") if command == "serve"
            else eval_args(task, tmp_path / "e.json", "--engine", "vllm"))
    code, err, stdout = cli_any(capsys, argv)
    assert_clean_error(code, err, command, "--engine vllm, but vLLM is not installed", "pip install vllm",
                       "--engine lean")
    assert BANNER not in stdout
