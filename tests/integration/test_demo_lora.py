"""`tether demo --lora` wiring (docs/performance.md, LoRA on the demo): adapters in the reward model
and PPO, SFT in full, the summary beside another run's. A tiny run: a few steps per stage on a small
task."""

from __future__ import annotations

import json

from tether.demo import LORA, format_summary, run_demo, stage_configs, with_lora


def test_lora_settings_and_user_overrides(tmp_path):
    merged = with_lora({"ppo": ["optim.lr=1e-5"]})
    assert merged["ppo"][-1] == "optim.lr=1e-5" and merged["ppo"][:-1] == LORA["ppo"]
    sft, rm, ppo = stage_configs(tmp_path, 0, None, merged, False)
    assert sft.lora.r == 0 and rm.lora.r == 32 and ppo.lora.r == 32 and ppo.critic.lora.r == 32
    assert ppo.lora.modules_to_save == ["norm"] and ppo.optim.lr == 1e-5


def test_a_tiny_lora_demo_runs_and_prints_beside_another(tmp_path):
    sizes = dict(n_sft=120, n_pairs_train=80, n_pairs_eval=40, n_eval_prompts=8, n_sft_eval=20, n_probes=10)
    quick = {"sft": ["max_steps=4", "run.progress=false"], "rm": ["max_steps=4", "run.progress=false"],
             "ppo": ["rl.iterations=2", "rollout.batch_size=8", "rl.minibatch_size=8", "run.progress=false",
                     "eval.every=0"]}
    summary = run_demo(tmp_path / "demo", overrides=quick, task_sizes=sizes,
                       eval_repeats=1, lora=True)
    out = tmp_path / "demo"
    assert summary["lora"] is True and json.loads((out / "summary.json").read_text())["lora"] is True
    assert not (out / "sft" / "adapter").exists()  # SFT trains in full
    for stage in ("rm", "ppo", "ppo/critic"):
        assert (out / stage / "adapter" / "adapter_config.json").is_file(), stage
    table = format_summary(summary, dict(summary, lora=False))
    assert "full SFT" in table and "LoRA PPO" in table and "RM held-out accuracy" in table
