"""On-policy distillation end to end: a student learns a teacher of another size from its own samples
(the per-token KL to the teacher falls); a teacher behind an endpoint gives the run the in-process
teacher gives; what goes wrong with a teacher is refused or stops the run with one paragraph."""

from __future__ import annotations

import pytest
import torch
from teacher_server import TeacherServer
from transformers import LlamaConfig, LlamaForCausalLM

from tether.cli import main
from tether.metrics.logger import read_metrics
from tether.models import load_tokenizer

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def teacher(tiny_task, tmp_path_factory):
    """A smaller Llama than the student (1 layer, hidden 64, untied), on the student's tokenizer."""
    tok = load_tokenizer(str(tiny_task["dir"] / "base_model"))
    config = LlamaConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64,
                         tie_word_embeddings=False, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                         pad_token_id=tok.pad_token_id)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(1)
        model = LlamaForCausalLM(config)
    out = tmp_path_factory.mktemp("teacher") / "teacher"
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def terse_teacher(tiny_task, tmp_path_factory):
    """The student's base model with an untied head whose EOS row is pushed along the mean final
    hidden state: it ends almost every answer at once (EOS > 0.95 after the test prompts), where the
    random student writes to the length cap."""
    base = tiny_task["dir"] / "base_model"
    tok = load_tokenizer(str(base))
    model = LlamaForCausalLM.from_pretrained(base)
    with torch.no_grad():
        prompts = [tok(text)["input_ids"] for text in ("3 plus 4 is", "the cat", "hello world 5")]
        hidden = torch.cat([model(torch.tensor([ids]), output_hidden_states=True).hidden_states[-1][0]
                            for ids in prompts]).mean(0)
        head = model.model.embed_tokens.weight.detach().clone()
        head[tok.eos_token_id] += 12.0 * hidden / hidden.norm() ** 2
    model.config.tie_word_embeddings = False
    model.lm_head.weight = torch.nn.Parameter(head)
    out = tmp_path_factory.mktemp("terse") / "teacher"
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


def distill_args(task, out, *extra: str, iterations: int = 2) -> list[str]:
    return ["distill", f"run.out={out}", "run.progress=false", "run.log_every=1", "run.seed=0", "run.threads=1",
            f"model.name_or_path={task / 'base_model'}", f"prompts={task / 'ppo_prompts.jsonl'}",
            f"rl.iterations={iterations}", "rollout.batch_size=8", "rl.minibatch_size=8", "rollout.max_new_tokens=8",
            "rl.epochs=1", *extra]


def rows_of(out):
    return [r for r in read_metrics(out / "metrics.jsonl") if "distill/reverse_kl" in r]


def test_the_student_learns_the_teachers_habit(tiny_task, terse_teacher, tmp_path):
    out = tmp_path / "run"
    assert main(distill_args(tiny_task["dir"], out, f"reference={terse_teacher}", "optim.lr=3e-3",
                             "optim.warmup_steps=0", iterations=20)) == 0
    rows = rows_of(out)
    assert len(rows) == 20
    kl = [r["distill/reverse_kl"] for r in rows]
    length = [r["response/length_mean"] for r in rows]
    # The random student writes to the cap (8 tokens); the teacher would stop at once.
    assert sum(length[:3]) / 3 > 7 and sum(length[-3:]) / 3 < 5, length
    assert sum(kl[-3:]) / 3 < 0.5 * sum(kl[:3]) / 3, kl
    # No reward: every score is 0; the KL to the reference is the distance to the teacher.
    assert all(r["objective/score"] == 0 and not any(k.startswith("reward/") for k in r) for r in rows)
    assert (out / "config.json").exists()


def test_a_teacher_behind_an_endpoint_gives_the_in_process_teachers_run(tiny_task, teacher, tmp_path):
    local, remote = tmp_path / "local", tmp_path / "remote"
    assert main(distill_args(tiny_task["dir"], local, f"reference={teacher}", "distill.divergence=jsd")) == 0
    tok = load_tokenizer(str(teacher))
    with TeacherServer(LlamaForCausalLM.from_pretrained(teacher), tok, fail_first=1) as server:
        assert main(distill_args(tiny_task["dir"], remote, f"distill.teacher_url={server.url}",
                                 "distill.teacher_batch_size=3", "distill.divergence=jsd")) == 0
        assert server.requests >= 1 + 1 + 2 * 3  # the refused one, the probe, 8 rows a batch in threes
    a, b = rows_of(local), rows_of(remote)
    assert len(a) == len(b) == 2
    for x, y in zip(a, b):
        for key in ("distill/reverse_kl", "distill/divergence", "distill/teacher_logprob", "objective/kl"):
            assert x[key] == pytest.approx(y[key], rel=1e-4, abs=1e-5), key


def test_a_teacher_on_another_tokenizer_is_refused_before_the_run(tiny_task, teacher, tmp_path, capsys):
    tok = load_tokenizer(str(teacher))
    shifted = TeacherServer(LlamaForCausalLM.from_pretrained(teacher), tok,
                            decode=lambda ids: tok.decode([(i + 1) % len(tok) for i in ids], skip_special_tokens=True))
    with shifted as server:
        code = main(distill_args(tiny_task["dir"], tmp_path / "run", f"distill.teacher_url={server.url}"))
    err = capsys.readouterr().err
    assert code != 0 and "does not share the student's tokenizer" in err and "Traceback" not in err
    assert not (tmp_path / "run").exists()


def test_a_teacher_without_log_probs_stops_the_run_naming_it(tiny_task, teacher, tmp_path, capsys):
    tok = load_tokenizer(str(teacher))
    with TeacherServer(LlamaForCausalLM.from_pretrained(teacher), tok, bodyless=True) as server:
        code = main(distill_args(tiny_task["dir"], tmp_path / "run", f"distill.teacher_url={server.url}"))
    err = capsys.readouterr().err
    assert code != 0 and "answered without prompt log-probs" in err and server.url in err
    assert "Traceback" not in err
