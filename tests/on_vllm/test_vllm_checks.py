"""What would stop a vLLM engine is refused before it starts, by the run and by ``--dry-run``, in
one paragraph with the command's own keys; an engine that dies anyway is reported with the
reason vLLM logged (vLLM's CPU build, .venv-vllm).

A model whose attention heads have 16 dimensions stands for a shape the CPU build's attention
backend lacks (it died at the first request with 'Unsupported CPU attention configuration:
head_dim=16', reported as a seeded-requests problem); ``tensor_parallel_size=2`` on a machine
with one NUMA node for a parallel size it cannot host (78 lines of engine tracebacks).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

vllm = pytest.importorskip("vllm", reason="runs in .venv-vllm (make test builds it); see README")

from tether.cli import main  # noqa: E402
from tether.common.errors import ConfigError  # noqa: E402

ONE_NUMA_NODE = len(__import__("vllm.utils.cpu_resource_utils", fromlist=["x"]).get_visible_memory_node()) == 1


@pytest.fixture(scope="module")
def head16(tiny_task, tmp_path_factory):
    """The tiny task's tokenizer with a 2-layer Llama whose heads have 16 dimensions (64 / 4)."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tok = AutoTokenizer.from_pretrained(tiny_task["dir"] / "base_model")
    config = LlamaConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=64,
                         pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, bos_token_id=tok.bos_token_id)
    path = tmp_path_factory.mktemp("head16") / "model"
    LlamaForCausalLM(config).save_pretrained(path)
    tok.save_pretrained(path)
    return path


def rl_args(stage, task, model, out, *extra):
    critic = ["critic.init=policy"] if stage == "ppo" else []  # GRPO trains no critic
    return [stage, f"model.name_or_path={model}", f"prompts={task / 'ppo_prompts.jsonl'}",
            "reward.callable=tether.tasks.arith.judge:gold_reward", *critic, "rl.iterations=1",
            "rollout.batch_size=4", "rl.minibatch_size=4", "rl.epochs=1", "rollout.max_new_tokens=4",
            "run.progress=false", "run.threads=1", "rollout.engine=vllm", f"run.out={out}", *extra]


def one_paragraph(code, err, stage, *needles):
    assert code == 2, err
    assert "Traceback" not in err and "EngineCore" not in err and "\n\n" not in err.strip(), err
    lines = [line for line in err.splitlines() if line.startswith(f"tether {stage}: error:")]
    assert len(lines) == 1, err
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize("command", ["ppo", "ppo --dry-run", "grpo", "eval", "serve", "pairs"])
def test_a_head_size_the_build_lacks_is_refused_before_the_engine_starts(command, head16, tiny_task, tmp_path,
                                                                         capsys):
    task, out = tiny_task["dir"], tmp_path / "out"
    stage, *flags = command.split()
    if stage in ("ppo", "grpo"):
        argv = [stage, *flags, *rl_args(stage, task, head16, out)[1:]]
        keys = ("Config key 'rollout.engine' = 'vllm'", "rollout.engine=lean")
    elif stage == "eval":
        argv = ["eval", "--policy", str(head16), "--reference", str(head16), "--prompts",
                str(task / "eval_prompts.jsonl"), "--engine", "vllm", "--out", str(out), "--threads", "1"]
        keys = ("--engine vllm", "--engine lean")
    elif stage == "serve":
        argv = ["serve", "--model", str(head16), "--engine", "vllm", "--port", "0", "--threads", "1"]
        keys = ("--engine vllm", "--engine lean")
    else:
        argv = ["pairs", "--policy", str(head16), "--prompts", str(task / "ppo_prompts.jsonl"), "--engine", "vllm",
                "--out", str(out)]
        keys = ("--engine vllm", "--engine lean")
    code = main(argv)
    line = one_paragraph(code, capsys.readouterr().err, stage, f"'{head16}'", "16 dimensions", "32, 64", *keys)
    assert "seed_requests" not in line
    assert not out.exists()


@pytest.mark.skipif(not ONE_NUMA_NODE, reason="the CPU build runs a worker per NUMA node: needs a one-node machine")
def test_tensor_parallel_past_the_numa_nodes_is_refused_before_the_engine_starts(tiny_task, tmp_path):
    """As the real command: nothing of the engine's is printed, only the paragraph."""
    task = tiny_task["dir"]
    for dry in ([], ["--dry-run"]):
        argv = rl_args("ppo", task, task / "base_model", tmp_path / "run", "rollout.vllm.tensor_parallel_size=2")
        done = subprocess.run([sys.executable, "-m", "tether.cli", argv[0], *dry, *argv[1:]], capture_output=True,
                              text=True, timeout=300)
        one_paragraph(done.returncode, done.stderr, "ppo", "rollout.vllm.tensor_parallel_size = 2", "NUMA node",
                      "at most 1", "VLLM_CPU_OMP_THREADS_BIND")
        assert len(done.stderr.strip().splitlines()) <= 3, done.stderr  # vLLM's import notices at most
        assert not (tmp_path / "run").exists()


def test_tensor_parallel_with_threads_bound_by_hand(monkeypatch):
    from tether.rollout.vllm_checks import check_tensor_parallel
    from tether.rollout.vllm_engine import CONFIG_KEYS

    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "0|1|0-1")
    with pytest.raises(ConfigError, match=r"VLLM_CPU_OMP_THREADS_BIND='0\|1\|0-1' gives 3 CPU list"):
        check_tensor_parallel(2, CONFIG_KEYS)
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "0|1")
    check_tensor_parallel(2, CONFIG_KEYS)  # one list per worker
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    check_tensor_parallel(2, CONFIG_KEYS)  # vLLM binds nothing: it runs (tried: a PPO run completes)


def test_a_dry_run_that_says_ok_has_checked_the_engine(tiny_task, tmp_path, capsys):
    task = tiny_task["dir"]
    assert main(rl_args("ppo", task, task / "base_model", tmp_path / "run")[:1] + ["--dry-run"]
                + rl_args("ppo", task, task / "base_model", tmp_path / "run")[1:]) == 0
    assert "a vLLM engine over" in capsys.readouterr().out
    assert not (tmp_path / "run").exists()


def test_a_dead_engine_reports_vllms_own_reason(head16, monkeypatch):
    """With the head-size check out of the way, the engine starts and dies at the first request:
    the error carries vLLM's reason, not the seeded-requests advice; later calls say the same."""
    from transformers import AutoTokenizer

    import tether.rollout.vllm_engine as engine_module
    from tether.rollout import SamplingParams

    monkeypatch.setattr(engine_module, "check_attention", lambda *args, **kwargs: None)
    engine = engine_module.VLLMGenerationEngine(head16, AutoTokenizer.from_pretrained(head16))
    try:
        assert engine.failure() is None
        with pytest.raises(ConfigError) as err:
            engine.generate([[5, 6, 7]], ["x"], SamplingParams(max_new_tokens=4))
        text = str(err.value)
        assert "stopped while sampling 1 requests" in text and "Unsupported CPU attention configuration" in text
        assert "head_dim=16" in text and "seed_requests" not in text and "\n" not in text
        assert "head_dim=16" in engine.failure()
        with pytest.raises(ConfigError, match="head_dim=16"):
            engine.generate([[5, 6, 7]], ["x"], SamplingParams(max_new_tokens=4))
    finally:
        engine.close()
