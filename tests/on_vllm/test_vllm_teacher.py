"""On-policy distillation from a teacher served by vLLM's own OpenAI-compatible server (its CPU build,
.venv-vllm): the teacher's prompt log-probs come through ``/v1/completions`` with ``echo`` and
``logprobs``, and the run matches the one with the same teacher loaded in process."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import pytest
import torch

pytest.importorskip("vllm", reason="runs in .venv-vllm (make test builds it); see README")

from tether.cli import main  # noqa: E402
from tether.metrics.logger import read_metrics  # noqa: E402

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def vllm_teacher(tiny_task, tmp_path_factory):
    """The tiny task's base model with its weights perturbed (another model on the same tokenizer),
    saved and served by vLLM; yields (URL, the teacher's directory)."""
    from transformers import AutoModelForCausalLM

    from tether.models import load_tokenizer

    root = tmp_path_factory.mktemp("vllm-teacher")
    base = tiny_task["dir"] / "base_model"
    model = AutoModelForCausalLM.from_pretrained(base)
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        torch.manual_seed(3)
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    teacher = root / "teacher"
    model.save_pretrained(teacher)
    load_tokenizer(str(base)).save_pretrained(teacher)
    port = free_port()
    log = root / "server.log"
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind",
           "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(teacher),
           "--served-model-name", "tiny-teacher", "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32",
           "--max-model-len", "64", "--enforce-eager", "--seed", "0"]
    with open(log, "w") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while "Application startup complete" not in log.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-4000:]
            time.sleep(0.5)
        yield f"http://127.0.0.1:{port}", teacher
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_distillation_from_a_teacher_on_vllms_openai_server(tiny_task, vllm_teacher, tmp_path):
    url, teacher = vllm_teacher
    task = tiny_task["dir"]
    common = ["distill", "run.progress=false", "run.log_every=1", "run.seed=0", "run.threads=1",
              f"model.name_or_path={task / 'base_model'}", f"prompts={task / 'ppo_prompts.jsonl'}", "rl.iterations=2",
              "rollout.batch_size=4", "rl.minibatch_size=4", "rollout.max_new_tokens=6", "rl.epochs=1"]
    assert main([*common, f"run.out={tmp_path / 'remote'}", f"distill.teacher_url={url}",
                 "distill.teacher_model=tiny-teacher"]) == 0
    assert main([*common, f"run.out={tmp_path / 'local'}", f"reference={teacher}"]) == 0
    rows = {name: [r for r in read_metrics(tmp_path / name / "metrics.jsonl") if "distill/reverse_kl" in r]
            for name in ("remote", "local")}
    assert len(rows["remote"]) == len(rows["local"]) == 2
    for a, b in zip(rows["remote"], rows["local"]):
        assert a["distill/teacher_logprob"] == pytest.approx(b["distill/teacher_logprob"], rel=1e-3, abs=1e-4)
        assert a["distill/reverse_kl"] == pytest.approx(b["distill/reverse_kl"], rel=1e-3, abs=1e-4)
