"""Bad models, configs, output directories and non-finite training through the real CLI:
one paragraph naming the file or key, exit code 2, and no output directory that looks
complete (docs/reliability.md: "never lose a run"). Every run is tiny (2 steps / 1 iteration).
"""

from __future__ import annotations

import pytest
import yaml

from tether.metrics.logger import read_metrics
from tether.runs import MANIFEST

from bad_input_helpers import (
    assert_clean_error,
    assert_not_complete,
    cli,
    good_prefs,
    good_prompts,
    good_sft,
    ppo_args,
    rm_args,
    sft_args,
    write_jsonl,
)


# --------------------------------------------------------------------------- tokenizer / model


def test_sft_chat_data_needs_a_chat_template(task, no_template_model, tmp_path, capsys):
    rows = [{"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]}] * 4
    train = write_jsonl(tmp_path / "train.jsonl", rows)
    out = tmp_path / "run"
    code, err = cli(capsys, sft_args(task, out, train, f"model.name_or_path={no_template_model}"))
    assert_clean_error(code, err, "sft", str(train), "row 1", "no chat template", str(no_template_model))
    assert_not_complete(out)


def test_sft_chat_template_always_needs_one(task, no_template_model, tmp_path, capsys):
    train = write_jsonl(tmp_path / "train.jsonl", good_sft())
    out = tmp_path / "run"
    code, err = cli(capsys, sft_args(task, out, train, f"model.name_or_path={no_template_model}",
                                     "model.chat_template=always"))
    assert_clean_error(code, err, "sft", str(no_template_model), "no chat template", "always")
    assert_not_complete(out)


def test_sft_model_path_does_not_exist(task, tmp_path, capsys):
    train = write_jsonl(tmp_path / "train.jsonl", good_sft())
    missing = tmp_path / "no-such-model"
    out = tmp_path / "run"
    code, err = cli(capsys, sft_args(task, out, train, f"model.name_or_path={missing}"))
    assert_clean_error(code, err, "sft", str(missing), "does not exist")
    assert_not_complete(out)


def test_sft_model_name_neither_local_nor_on_the_hub(task, tmp_path, capsys):
    train = write_jsonl(tmp_path / "train.jsonl", good_sft())
    out = tmp_path / "run"
    code, err = cli(capsys, sft_args(task, out, train, "model.name_or_path=no_such_dir_xyz/sft"))
    assert_clean_error(code, err, "sft", "'no_such_dir_xyz/sft'", "no local path")
    assert_not_complete(out)


def test_sft_model_dir_without_config(task, tmp_path, capsys):
    train = write_jsonl(tmp_path / "train.jsonl", good_sft())
    empty = tmp_path / "empty-model"
    empty.mkdir()
    out = tmp_path / "run"
    code, err = cli(capsys, sft_args(task, out, train, f"model.name_or_path={empty}"))
    assert_clean_error(code, err, "sft", str(empty))
    assert_not_complete(out)


# --------------------------------------------------------------------------- config values

CONFIG_CASES = {
    "optim.lr=-1": ("optim.lr", "> 0"),
    "optim.lr=abc": ("optim.lr", "number"),
    "data.max_length=1": ("data.max_length", ">= 2"),
    "optim.batch_size=0": ("optim.batch_size", ">= 1"),
    "optim.grad_accum_steps=3": ("optim.grad_accum_steps", "divide"),
    "data.on_long=cut": ("data.on_long", "truncate"),
    "run.on_nonfinite=ignore": ("run.on_nonfinite", "skip"),
    "max_steps=2.5": ("max_steps", "integer"),
    "optim.lrr=0.1": ("optim.lrr", "optim.lr"),
    "optim.lr=.inf": ("optim.lr", "finite"),
    "optim.lr=.nan": ("optim.lr", "finite"),
    "run.seed=18446744073709551616": ("run.seed", "64-bit"),
    "run.out=[a]": ("run.out", "string"),
    "data=5": ("data", "mapping"),
    "notakey": ("notakey", "key.path=value"),
}


@pytest.mark.parametrize("override", sorted(CONFIG_CASES))
def test_config_value_out_of_range(override, task, tmp_path, capsys):
    train = write_jsonl(tmp_path / "train.jsonl", good_sft())
    out = tmp_path / "run"
    code, err = cli(capsys, [*sft_args(task, out, train), override])
    assert_clean_error(code, err, "sft", *CONFIG_CASES[override])
    assert not out.exists()


def test_config_file_errors(task, tmp_path, capsys):
    missing = tmp_path / "missing.yaml"
    code, err = cli(capsys, ["sft", "--config", str(missing)])
    assert_clean_error(code, err, "sft", str(missing), "does not exist")
    bad = tmp_path / "bad.yaml"
    bad.write_text("optim: {lr: [\n")
    code, err = cli(capsys, ["sft", "--config", str(bad)])
    assert_clean_error(code, err, "sft", str(bad), "YAML")
    ranged = tmp_path / "ranged.yaml"
    ranged.write_text(yaml.safe_dump({"optim": {"beta1": 1.5}}))
    code, err = cli(capsys, ["sft", "--config", str(ranged), "model.name_or_path=m", "data.train=t.jsonl"])
    assert_clean_error(code, err, "sft", "optim.beta1", "< 1")


def test_ppo_config_out_of_range(task, tmp_path, capsys):
    prompts = write_jsonl(tmp_path / "prompts.jsonl", good_prompts())
    out = tmp_path / "run"
    for override, needles in {"rollout.top_p=2": ("rollout.top_p", "<= 1"),
                              "rl.minibatch_size=3": ("rl.minibatch_size", "divide"),
                              "kl.estimator=k4": ("kl.estimator", "k3"),
                              "reward.models=[x]": ("reward.models", "reward.callable")}.items():
        code, err = cli(capsys, [*ppo_args(task, out, prompts), override])
        assert_clean_error(code, err, "ppo", *needles)
    assert not out.exists()


# --------------------------------------------------------------------------- output directory


def test_output_dir_holding_a_different_run(task, tmp_path, capsys):
    train = write_jsonl(tmp_path / "train.jsonl", good_sft())
    out = tmp_path / "run"
    code, err = cli(capsys, sft_args(task, out, train))
    assert code == 0, err
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    code, err = cli(capsys, sft_args(task, out, train, "optim.lr=0.5"))
    assert_clean_error(code, err, "sft", str(out), "different run", "run.overwrite")
    after = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    assert after == before  # the first run is untouched
    # A different stage in the same directory is refused too.
    code, err = cli(capsys, rm_args(task, out, write_jsonl(tmp_path / "p.jsonl", good_prefs())))
    assert_clean_error(code, err, "rm", str(out), "different run")


def test_output_dir_not_a_run(task, tmp_path, capsys):
    train = write_jsonl(tmp_path / "train.jsonl", good_sft())
    out = tmp_path / "run"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    code, err = cli(capsys, sft_args(task, out, train))
    assert_clean_error(code, err, "sft", str(out), "not empty")
    assert [p.name for p in out.iterdir()] == ["notes.txt"]


def test_output_dir_is_a_file(task, tmp_path, capsys):
    train = write_jsonl(tmp_path / "train.jsonl", good_sft())
    out = tmp_path / "run"
    out.write_text("a file")
    code, err = cli(capsys, sft_args(task, out, train))
    assert_clean_error(code, err, "sft", str(out), "not a directory")


def test_output_dir_with_a_broken_config(task, tmp_path, capsys):
    train = write_jsonl(tmp_path / "train.jsonl", good_sft())
    out = tmp_path / "run"
    out.mkdir()
    (out / "config.yaml").write_text("stage: [sft\n")
    code, err = cli(capsys, sft_args(task, out, train))
    assert_clean_error(code, err, "sft", str(out), "different run")
    assert_not_complete(out)


def test_resume_errors(task, tmp_path, capsys):
    code, err = cli(capsys, ["sft", "--resume", str(tmp_path / "nothing")])
    assert_clean_error(code, err, "sft", "nothing", "config.yaml")
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.yaml").write_text("stage: sft\nrun: {out: [\n")
    code, err = cli(capsys, ["sft", "--resume", str(broken)])
    assert_clean_error(code, err, "sft", str(broken / "config.yaml"), "YAML")
    (broken / "config.yaml").write_text("- a list\n")
    code, err = cli(capsys, ["sft", "--resume", str(broken)])
    assert_clean_error(code, err, "sft", str(broken / "config.yaml"), "mapping")
    (broken / "config.yaml").write_text("stage: rm\n")
    code, err = cli(capsys, ["sft", "--resume", str(broken)])
    assert_clean_error(code, err, "sft", "'rm' run")
    code, err = cli(capsys, ["sft", "--resume", str(broken), "optim.lr=1"])
    assert_clean_error(code, err, "sft", "--resume", "overrides")



# --------------------------------------------------------------------------- non-finite training


def test_nonfinite_stop_then_skip(task, tmp_path, capsys):
    """A learning rate that blows the weights up: stop names the step; skip counts skipped steps."""
    train = write_jsonl(tmp_path / "train.jsonl", good_sft())
    blowup = ["optim.lr=1e30", "optim.max_grad_norm=null", "optim.schedule=constant", "max_steps=4"]
    out = tmp_path / "stop"
    code, err = cli(capsys, sft_args(task, out, train, *blowup, "run.save_every=1"))
    assert_clean_error(code, err, "sft", "Non-finite", "step 2", "run.on_nonfinite=skip")
    assert not (out / MANIFEST).exists()  # the run is not complete ...
    assert [p.name for p in (out / "checkpoints").iterdir()] == ["step-000001"]  # ... its step-1 checkpoint is
    out = tmp_path / "skip"
    code, err = cli(capsys, sft_args(task, out, train, *blowup, "run.on_nonfinite=skip"))
    assert code == 0, err
    assert read_metrics(out / "metrics.jsonl")[-1]["optim/skipped_steps"] == 3


# --------------------------------------------------------------------------- combinations of settings


@pytest.mark.parametrize("command, setting, key", [
    ("grpo", "critic.lora.r=4", "critic.lora.r"),  # was an AttributeError in roles/build.py
    ("rloo", "critic.lora.alpha=8", "critic.lora.alpha"),
    ("reinforce_pp", "critic.optim.lr=1e-3", "critic.optim.lr"),
    ("grpo", "critic.init=policy", "critic.init"),
    ("rloo", "ppo.vf_coef=0.5", "ppo.vf_coef"),
    ("reinforce_pp", "ppo.lam=0.9", "ppo.lam"),
])
def test_critic_settings_with_a_critic_free_algorithm(command, setting, key, task, tmp_path, capsys):
    """Every critic (and value-loss) setting under an algorithm without a critic would do nothing:
    refused naming the key and why, before any model loads."""
    prompts = write_jsonl(tmp_path / "prompts.jsonl", good_prompts())
    out = tmp_path / "run"
    args = [a for a in ppo_args(task, out, prompts, reward=f"reward.models=[{task / 'base_model'}]")[1:]
            if a != "critic.init=policy"]
    group = ["group.size=4", "rl.minibatch_size=8"]  # a valid group for all three: only the setting is wrong
    code, err = cli(capsys, [command, *args, *group, setting])
    assert_clean_error(code, err, command, f"'{key}'", f"algorithm={command}", "trains no critic")
    assert not out.exists()


def test_nccl_on_a_cpu(task, tmp_path, capsys, monkeypatch):
    """distributed.backend=nccl with a CPU run.device is a contradiction (refused with the config);
    under torchrun on a machine without CUDA it is refused before the process group starts (it
    was a _cuda_setDevice traceback)."""
    import torch

    train = write_jsonl(tmp_path / "train.jsonl", good_sft())
    out = tmp_path / "run"
    code, err = cli(capsys, sft_args(task, out, train, "distributed.backend=nccl", "run.device=cpu"))
    assert_clean_error(code, err, "sft", "'distributed.backend' = 'nccl'", "run.device = 'cpu'", "gloo")
    started = []
    monkeypatch.setattr(torch.distributed, "init_process_group", lambda *a, **k: started.append(a))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for name, value in (("WORLD_SIZE", "2"), ("RANK", "0"), ("LOCAL_RANK", "0")):
        monkeypatch.setenv(name, value)  # as torchrun starts rank 0
    code, err = cli(capsys, sft_args(task, out, train, "distributed.backend=nccl"))
    assert_clean_error(code, err, "sft", "'distributed.backend' = 'nccl'", "CUDA GPUs", "gloo")
    assert not started and not out.exists()
