"""--dry-run: the plan of every stage, nothing written, and the same bad-input errors as a run.

Each bad input of the bad-input tests' tables goes once through the real command and once
through ``--dry-run``: the error lines must be identical.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

from bad_input_helpers import cli, good_prefs, good_prompts, good_sft, ppo_args, rm_args, sft_args, write_jsonl
from stage_helpers import rm_overrides, sft_overrides
from test_bad_input_data import PREF_CASES, PROMPT_CASES, SFT_CASES
from test_distributed import ppo_args as trained_ppo_args

pytestmark = pytest.mark.slow


def tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def plan_of(capsys, argv: list[str], root: Path) -> str:
    """Run ``argv --dry-run``; assert exit 0 and nothing written under ``root``; return the plan."""
    from tether.cli import main

    before = tree(root)
    code = main([*argv, "--dry-run"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert tree(root) == before, "the dry run wrote files"
    return captured.out


def memory_of(plan: str, role: str) -> str:
    return re.search(rf"{role}\s+([\d.]+ [KMG]?B)\s", plan).group(1)


def test_sft_and_rm_plans_state_steps_and_memory(trained, tmp_path, capsys):
    task = trained["task"]
    plan = plan_of(capsys, ["sft", *sft_overrides(task, tmp_path / "sft", "max_steps=null", "epochs=3")], tmp_path)
    # 400 demonstrations minus none held out (data.eval given), batch 16, 3 epochs: ceil(3 x 400 / 16) = 75.
    assert "data.train" in plan and ": 400 examples" in plan and "75 optimiser steps" in plan
    params = AutoModelForCausalLM.from_pretrained(task / "base_model").num_parameters()
    assert f"{params:,} parameters" in plan
    assert memory_of(plan, "policy") == f"{params * 16 / 1e6:.1f} MB"  # fp32: weights, gradient, two moments
    assert "run.out" in plan and not (tmp_path / "sft").exists()

    plan = plan_of(capsys, ["rm", *rm_overrides(task, trained["sft"], tmp_path / "rm", "lora.r=4")], tmp_path)
    assert "300 preference pairs" in plan and "held out: 100 pairs" in plan and "10 optimiser steps" in plan
    assert "LoRA r=4 + the score head" in plan and "frozen base +" in plan


def test_ppo_and_grpo_plans_name_every_role(trained, tmp_path, capsys):
    plan = plan_of(capsys, trained_ppo_args(trained, tmp_path / "ppo"), tmp_path)
    for role in ("actor", "reference", "reward", "critic"):
        assert re.search(rf"^\s+(roles\s+)?{role}\s", plan, re.M), role
    assert "rollout: 8 prompts = 8 episodes per iteration, up to 8 new tokens" in plan
    # 8 episodes, minibatch 4, 2 epochs: 2 x 2 = 4 optimiser steps per iteration; 3 iterations.
    assert "2 epochs x 2 minibatches of 4 (1 rank(s) x 2 micro-batch(es) x 2) = 4 optimiser steps" in plan
    assert "3 iterations = 24 episodes, 12 actor optimiser steps" in plan
    lm = AutoModelForCausalLM.from_pretrained(trained["sft"]).num_parameters()
    rm = AutoModelForSequenceClassification.from_pretrained(trained["rm"]).num_parameters()
    assert memory_of(plan, "actor") == f"{lm * 16 / 1e6:.1f} MB" and memory_of(plan, "reference") == f"{lm * 4 / 1e6:.1f} MB"
    assert memory_of(plan, "critic") == f"{rm * 16 / 1e6:.1f} MB" and memory_of(plan, "reward") == f"{rm * 4 / 1e6:.1f} MB"
    assert "eval.prompts" in plan and "gold_score" in plan

    grpo = ["grpo", *trained_ppo_args(trained, tmp_path / "grpo", "group.size=4", "lora.r=4", "placement.backend=ray",
                                      "placement.ray.roles.reward.num_cpus=0.5")[1:]]
    plan = plan_of(capsys, grpo, tmp_path)  # no Ray cluster is started
    assert "group actor + reference: 1 worker(s) x 1 CPU, 0 GPU" in plan and "group reward: 1 worker(s) x 0.5 CPU" in plan
    assert "critic     none (grpo has no value model)" in plan and "8 prompts x 4 responses = 32 episodes" in plan
    assert "the actor's base with its adapters off (no copy)" in plan


def test_dpo_plan_and_a_resumable_run(trained, tmp_path, capsys):
    from tether.cli import main

    task = trained["task"]
    dpo = ["dpo", f"run.out={tmp_path / 'dpo'}", f"model.name_or_path={trained['sft']}",
           f"data.train={task / 'prefs_train.jsonl'}", f"data.eval={task / 'prefs_eval.jsonl'}", "data.max_length=64",
           "max_steps=3", "optim.batch_size=8", "run.save_every=2", "run.progress=false"]
    plan = plan_of(capsys, dpo, tmp_path)
    # 3 steps of 8 from 300 pairs (38 steps an epoch): the reference scores those 24 rows, not all 300.
    assert "log-probs of the 24 of 300 training pairs the steps draw" in plan
    assert "3 optimiser steps (max_steps = 3)" in plan
    assert main(dpo) == 0
    capsys.readouterr()
    plan = plan_of(capsys, ["dpo", "--resume", str(tmp_path / "dpo")], tmp_path)
    assert "continues the run there" in plan


# -- the same bad input, the same error ----------------------------------------------------


def same_error(capsys, argv: list[str], stage: str) -> str:
    """The error line of ``argv`` and of ``argv --dry-run``, asserted equal (exit 2 both)."""
    code, err = cli(capsys, argv)
    dry_code, dry_err = cli(capsys, [*argv, "--dry-run"])
    lines = [[line for line in e.splitlines() if line.startswith(f"tether {stage}: error:")] for e in (err, dry_err)]
    assert code == dry_code == 2, (err, dry_err)
    assert lines[0] and lines[0] == lines[1], (lines[0], lines[1])
    return lines[0][0]


@pytest.mark.parametrize("case", sorted(SFT_CASES))
def test_sft_bad_data_same_error(case, task, tmp_path, capsys):
    train = write_jsonl(tmp_path / "train.jsonl", SFT_CASES[case][0])
    assert str(train) in same_error(capsys, sft_args(task, tmp_path / "run", train), "sft")


@pytest.mark.parametrize("case", sorted(PREF_CASES))
def test_rm_bad_pairs_same_error(case, task, tmp_path, capsys):
    train = write_jsonl(tmp_path / "prefs.jsonl", PREF_CASES[case][0])
    assert str(train) in same_error(capsys, rm_args(task, tmp_path / "run", train), "rm")


@pytest.mark.parametrize("case", sorted(PROMPT_CASES))
def test_ppo_bad_prompts_same_error(case, task, tmp_path, capsys):
    prompts = write_jsonl(tmp_path / "prompts.jsonl", PROMPT_CASES[case][0])
    assert str(prompts) in same_error(capsys, ppo_args(task, tmp_path / "run", prompts), "ppo")


def test_bad_models_and_settings_same_error(task, trained, two_output_rm, no_template_model, tmp_path, capsys):
    prompts = write_jsonl(tmp_path / "prompts.jsonl", good_prompts())
    out = tmp_path / "run"
    cases = [
        ([*ppo_args(task, out, prompts), f"model.name_or_path={tmp_path / 'missing'}"], "does not exist"),
        (ppo_args(task, out, prompts, reward=f"reward.models=[{tmp_path / 'no-rm'}]"), "does not exist"),
        (ppo_args(task, out, prompts, reward=f"reward.models=[{two_output_rm}]"), "num_labels=1"),
        (ppo_args(task, out, prompts, reward=f"reward.models=[{trained['sft']}]"), "no trained scalar head"),
        (ppo_args(task, out, prompts, reward="reward.callable=no_such_module_xyz:fn"), "no_such_module_xyz"),
        ([*ppo_args(task, out, prompts), f"model.name_or_path={no_template_model}", "model.chat_template=always"],
         "no chat template"),
        ([*ppo_args(task, out, prompts), "run.device=cuda:3"], "run.device"),
    ]
    try:
        import vllm  # noqa: F401
    except ImportError:  # the main environment: vLLM lives in .venv-vllm
        cases.append(([*ppo_args(task, out, prompts), "rollout.engine=vllm"], "vLLM is not installed"))
    for argv, needle in cases:
        assert needle in same_error(capsys, argv, "ppo"), argv
    train = write_jsonl(tmp_path / "train.jsonl", [{"prompt": "a", "completion": "b"}] * 8)
    assert "num_labels=1" in same_error(capsys, rm_args(task, out, train, f"model.name_or_path={two_output_rm}"), "rm")
    # A directory holding another run is refused by both, before the (here also bad) data is read.
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"promt": "a", "completion": "b"}])
    assert str(trained["rm"]) in same_error(capsys, sft_args(task, trained["rm"], bad), "sft")
    # A device this machine lacks, before the data too.
    assert "run.device" in same_error(capsys, rm_args(task, out, bad, "run.device=cuda:3"), "rm")


def dpo_args(task, out, train, *extra):
    return ["dpo", *[a for a in rm_args(task, out, train, *extra)[1:] if a != "normalize=false"]]


def test_model_and_lora_checks_same_error(task, foreign, tmp_path, capsys):
    """What the run refuses when it loads and sets up its models, the dry run refuses too (it
    passed all of these): each model goes through the run's loader on the meta device and the
    trained ones through the run's LoRA set-up."""
    out = tmp_path / "run"
    sft_train = write_jsonl(tmp_path / "train.jsonl", good_sft())
    prefs = write_jsonl(tmp_path / "prefs.jsonl", good_prefs())
    prompts = write_jsonl(tmp_path / "prompts.jsonl", good_prompts())
    lora = ("lora.r=4",)
    cases = {
        "sft": [
            (sft_args(task, out, sft_train, *lora, "lora.target_modules=[nope]"), "called 'nope'"),
            (sft_args(task, out, sft_train, *lora, "lora.target_modules=[q_proj,nope]"), "called 'nope'"),
            (sft_args(task, out, sft_train, *lora, "lora.modules_to_save=[nope]"), "lora.modules_to_save"),
            (sft_args(task, out, sft_train, *lora, "lora.target_modules=[input_layernorm]"), "peft cannot put"),
            (sft_args(task, out, sft_train, f"lora.adapter={task / 'base_model'}"), "holds no LoRA adapter"),
            (sft_args(task, out, sft_train, f"model.name_or_path={foreign['rm']}"), "scalar-head checkpoint"),
            (sft_args(task, out, sft_train, f"model.name_or_path={foreign['lacking']}"), "lacks weights"),
            (sft_args(task, out, sft_train, f"model.name_or_path={foreign['gpt2']}", *lora,
                      "lora.target_modules=[q_proj]"), "c_attn"),
        ],
        "rm": [
            (rm_args(task, out, prefs, *lora, "lora.target_modules=[nope]"), "called 'nope'"),
            (rm_args(task, out, prefs, f"model.name_or_path={foreign['lacking']}"), "lacks weights"),
        ],
        "dpo": [
            (dpo_args(task, out, prefs, f"reference={foreign['gpt2']}"), "different tokenizer"),
            (dpo_args(task, out, prefs, f"reference={foreign['rm']}"), "scalar-head checkpoint"),
            (dpo_args(task, out, prefs, *lora, "lora.modules_to_save=[nope]"), "lora.modules_to_save"),
        ],
        "ppo": [
            ([*ppo_args(task, out, prompts), f"reference={foreign['gpt2']}"], "different tokenizer"),
            ([*ppo_args(task, out, prompts), f"reference={foreign['lacking']}"], "lacks weights"),
            ([*ppo_args(task, out, prompts), *lora, "lora.target_modules=[nope]"], "called 'nope'"),
            ([*ppo_args(task, out, prompts), "critic.lora.r=4", "critic.lora.modules_to_save=[nope]"],
             "critic.lora.modules_to_save"),
            ([*ppo_args(task, out, prompts), f"critic.path={foreign['lacking']}"], "lacks weights"),
        ],
    }
    for stage, stage_cases in cases.items():
        for argv, needle in stage_cases:
            assert needle in same_error(capsys, argv, stage), argv
            assert not out.exists()


def test_the_python_dry_run(trained, tmp_path):
    import tether

    before = tree(tmp_path)
    plan = tether.dry_run("grpo", {"model.name_or_path": str(trained["sft"]), "reward.models": [str(trained["rm"])],
                                   "prompts": str(trained["task"] / "ppo_prompts.jsonl"), "rollout.max_new_tokens": 8,
                                   "run.out": str(tmp_path / "g")})
    assert set(plan.memory) == {"actor", "reference", "reward"}  # GRPO: no critic
    lm = AutoModelForCausalLM.from_pretrained(trained["sft"]).num_parameters()
    assert plan.memory["actor"] == lm * 16 and plan.memory["reference"] == lm * 4
    assert "4 responses" in plan.render() and tree(tmp_path) == before
    with pytest.raises(tether.DataError, match="no-such.jsonl"):
        tether.dry_run("sft", {"model.name_or_path": str(trained["sft"]), "data.train": str(tmp_path / "no-such.jsonl")})


def test_setup_checks_same_error(task, tmp_path, capsys, monkeypatch):
    """The run's other set-up checks before work: a tracker server that does not answer, Ray not
    installed for placement.backend=ray (the dry run passed both)."""
    import importlib.util

    out = tmp_path / "run"
    train = write_jsonl(tmp_path / "train.jsonl", good_sft())
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:1")  # nothing listens on port 1
    if importlib.util.find_spec("mlflow") is not None:
        assert "MLFLOW_TRACKING_URI" in same_error(capsys, sft_args(task, out, train, "run.report_to=[mlflow]"), "sft")
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ray" else find_spec(name, *a))
    monkeypatch.setitem(__import__("sys").modules, "ray", None)  # `import ray` fails as where it is not installed
    prompts = write_jsonl(tmp_path / "prompts.jsonl", good_prompts())
    assert "Ray is not installed" in same_error(capsys, [*ppo_args(task, out, prompts), "placement.backend=ray"], "ppo")
    assert not out.exists()


def test_plans_print_the_predicted_peak_per_phase(trained, tmp_path, capsys):
    """The memory model's peak per phase: one phase (update) for SFT, the reference's log-probs
    too for DPO, rollout / log-probs / update for PPO (with a critic) and GRPO (without)."""
    import tether

    task = trained["task"]
    plan = plan_of(capsys, ["sft", *sft_overrides(task, tmp_path / "sft")], tmp_path)
    assert re.search(r"^\s+peak\s+update\s+[\d.]+ [KMG]?B  \(forward \+ backward \+ AdamW: .*activations", plan, re.M)
    assert re.search(r"^\s+predicted\s+[\d.]+ [KMG]?B  at the peak \(update\); resident in every phase: weights", plan,
                     re.M)
    assert "rollout" not in plan.split("  peak ")[-1]
    dpo = ["dpo", f"run.out={tmp_path / 'dpo'}", f"model.name_or_path={trained['sft']}",
           f"data.train={task / 'prefs_train.jsonl'}", "data.max_length=64", "max_steps=3", "optim.batch_size=8"]
    plan = plan_of(capsys, dpo, tmp_path)
    assert re.search(r"^\s+(peak\s+)?log-probs\s+[\d.]+ [KMG]?B  \(the reference's log-probs", plan, re.M)
    ppo = plan_of(capsys, trained_ppo_args(trained, tmp_path / "ppo"), tmp_path)
    for phase, what in (("rollout", "generation: .*KV cache"), ("log-probs", "old and reference log-probs"),
                        ("update", "actor and critic forward")):
        assert re.search(rf"^\s+(peak\s+)?{phase}\s+[\d.]+ [KMG]?B  \({what}", ppo, re.M), phase
    # The Python dry run's prediction: the peak phase's split adds up, every phase at most the peak.
    grpo = tether.dry_run("grpo", {"model.name_or_path": str(trained["sft"]), "reward.models": [str(trained["rm"])],
                                   "prompts": str(task / "ppo_prompts.jsonl"), "rollout.max_new_tokens": 8,
                                   "run.out": str(tmp_path / "g")})
    assert re.search(r"update\s+[\d.]+ [KMG]?B  \(actor forward \+ backward \+ AdamW", grpo.render())  # no critic
    peak = grpo.peak
    assert set(peak["phases"]) == {"rollout", "logprobs", "update"}
    assert peak["total"] == max(p["total"] for p in peak["phases"].values()) == peak["split"]["total"]
    # 'memory' counts each role's weights, gradients and AdamW state: fp32, the trained actor's 16 B a
    # parameter are 4 of weights, 4 of gradients and 8 of AdamW state (the gradients half the latter).
    split = peak["split"]
    assert split["weights"] == sum(grpo.memory.values()) - split["optimizer"] - split["optimizer"] // 2
