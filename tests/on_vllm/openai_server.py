"""vLLM's own OpenAI-compatible server (its CPU build, .venv-vllm) serving a local model on loopback,
for the tests that reach a model over HTTP (a judge, a distillation teacher)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def vllm_openai_server(model: Path, name: str, log: Path, max_model_len: int = 512):
    """Start ``python -m vllm.entrypoints.openai.api_server`` on ``model`` as ``name``; yield its URL
    once it is up (5 minutes at most: its log is the assertion's message); stop it afterwards."""
    port = free_port()
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind",
           "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model), "--served-model-name",
           name, "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32", "--max-model-len",
           str(max_model_len), "--enforce-eager", "--seed", "0"]
    with open(log, "w") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while "Application startup complete" not in log.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-4000:]
            time.sleep(0.5)
        yield f"http://127.0.0.1:{port}"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
