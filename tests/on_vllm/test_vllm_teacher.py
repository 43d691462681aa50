"""On-policy distillation from a teacher served by vLLM's own OpenAI-compatible server (its CPU build,
.venv-vllm): the teacher's prompt log-probs come through ``/v1/completions`` with ``echo`` and
``logprobs``, and the run matches the one with the same teacher loaded in process."""

from __future__ import annotations

import pytest
import torch
from openai_server import vllm_openai_server

pytest.importorskip("vllm", reason="runs in .venv-vllm (make test builds it); see README")

from tether.cli import main  # noqa: E402
from tether.metrics.logger import read_metrics  # noqa: E402

pytestmark = pytest.mark.slow


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
    with vllm_openai_server(teacher, "tiny-teacher", root / "server.log", max_model_len=64) as url:
        yield url, teacher


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
