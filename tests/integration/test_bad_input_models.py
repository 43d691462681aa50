"""Foreign models and models in the wrong role, through the real CLI (docs/reliability.md, first
new-user trial):

- class 2: sequence lengths are fitted to the model's context (GPT-2's learned position table
  raised an IndexError past 32 positions; now every stage caps or refuses before any work);
- class 3: a causal LM where a reward model is expected (or the reverse), or a checkpoint that
  lacks weights, is a clear error instead of a randomly initialised head or layer;
- class 5: a failure before anything resumable exists leaves no run directory behind.

Every run is tiny. The GPT-2 and Qwen2 models and their byte-level BPE tokenizer are built by
the `foreign` fixture (conftest.py).
"""

from __future__ import annotations

import pytest
import yaml

from bad_input_helpers import (
    LONG_PROMPT,
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
from tether.cli import main
from tether.runs import MANIFEST

LONG_ANSWER = "the answer is " + " ".join(["seven"] * 40) + " ."


def long_sft(n: int = 8) -> list[dict]:
    return [{"prompt": f"what is {i} + 1 ?", "completion": LONG_ANSWER} for i in range(n)]


# --------------------------------------------------------------------------- class 2: lengths


@pytest.mark.parametrize("name", ["gpt2", "qwen2"])
def test_sft_caps_max_length_at_the_models_context(name, task, foreign, tmp_path, capsys):
    """data.max_length=512 on a 32/48-position model: rows are cut to the context, not a crash."""
    train = write_jsonl(tmp_path / "train.jsonl", long_sft())
    out = tmp_path / "run"
    code, err = cli(capsys, sft_args(task, out, train, f"model.name_or_path={foreign[name]}", "data.max_length=512"))
    assert code == 0, err
    assert "Traceback" not in err and "capped from data.max_length=512" in err
    assert (out / MANIFEST).is_file()


def test_sft_row_past_the_context_with_on_long_error(task, foreign, tmp_path, capsys):
    train = write_jsonl(tmp_path / "train.jsonl", long_sft())
    out = tmp_path / "run"
    code, err = cli(capsys, sft_args(task, out, train, f"model.name_or_path={foreign['gpt2']}",
                                     "data.max_length=512", "data.on_long=error"))
    assert_clean_error(code, err, "sft", str(train), "row 1", "max_length 32", "context", "data.max_length=512")
    assert not out.exists()


def test_rm_caps_max_length_at_the_models_context(task, foreign, tmp_path, capsys):
    pairs = [{"prompt": f"what is {i} + 1 ?", "chosen": LONG_ANSWER, "rejected": "no ."} for i in range(8)]
    train = write_jsonl(tmp_path / "pairs.jsonl", pairs)
    out = tmp_path / "run"
    code, err = cli(capsys, rm_args(task, out, train, f"model.name_or_path={foreign['gpt2']}", "data.max_length=512"))
    assert code == 0, err
    assert "capped from data.max_length=512" in err and (out / MANIFEST).is_file()


def test_ppo_response_alone_past_the_context(task, foreign, tmp_path, capsys):
    prompts = write_jsonl(tmp_path / "prompts.jsonl", good_prompts())
    out = tmp_path / "run"
    code, err = cli(capsys, [*ppo_args(task, out, prompts), f"model.name_or_path={foreign['gpt2']}",
                             "rollout.max_new_tokens=40"])
    assert_clean_error(code, err, "ppo", "rollout.max_new_tokens", "40", "32 positions", str(foreign["gpt2"]))
    assert not out.exists()


def test_ppo_prompts_past_the_context_are_dropped_or_refused(task, foreign, tmp_path, capsys):
    """prompt + rollout.max_new_tokens must fit 32 positions: long prompts are dropped (counted,
    said on stderr); when none fits, the error names the keys and the context."""
    mixed = write_jsonl(tmp_path / "mixed.jsonl", [*good_prompts(4), {"prompt": LONG_PROMPT}])
    out = tmp_path / "run"
    base = [*ppo_args(task, out, mixed), f"model.name_or_path={foreign['gpt2']}", "rollout.max_new_tokens=16",
            "rollout.max_prompt_length=256"]
    code, err = cli(capsys, base)
    assert code == 0, err
    assert "1 of 5 prompts" in err and "rollout.max_prompt_length=256" in err
    only_long = write_jsonl(tmp_path / "long.jsonl", [{"prompt": LONG_PROMPT}] * 3)
    out2 = tmp_path / "run2"
    code, err = cli(capsys, [*ppo_args(task, out2, only_long), f"model.name_or_path={foreign['gpt2']}",
                             "rollout.max_new_tokens=16", "rollout.max_prompt_length=256"])
    assert_clean_error(code, err, "ppo", str(only_long), "rollout.max_prompt_length", "32 positions",
                       "rollout.max_new_tokens=16")
    assert not out2.exists()


def test_ppo_on_a_foreign_model_runs(task, foreign, tmp_path, capsys):
    """GPT-2 (a learned position table, no trimmed last layer) and Qwen2 run PPO end to end."""
    prompts = write_jsonl(tmp_path / "prompts.jsonl", good_prompts())
    for name in ("gpt2", "qwen2"):
        out = tmp_path / name
        code, err = cli(capsys, [*ppo_args(task, out, prompts), f"model.name_or_path={foreign[name]}",
                                 "rollout.max_new_tokens=12"])
        assert code == 0, err
        assert (out / MANIFEST).is_file()


# --------------------------------------------------------------------------- class 3: roles


def test_causal_lm_as_reward_model_is_refused(task, tmp_path, capsys):
    prompts = write_jsonl(tmp_path / "prompts.jsonl", good_prompts())
    out = tmp_path / "run"
    base = task / "base_model"
    code, err = cli(capsys, ppo_args(task, out, prompts, reward=f"reward.models=[{base}]"))
    assert_clean_error(code, err, "ppo", str(base), "reward.models", "no trained scalar head")
    assert not out.exists()


@pytest.mark.parametrize("key", ["model.name_or_path", "reference"])
def test_reward_model_as_policy_is_refused(key, task, foreign, tmp_path, capsys):
    prompts = write_jsonl(tmp_path / "prompts.jsonl", good_prompts())
    out = tmp_path / "run"
    code, err = cli(capsys, [*ppo_args(task, out, prompts), f"{key}={foreign['rm']}"])
    assert_clean_error(code, err, "ppo", str(foreign["rm"]), f"({key})", "scalar-head", "not a causal LM")
    assert not out.exists()


def test_reward_model_as_sft_base_is_refused(task, foreign, tmp_path, capsys):
    train = write_jsonl(tmp_path / "train.jsonl", good_sft())
    out = tmp_path / "run"
    code, err = cli(capsys, sft_args(task, out, train, f"model.name_or_path={foreign['rm']}"))
    assert_clean_error(code, err, "sft", str(foreign["rm"]), "model.name_or_path", "not a causal LM")
    assert not out.exists()


def test_checkpoint_lacking_weights_is_refused(task, foreign, tmp_path, capsys):
    train = write_jsonl(tmp_path / "train.jsonl", good_sft())
    out = tmp_path / "run"
    code, err = cli(capsys, sft_args(task, out, train, f"model.name_or_path={foreign['lacking']}"))
    assert_clean_error(code, err, "sft", str(foreign["lacking"]), "lacks weights", "layers.1.mlp", "random")
    assert not out.exists()


def test_critic_head_is_fresh_only_when_asked(task, foreign, tmp_path, capsys):
    """critic.init=reward expects a trained head: a causal-LM critic.path is refused; with
    critic.init=policy a fresh head on it is the point and the run goes."""
    prompts = write_jsonl(tmp_path / "prompts.jsonl", good_prompts())
    base = task / "base_model"
    out = tmp_path / "run"
    code, err = cli(capsys, [*ppo_args(task, out, prompts), "critic.init=reward", f"critic.path={base}"])
    assert_clean_error(code, err, "ppo", str(base), "critic.path", "no trained scalar head")
    assert not out.exists()
    code, err = cli(capsys, [*ppo_args(task, out, prompts), "critic.init=policy", f"critic.path={base}"])
    assert code == 0, err
    out2 = tmp_path / "run2"
    code, err = cli(capsys, [*ppo_args(task, out2, prompts), "critic.init=reward", f"critic.path={foreign['rm']}"])
    assert code == 0, err


def test_critic_from_the_reward_model_needs_one(task, tmp_path, capsys):
    prompts = write_jsonl(tmp_path / "prompts.jsonl", good_prompts())
    out = tmp_path / "run"
    code, err = cli(capsys, [*ppo_args(task, out, prompts), "critic.init=reward"])
    assert_clean_error(code, err, "ppo", "critic.init", "reward.callable", "critic.init=policy")
    assert not out.exists()


def test_eval_with_models_in_the_wrong_roles(task, foreign, tmp_path, capsys):
    prompts = task / "eval_prompts.jsonl"
    base = task / "base_model"
    args = ["eval", "--prompts", str(prompts), "--max-prompts", "2", "--samples-per-prompt", "1",
            "--max-new-tokens", "4", "--out", str(tmp_path / "eval.json")]
    code, err = cli(capsys, [*args, "--policy", str(foreign["rm"]), "--reference", str(base)])
    assert_clean_error(code, err, "eval", str(foreign["rm"]), "not a causal LM")
    code, err = cli(capsys, [*args, "--policy", str(base), "--reference", str(base), "--reward-model", str(base)])
    assert_clean_error(code, err, "eval", str(base), "no trained scalar head")
    assert not (tmp_path / "eval.json").exists()


# --------------------------------------------------------------------------- class 5: failed starts


def test_unreachable_reward_url_leaves_nothing(task, tmp_path, capsys):
    prompts = write_jsonl(tmp_path / "prompts.jsonl", good_prompts())
    out = tmp_path / "run"
    code, err = cli(capsys, ppo_args(task, out, prompts, reward="reward.url=http://127.0.0.1:9"))
    assert_clean_error(code, err, "ppo", "http://127.0.0.1:9", "reward.url", "could not be reached")
    assert not out.exists()


@pytest.mark.parametrize("stage,key", [("sft", "optim.lr"), ("ppo", "optim.lr"), ("ppo", "critic.optim.lr")])
def test_learning_rate_past_float32_is_a_config_error(stage, key, task, tmp_path, capsys):
    """lr / (1 - beta1) past float32's range failed inside AdamW with a traceback."""
    out = tmp_path / "run"
    if stage == "sft":
        args = sft_args(task, out, write_jsonl(tmp_path / "train.jsonl", good_sft()), f"{key}=1e38")
    else:
        args = [*ppo_args(task, out, write_jsonl(tmp_path / "p.jsonl", good_prompts())), f"{key}=1e38"]
    code, err = cli(capsys, args)
    assert_clean_error(code, err, stage, key, "AdamW", "float32")
    assert not out.exists()


def test_diverging_run_leaves_no_directory_and_the_fixed_rerun_goes(task, tmp_path, capsys):
    """Non-finite at step 2 with no checkpoint yet: the directory goes; the corrected rerun is not blocked."""
    train = write_jsonl(tmp_path / "train.jsonl", good_sft())
    out = tmp_path / "run"
    blowup = ["optim.lr=1e30", "optim.max_grad_norm=null", "optim.schedule=constant", "max_steps=4"]
    code, err = cli(capsys, sft_args(task, out, train, *blowup))
    assert_clean_error(code, err, "sft", "Non-finite", "step 2")
    assert not out.exists()
    code, err = cli(capsys, sft_args(task, out, train, "max_steps=4"))
    assert code == 0, err
    prompts = write_jsonl(tmp_path / "p.jsonl", good_prompts())
    ppo_out = tmp_path / "ppo"
    code, err = cli(capsys, [*ppo_args(task, ppo_out, prompts), "rl.iterations=3", "optim.lr=1e30",
                             "critic.optim.lr=1e30", "optim.max_grad_norm=null",
                             "critic.optim.max_grad_norm=null"])
    assert_clean_error(code, err, "ppo", "Non-finite")
    assert not ppo_out.exists()


def test_failed_start_in_an_existing_directory_gives_it_back(task, tmp_path, capsys):
    """A run that overwrites another one and fails before a checkpoint: its files go, the previous
    config.yaml comes back; a refused directory is never touched."""
    train = write_jsonl(tmp_path / "train.jsonl", good_sft())
    out = tmp_path / "run"
    code, err = cli(capsys, sft_args(task, out, train))
    assert code == 0, err
    first_config = (out / "config.yaml").read_bytes()
    code, err = cli(capsys, sft_args(task, out, train, "optim.lr=1e30", "optim.max_grad_norm=null",
                                     "optim.schedule=constant", "max_steps=4", "run.overwrite=true"))
    assert_clean_error(code, err, "sft", "Non-finite")
    assert (out / "config.yaml").read_bytes() == first_config
    assert not (out / "metrics.jsonl").exists() and not (out / "checkpoints").exists()
    assert_not_complete(out)


def test_failure_after_a_checkpoint_keeps_the_run(task, tmp_path, capsys):
    train = write_jsonl(tmp_path / "train.jsonl", good_sft())
    out = tmp_path / "run"
    code, err = cli(capsys, sft_args(task, out, train, "optim.lr=1e30", "optim.max_grad_norm=null",
                                     "optim.schedule=constant", "max_steps=4", "run.save_every=1"))
    assert_clean_error(code, err, "sft", "Non-finite", "step 2")
    assert [p.name for p in (out / "checkpoints").iterdir()] == ["step-000001"]
    assert (out / "metrics.jsonl").is_file()


# --------------------------------------------------------------------------- class 8: keys named


def test_paths_from_a_preset_name_their_config_keys(task, tmp_path, capsys):
    missing = tmp_path / "missing.jsonl"
    preset = tmp_path / "preset.yaml"
    preset.write_text(yaml.safe_dump({"model": {"name_or_path": str(task / "base_model")},
                                      "data": {"train": str(missing)}}))
    out = tmp_path / "run"
    code, err = cli(capsys, ["sft", "--config", str(preset), f"run.out={out}", "run.progress=false"])
    assert_clean_error(code, err, "sft", str(missing), "(data.train)", "no such file")
    preset.write_text(yaml.safe_dump({"model": {"name_or_path": str(tmp_path / "no-model")},
                                      "data": {"train": str(write_jsonl(tmp_path / "t.jsonl", good_sft()))}}))
    code, err = cli(capsys, ["sft", "--config", str(preset), f"run.out={out}", "run.progress=false"])
    assert_clean_error(code, err, "sft", str(tmp_path / "no-model"), "(model.name_or_path)", "does not exist")
    prompts = write_jsonl(tmp_path / "p.jsonl", good_prompts())
    for key, value, needle in (("eval.prompts", str(missing), "(eval.prompts)"),
                               ("reward.models", f"[{tmp_path / 'no-rm'}]", "(reward.models)")):
        code, err = cli(capsys, [*ppo_args(task, out, prompts), f"{key}={value}"]
                        + (["reward.callable=null"] if key == "reward.models" else []))
        assert_clean_error(code, err, "ppo", needle)
    code, err = cli(capsys, ppo_args(task, out, prompts, reward="reward.callable=no_such_module_q:f"))
    assert_clean_error(code, err, "ppo", "(reward.callable)", "no_such_module_q")
    code, err = cli(capsys, rm_args(task, out, write_jsonl(tmp_path / "pairs.jsonl", good_prefs()),
                                    f"data.eval={missing}"))
    assert_clean_error(code, err, "rm", "(data.eval)")
    assert not out.exists()


def test_serve_with_models_in_the_wrong_roles(task, foreign, capsys):
    """`tether serve --model RM` or `--reward-model CAUSAL_LM`: refused at load, no banner."""
    base = task / "base_model"
    for args, needles in (([f"--model={foreign['rm']}"], (str(foreign["rm"]), "--model", "not a causal LM")),
                          ([f"--model={base}", f"--reward-model={base}"],
                           (str(base), "--reward-model", "no trained scalar head"))):
        code = main(["serve", "--port", "0", *args])
        captured = capsys.readouterr()
        assert_clean_error(code, captured.err, "serve", *needles)
        assert "on http://" not in captured.out


# --------------------------------------------------------------------------- device (run.device)


@pytest.mark.parametrize("stage", ["sft", "rm", "ppo"])
def test_cuda_without_cuda_is_one_paragraph(stage, task, tmp_path, capsys, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    out = tmp_path / "run"
    args = {"sft": lambda: sft_args(task, out, write_jsonl(tmp_path / "t.jsonl", good_sft())),
            "rm": lambda: rm_args(task, out, write_jsonl(tmp_path / "p.jsonl", good_prefs())),
            "ppo": lambda: ppo_args(task, out, write_jsonl(tmp_path / "q.jsonl", good_prompts()))}[stage]()
    code, err = cli(capsys, [*args, "run.device=cuda"])
    assert_clean_error(code, err, stage, "run.device", "cuda", "no CUDA device")
    assert not out.exists()
    code, err = cli(capsys, [*args, "run.device=tpu"])
    assert_clean_error(code, err, stage, "run.device", "expected auto, cpu, cuda, cuda:N or mps")
