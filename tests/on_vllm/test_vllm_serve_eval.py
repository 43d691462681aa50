"""`tether serve --engine vllm` and `tether eval --engine vllm` for real, each the command in a
child process (vLLM's CPU build, .venv-vllm): greedy answers are the lean engine's, stop
sequences and per-request limits cut as they do there, streaming and best-of-N work.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import psutil
import pytest

vllm = pytest.importorskip("vllm", reason="runs in .venv-vllm (make test builds it); see README")

pytestmark = pytest.mark.slow
MESSAGES = [{"role": "user", "content": "what is 12 + 30 ?"}]


@pytest.fixture(scope="module")
def models(policy_and_fresh_rm):
    return policy_and_fresh_rm


def wait_for(log, proc, needle, seconds=240):
    deadline = time.monotonic() + seconds
    while needle not in log.read_text():
        assert proc.poll() is None, log.read_text()[-4000:]
        assert time.monotonic() < deadline, log.read_text()[-4000:]
        time.sleep(0.2)
    return log.read_text()


@pytest.fixture(scope="module")
def vllm_server(models, tmp_path_factory):
    log = tmp_path_factory.mktemp("log") / "serve.log"
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "TETHER_API_KEY": ""}
    cmd = [sys.executable, "-m", "tether.cli", "serve", "--model", str(models["policy"]), "--reward-model",
           str(models["rm"]), "--engine", "vllm", "--port", "0", "--threads", "1", "--seed", "0",
           "--gpu-memory-utilization", "0.1"]
    with open(log, "w") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env)
    engine_processes = []
    try:
        text = wait_for(log, proc, "Uvicorn running on")
        port = int(re.search(r"on http://127\.0\.0\.1:(\d+)/v1", text).group(1))
        engine_processes = psutil.Process(proc.pid).children(recursive=True)  # vLLM's engine core and worker
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(90)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
    assert "Traceback" not in log.read_text(), log.read_text()[-4000:]
    assert engine_processes, "the server started no engine processes"
    _, alive = psutil.wait_procs(engine_processes, timeout=30)
    assert not alive, f"vLLM processes outlived the server: {[p.name() for p in alive]}"


@pytest.fixture(scope="module")
def lean(models):
    """The same models served in process with the lean engine: the answers vLLM must give."""
    from fastapi.testclient import TestClient

    from tether.serve import ModelService, ServeSettings, create_app

    service = ModelService.load(str(models["policy"]), str(models["rm"]), max_batch_size=8)
    with TestClient(create_app(service, ServeSettings(model_name="base_model"))) as client:
        yield client


def chat(client, **body):
    body = {"model": "base_model", "messages": MESSAGES, **body}
    if isinstance(client, str):
        import httpx

        resp = httpx.post(client + "/v1/chat/completions", json=body, timeout=120)
    else:
        resp = client.post("/v1/chat/completions", json=body)
    assert resp.status_code == 200, resp.text
    return resp.json()


def test_greedy_answers_limits_and_stop_sequences_are_the_lean_engines(vllm_server, lean):
    greedy = {"temperature": 0, "max_tokens": 12}
    ours, theirs = chat(vllm_server, **greedy), chat(lean, **greedy)
    text = theirs["choices"][0]["message"]["content"]
    assert len(text) >= 3, text
    assert ours["choices"][0]["message"]["content"] == text
    assert ours["choices"][0]["finish_reason"] == theirs["choices"][0]["finish_reason"]
    assert ours["usage"] == theirs["usage"]
    # A per-request max_tokens below the batch's, and a stop sequence met inside the answer.
    short = chat(vllm_server, temperature=0, max_tokens=2)
    assert short["usage"]["completion_tokens"] == 2 and short["choices"][0]["finish_reason"] == "length"
    assert short["choices"][0]["message"]["content"] == chat(lean, temperature=0, max_tokens=2)["choices"][0][
        "message"]["content"]
    stop = text[len(text) // 2]
    cut = chat(vllm_server, temperature=0, max_tokens=12, stop=[stop])
    assert cut["choices"][0]["message"]["content"] == text[: text.index(stop)]
    assert cut["choices"][0]["finish_reason"] == "stop"
    assert cut == {**cut, "choices": chat(lean, temperature=0, max_tokens=12, stop=[stop])["choices"]}


def test_streaming_and_seeded_sampling(vllm_server):
    import httpx

    body = {"model": "base_model", "messages": MESSAGES, "max_tokens": 10, "temperature": 0, "stream": True}
    deltas = []
    with httpx.stream("POST", vllm_server + "/v1/chat/completions", json=body, timeout=120) as resp:
        assert resp.status_code == 200
        for line in resp.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                delta = json.loads(line[6:])["choices"][0]["delta"].get("content")
                deltas.append(delta or "")
    assert "".join(deltas) == chat(vllm_server, temperature=0, max_tokens=10)["choices"][0]["message"]["content"]
    first = chat(vllm_server, temperature=1.0, max_tokens=10, seed=5, n=3)
    again = chat(vllm_server, temperature=1.0, max_tokens=10, seed=5, n=3)
    texts = [c["message"]["content"] for c in first["choices"]]
    assert texts == [c["message"]["content"] for c in again["choices"]]


def test_best_of_n_reranks_vllm_samples(vllm_server):
    out = chat(vllm_server, temperature=1.0, max_tokens=8, best_of=4, seed=1)
    assert len(out["choices"]) == 1 and out["usage"]["completion_tokens"] >= 1


def test_eval_with_the_vllm_engine_matches_the_lean_engine_greedy(tiny_task, tmp_path):
    """`tether eval --engine vllm` (both policies on vLLM) against the lean engine in process:
    greedy decoding gives the same responses, so the same gold score."""
    from tether.cli import main

    base = str(tiny_task["dir"] / "base_model")
    args = ["eval", "--policy", base, "--reference", base, "--prompts", str(tiny_task["dir"] / "eval_prompts.jsonl"),
            "--max-prompts", "8", "--samples-per-prompt", "1", "--max-new-tokens", "8", "--threads", "1",
            "--temperature", "0", "--judge", "tether.tasks.arith.judge:gold_score"]
    out = tmp_path / "vllm.json"
    done = subprocess.run([sys.executable, "-m", "tether.cli", *args, "--engine", "vllm", "--out", str(out)],
                          capture_output=True, text=True, timeout=600, env={**os.environ, "TETHER_API_KEY": ""})
    assert done.returncode == 0, done.stderr[-4000:]
    assert main([*args, "--engine", "lean", "--out", str(tmp_path / "lean.json")]) == 0
    ours, theirs = json.loads(out.read_text()), json.loads((tmp_path / "lean.json").read_text())
    assert ours["settings"]["engine"] == "vllm"
    assert ours["samples"] == theirs["samples"]
    assert ours["policy"]["gold_score"] == pytest.approx(theirs["policy"]["gold_score"], abs=1e-9)
    assert ours["policy"]["kl"] == pytest.approx(theirs["policy"]["kl"], abs=1e-5)
