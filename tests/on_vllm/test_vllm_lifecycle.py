"""A vLLM engine's life ends with its owner's, and its death is reported (vLLM's CPU build,
.venv-vllm): a PPO run or a server SIGKILLed once its engine is up leaves no engine process alive
15 s later; a server whose engine dies answers /health and every generation request with a 503
naming vLLM's reason. Each test runs the real command in a child process (`python -m tether.cli`).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import pytest

vllm = pytest.importorskip("vllm", reason="runs in .venv-vllm (make test builds it); see README")

from tether.common import child_guard  # noqa: E402

pytestmark = pytest.mark.slow
GONE_WITHIN_S = 15  # seconds a killed run's engine may outlive it
ENV = {**os.environ, "PYTHONUNBUFFERED": "1", "TETHER_API_KEY": ""}


def comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as fh:
            return fh.read().strip()
    except OSError:
        return "?"


def process_tree(pid: int) -> dict[int, tuple[int, str]]:
    """Every live descendant of ``pid``: pid -> (start time, name)."""
    return {p: (start, comm(p)) for p, start in child_guard.descendants([pid]).items()}


def wait_until(check, seconds: float, what: str, proc=None, log=None):
    deadline = time.monotonic() + seconds
    while not (result := check()):
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the command exited ({proc.returncode}) before {what}:\n"
                                 + (log.read_text()[-4000:] if log else ""))
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}:\n" + (log.read_text()[-4000:] if log else ""))
        time.sleep(0.2)
    return result


def alive_after(tree: dict[int, tuple[int, str]], seconds: float) -> list[str]:
    """The processes of ``tree`` still alive (same pid and start time) after up to ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        left = [f"{pid} {name}" for pid, (start, name) in tree.items() if child_guard.alive(pid, start)]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


def kill_leftovers(tree: dict[int, tuple[int, str]]) -> None:
    for pid, (start, _) in tree.items():
        if child_guard.alive(pid, start):
            os.kill(pid, signal.SIGKILL)


def engine_processes(pid: int):
    """The tree under ``pid`` once it holds vLLM's engine core and worker, else None."""
    tree = process_tree(pid)
    names = {name for _, name in tree.values()}
    return tree if any(n.startswith("VLLM::EngineCor") for n in names) and any(
        n.startswith("VLLM::Worker") for n in names) else None


def start_server(model, log):
    cmd = [sys.executable, "-m", "tether.cli", "serve", "--model", str(model), "--engine", "vllm", "--port", "0",
           "--threads", "1", "--seed", "0", "--gpu-memory-utilization", "0.1"]
    with open(log, "w") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=ENV)
    text = wait_until(lambda: "Uvicorn running on" in log.read_text() and log.read_text(), 240, "the server to start",
                      proc, log)
    port = int(re.search(r"on http://127\.0\.0\.1:(\d+)/v1", text).group(1))
    return proc, f"http://127.0.0.1:{port}"


def test_a_sigkilled_ppo_run_leaves_no_engine_process(tiny_task, tmp_path):
    task, out, log = tiny_task["dir"], tmp_path / "run", tmp_path / "ppo.log"
    cmd = [sys.executable, "-m", "tether.cli", "ppo", f"model.name_or_path={task / 'base_model'}",
           f"prompts={task / 'ppo_prompts.jsonl'}", "reward.callable=tether.tasks.arith.judge:gold_reward",
           "critic.init=policy", "rl.iterations=10000", "rollout.batch_size=4", "rl.minibatch_size=4",
           "rl.epochs=1", "rollout.max_new_tokens=8", "run.progress=false", "run.threads=1", "rollout.engine=vllm",
           f"run.out={out}"]
    with open(log, "w") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=ENV)
    tree = {}
    try:
        # The run directory is made once every role, the engine included, is up.
        wait_until(lambda: (out / "metrics.jsonl").exists(), 300, "the run to start", proc, log)
        tree = wait_until(lambda: engine_processes(proc.pid), 30, "the engine's processes", proc, log)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
        left = alive_after(tree, GONE_WITHIN_S)
        assert not left, f"still alive {GONE_WITHIN_S} s after the run was SIGKILLed: {left}"
    finally:
        proc.kill()
        kill_leftovers(tree)


def test_a_sigkilled_server_leaves_no_engine_process(tiny_task, tmp_path):
    import httpx

    proc, url = start_server(tiny_task["dir"] / "base_model", tmp_path / "serve.log")
    tree = {}
    try:
        assert httpx.get(url + "/health", timeout=30).status_code == 200
        tree = wait_until(lambda: engine_processes(proc.pid), 30, "the engine's processes", proc)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
        left = alive_after(tree, GONE_WITHIN_S)
        assert not left, f"still alive {GONE_WITHIN_S} s after the server was SIGKILLed: {left}"
    finally:
        proc.kill()
        kill_leftovers(tree)


def test_a_server_whose_engine_died_fails_health_with_the_reason(tiny_task, tmp_path):
    """The engine's worker is killed while the server idles: /health turns 503 naming vLLM's
    reason, generation requests get the same 503 (not 500), and the server still stops cleanly."""
    import httpx

    log = tmp_path / "serve.log"
    proc, url = start_server(tiny_task["dir"] / "base_model", log)
    tree = {}
    try:
        body = {"model": "base_model", "prompt": "1 + 2 =", "max_tokens": 3, "temperature": 0}
        assert httpx.post(url + "/v1/completions", json=body, timeout=120).status_code == 200
        tree = wait_until(lambda: engine_processes(proc.pid), 30, "the engine's processes", proc)
        worker = next(pid for pid, (_, name) in tree.items() if name.startswith("VLLM::Worker"))
        os.kill(worker, signal.SIGKILL)
        health = wait_until(lambda: (r := httpx.get(url + "/health", timeout=30)).status_code == 503 and r, 15,
                            "/health to fail", proc, log)
        error = health.json()["error"]
        assert health.json()["status"] == "engine_stopped" and error["code"] == "engine_stopped"
        assert "died unexpectedly" in error["message"], error  # vLLM's own words, from its log
        answer = httpx.post(url + "/v1/completions", json=body, timeout=60)
        assert answer.status_code == 503 and answer.json()["error"]["message"] == error["message"], answer.text
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(90) == 128 + signal.SIGTERM, log.read_text()[-4000:]  # its usual exit on SIGTERM
        assert not alive_after(tree, GONE_WITHIN_S)
    finally:
        proc.kill()
        kill_leftovers(tree)
