"""LoRA adapters through peft (docs/performance.md, LoRA sections): the reference is the actor's
base with the adapters off (no second copy of the weights), the critic trains its head beside its
adapters, final models are merged plain checkpoints with the adapter beside them, resume is bitwise,
and gradient checkpointing changes nothing but memory.

Tiny runs on the tiny task: the base model as policy, the gold judge as reward.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch
from safetensors.torch import load_file

from tether.config import RLConfig, SFTConfig, load_config
from tether.loops.rl_run import run_rl
from tether.models.lora import ADAPTER_DIR, parameter_bytes

from bad_input_helpers import assert_clean_error, cli, good_sft, sft_args, write_jsonl
from test_resume import comparable, ppo_overrides, same_weights

LORA = ["lora.r=8", "lora.alpha=16", "critic.lora.r=4", "optim.lr=0.003", "critic.optim.lr=0.003"]


def lora_ppo(task, out, *extra):
    return load_config(RLConfig, None, [*ppo_overrides(task, out), *LORA, *extra])


@pytest.fixture(scope="module")
def lora_run(tiny_task, tmp_path_factory):
    out = tmp_path_factory.mktemp("lora") / "run"
    cfg = lora_ppo(tiny_task["dir"], out, "cpu.linear_backend=aten")
    result = run_rl(cfg)
    return {"out": out, "cfg": cfg, "result": result, "trainer": result["trainer"]}


def test_reference_is_the_actors_base_with_no_extra_storage(lora_run, tiny_task):
    """One copy of the base: the reference's weights are the actor's (same storage), and its
    log-probs are a separately loaded base model's (adapters off) while the actor's differ."""
    from tether.engines import AdapterOffEngine, InferenceEngine
    from tether.models import load_causal_lm, load_tokenizer
    from tether.roles import Reference

    cfg = lora_ppo(tiny_task["dir"], lora_run["out"].parent / "fresh", "cpu.linear_backend=aten", "rl.iterations=2")
    from tether.roles.build import build_roles

    roles = build_roles(cfg)
    assert isinstance(roles.reference.engine, AdapterOffEngine)
    seen: set = set()
    actor_bytes = parameter_bytes(roles.actor.engine.model, seen=seen)
    assert actor_bytes > 0 and parameter_bytes(roles.reference.engine.model, seen=seen) == 0
    # Train the adapters a little so that switching them off matters.
    from tether.loops.rl_run import rl_trainer
    from tether.loops.rl_setup import load_prompt_set

    prompts = load_prompt_set(cfg.prompts, "train", roles.tokenizer, "auto", 32)
    trainer = rl_trainer(cfg, roles, prompts)
    trainer.step()
    trainer.step()
    rollout = trainer.last_experience.rollout
    tok = load_tokenizer(str(tiny_task["dir"] / "base_model"))
    base = Reference(InferenceEngine(load_causal_lm(str(tiny_task["dir"] / "base_model"), tok)), cfg.rollout.temperature)
    want, _ = base.logprobs(rollout)
    got, _ = roles.reference.logprobs(rollout)
    actor, _ = roles.actor.logprobs(rollout, use_captured=False)
    mask = rollout.response_mask.bool()
    assert float((got - want)[mask].abs().max()) <= 1e-6
    assert float((actor - want)[mask].abs().max()) > 1e-4  # the adapters are on for the actor


def test_lora_run_saves_merged_models_and_adapters(lora_run):
    out = lora_run["out"]
    for where in (out, out / "critic"):
        assert (where / "model.safetensors").is_file() and (where / ADAPTER_DIR / "adapter_config.json").is_file()
        merged = load_file(str(where / "model.safetensors"))
        assert not any("lora_" in k or "base_layer" in k for k in merged)
    # Periodic checkpoints hold the adapters (and the critic's head) alone: small.
    ckpt = sorted((out / "checkpoints").iterdir())[-1]
    actor_adapter = load_file(str(ckpt / "actor" / "adapter_model.safetensors"))
    assert actor_adapter and all("lora_" in k for k in actor_adapter)
    critic_adapter = load_file(str(ckpt / "critic" / "adapter_model.safetensors"))
    assert any("score" in k for k in critic_adapter), "the critic's trained head is not in its checkpoint"
    full = (out / "model.safetensors").stat().st_size
    assert (ckpt / "actor" / "adapter_model.safetensors").stat().st_size < full / 5


def test_merged_checkpoint_loads_in_plain_transformers(lora_run):
    """Without peft importable, the merged directories load with AutoModelFor*; their logits equal
    the base + adapter's (PeftModel.from_pretrained on the adapter) within 1e-5."""
    out = lora_run["out"]
    code = textwrap.dedent(f"""
        import sys
        sys.modules["peft"] = None  # prove the merged checkpoints need no peft
        import torch
        from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification
        ids = torch.tensor([[2, 5, 6, 7, 8, 9]])
        lm = AutoModelForCausalLM.from_pretrained({str(out)!r})
        rm = AutoModelForSequenceClassification.from_pretrained({str(out / 'critic')!r})
        assert not any("lora" in n for n, _ in lm.named_modules())
        torch.save({{"lm": lm(ids).logits, "critic": rm(ids).logits}}, {str(out / 'plain.pt')!r})
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    plain = torch.load(out / "plain.pt")
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

    ids = torch.tensor([[2, 5, 6, 7, 8, 9]])
    cfg = lora_run["cfg"]
    base = AutoModelForCausalLM.from_pretrained(cfg.model.name_or_path)
    with torch.no_grad():
        adapted = PeftModel.from_pretrained(base, str(out / ADAPTER_DIR))(ids).logits
    assert float((adapted - plain["lm"]).abs().max()) <= 1e-5
    critic_base = AutoModelForSequenceClassification.from_pretrained(cfg.model.name_or_path, num_labels=1)
    with torch.no_grad():
        critic = PeftModel.from_pretrained(critic_base, str(out / "critic" / ADAPTER_DIR))(ids).logits
    assert float((critic - plain["critic"]).abs().max()) <= 1e-5


def test_the_critics_head_trains_beside_its_adapters(tiny_task, tmp_path):
    from tether.loops.rl_run import rl_trainer
    from tether.loops.rl_setup import load_prompt_set
    from tether.roles.build import build_roles

    cfg = lora_ppo(tiny_task["dir"], tmp_path / "run", "rl.iterations=1")
    roles = build_roles(cfg)
    critic = roles.critic.engine.model
    head = {n: p for n, p in critic.named_parameters() if p.requires_grad and "score" in n}
    assert head, "the critic's head is not trainable under LoRA"
    grads = []
    for p in head.values():
        p.register_hook(lambda g: grads.append(float(g.abs().sum())))
    before = {n: p.detach().clone() for n, p in head.items()}
    prompts = load_prompt_set(cfg.prompts, "train", roles.tokenizer, "auto", 32)
    rl_trainer(cfg, roles, prompts).step()
    assert grads and max(grads) > 0
    assert any(not torch.equal(before[n], p) for n, p in head.items())


def test_lora_ppo_resumes_bitwise(lora_run, tiny_task, tmp_path):
    out = tmp_path / "run"
    cfg = lora_ppo(tiny_task["dir"], out, "cpu.linear_backend=aten")

    def crash_after_third(it, stats, trainer):
        if it == 3:
            raise RuntimeError("stop")

    with pytest.raises(RuntimeError, match="stop"):
        run_rl(cfg, on_iteration=crash_after_third)
    run_rl(cfg, resume=True)
    assert comparable(out) == comparable(lora_run["out"])
    assert same_weights(out, lora_run["out"])
    assert same_weights(out / "critic", lora_run["out"] / "critic")


def test_lora_sft_resumes_bitwise(tiny_task, tmp_path):
    """SIGKILL during the third checkpoint (adapters + optimiser state), resume: the same run."""
    from tether.objectives.sft import run_sft

    straight = tmp_path / "straight"
    run_sft(load_config(SFTConfig, None, _overrides(tiny_task, straight)))
    killed = tmp_path / "killed"
    env = {**os.environ, "TETHER_FAULT": "checkpoint-write:3"}
    done = subprocess.run([sys.executable, "-m", "tether.cli", "sft", *_overrides(tiny_task, killed)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == -9, done.stderr
    resumed = subprocess.run([sys.executable, "-m", "tether.cli", "sft", "--resume", str(killed)],
                             capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming from step 2 of 4" in resumed.stderr
    assert comparable(killed) == comparable(straight)
    assert same_weights(killed, straight)


def _overrides(tiny_task, out):
    task = tiny_task["dir"]
    return [f"run.out={out}", "run.progress=false", "run.threads=1", "run.log_every=1",
            f"model.name_or_path={task / 'base_model'}", f"data.train={task / 'sft_train.jsonl'}", "data.eval_size=16",
            "data.max_length=48", "optim.batch_size=8", "max_steps=4", "lora.r=8", "gradient_checkpointing=true",
            "run.save_every=1"]


# --------------------------------------------------------------------------- bad input


def test_lora_bad_input_is_one_paragraph(task, foreign, tmp_path, capsys, lora_run):
    train = write_jsonl(tmp_path / "train.jsonl", good_sft())
    out = tmp_path / "run"
    code, err = cli(capsys, sft_args(task, out, train, "lora.r=4", "lora.target_modules=[nope_proj]"))
    assert_clean_error(code, err, "sft", "lora.target_modules", "nope_proj", "q_proj")
    code, err = cli(capsys, sft_args(task, out, train, "lora.r=4", "lora.target_modules=[input_layernorm]"))
    assert_clean_error(code, err, "sft", "peft cannot put LoRA adapters", "(lora)")
    adapter = lora_run["out"] / ADAPTER_DIR
    code, err = cli(capsys, sft_args(task, out, train, f"model.name_or_path={adapter}"))
    assert_clean_error(code, err, "sft", str(adapter), "LoRA adapter directory", "lora.adapter")
    code, err = cli(capsys, sft_args(task, out, train, f"lora.adapter={task / 'base_model'}"))
    assert_clean_error(code, err, "sft", "lora.adapter", "holds no LoRA adapter", "full model")
    assert not out.exists()


@pytest.mark.parametrize("settings, needles", [
    # peft used these and dropped the name that matched nothing, without a word:
    (["lora.r=4", "lora.target_modules=[q_proj,nope_proj]"], ["'lora.target_modules'", "called 'nope_proj'", "v_proj"]),
    (["lora.r=4", "lora.modules_to_save=[nope]"], ["'lora.modules_to_save'", "called 'nope'", "embed_tokens"]),
    (["lora.r=4", "lora.target_modules=[all-linear,q_proj]"], ["'all-linear' stands alone"]),
    # ... and these do nothing at all:
    (["lora.alpha=32"], ["'lora.alpha' = 32.0", "LoRA is off"]),
    (["lora.target_modules=[q_proj]"], ["'lora.target_modules'", "LoRA is off"]),
    (["lora.r=8", "lora.adapter=ADAPTER"], ["'lora.r' = 8", "lora.adapter, whose own"]),
])
def test_lora_names_and_settings_that_would_do_nothing(settings, needles, task, tmp_path, capsys, lora_run):
    train = write_jsonl(tmp_path / "train.jsonl", good_sft())
    out = tmp_path / "run"
    settings = [s.replace("ADAPTER", str(lora_run["out"] / ADAPTER_DIR)) for s in settings]
    for argv in (sft_args(task, out, train, *settings), [*sft_args(task, out, train, *settings), "--dry-run"]):
        code, err = cli(capsys, argv)
        assert_clean_error(code, err, "sft", *needles)
    assert not out.exists()


def test_ppo_with_lora_dropout_is_refused():
    from tether.common.errors import ConfigError

    with pytest.raises(ConfigError, match="'lora.dropout' = 0.1: PPO needs 0"):
        load_config(RLConfig, None, ["model.name_or_path=m", "prompts=p", "reward.models=[r]", "lora.r=4",
                                      "lora.dropout=0.1"])


def test_reward_model_is_the_lora_critics_base(trained, tmp_path):
    """critic.init=reward with LoRA on the critic: the reward model is the critic's base with its
    adapters off, one copy of those weights, scoring exactly as the reward model loaded alone."""
    from tether.engines import AdapterOffEngine
    from tether.loops.rl_run import rl_trainer
    from tether.loops.rl_setup import load_prompt_set
    from tether.models import load_scalar_model, load_tokenizer
    from tether.roles import ModelReward
    from tether.roles.build import build_roles

    task = trained["task"]
    cfg = load_config(RLConfig, None, [
        f"run.out={tmp_path / 'run'}", "run.progress=false", f"model.name_or_path={trained['sft']}",
        f"prompts={task / 'ppo_prompts.jsonl'}", f"reward.models=[{trained['rm']}]", "critic.lora.r=4",
        "critic.optim.lr=0.01", "rollout.batch_size=8", "rl.minibatch_size=4", "rollout.max_new_tokens=8",
        "cpu.linear_backend=aten"])
    roles = build_roles(cfg)
    assert isinstance(roles.reward.engine, AdapterOffEngine)
    seen: set = set()
    assert parameter_bytes(roles.critic.engine.model, seen=seen) > 0
    assert parameter_bytes(roles.reward.engine.model, seen=seen) == 0
    trainer = rl_trainer(cfg, roles, load_prompt_set(cfg.prompts, "train", roles.tokenizer, "auto", 32))
    trainer.step()  # the critic's adapters and head move; the reward model must not
    rollout = trainer.last_experience.rollout
    alone = ModelReward(load_scalar_model(str(trained["rm"]), load_tokenizer(str(trained["rm"]))))
    torch.testing.assert_close(roles.reward.score(rollout), alone.score(rollout), rtol=0, atol=1e-6)
    values = roles.critic.values(rollout)
    assert float(values.abs().sum()) > 0
