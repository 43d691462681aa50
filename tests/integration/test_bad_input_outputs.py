"""Output paths and lengths are checked before the work, for every command that writes files
(docs/reliability.md, "second round", class 4): `tether pairs` used to sample every prompt and then die with a
FileNotFoundError traceback (``--out`` in a missing directory) or an IndexError (``--max-new-tokens``
past GPT-2's position table). And what a run writes about itself says what ran (class 9): a
length the model's context capped is shown capped in the model card, config.yaml and the dry run.

The rule (``tether.common.outputs``): an output *file* needs an existing, writable directory and must not
be a directory; an output *directory* is created with its parents, but must not be a file, lie
under one, or sit where this user cannot write. Each refusal is one `tether COMMAND: error:`
paragraph naming the flag or key, exit code 2, before any prompt file, tokenizer or model is read
(and before any run of demo, compare, iterate or sweep starts), and nothing is created.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

import tether.demo.compare
import tether.data
import tether.demo
import tether.feedback.iterate
import tether.feedback.store
import tether.models
import tether.plots.report
import tether.demo.sweep
from tether.cli import main

from bad_input_helpers import (
    assert_clean_error,
    good_prefs,
    good_prompts,
    good_sft,
    ppo_args,
    rm_args,
    sft_args,
    write_jsonl,
)

ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


class ReachedWeights(Exception):
    """A patched weight loader was reached: every check before it passed."""


def run_cli(capsys, argv: list[str]) -> tuple[int, str]:
    code = main(argv)
    return code, capsys.readouterr().err


@pytest.fixture
def no_work(monkeypatch):
    """Output errors come before any prompt file, tokenizer or model is read and before any
    command's work starts."""

    def forbid(module, name):
        def called(*args, **kwargs):
            raise AssertionError(f"{module.__name__}.{name} was called before the outputs were checked")

        monkeypatch.setattr(module, name, called)

    for name in ("load_causal_lm", "load_scalar_model", "load_tokenizer"):
        forbid(tether.models, name)
    forbid(tether.data, "load_records")
    forbid(tether.feedback.store, "load_pairs")
    forbid(tether.demo, "run_demo")
    forbid(tether.demo.compare, "compare_demo")
    forbid(tether.feedback.iterate, "iterate_demo")
    forbid(tether.demo.sweep, "run_sweep")
    forbid(tether.plots.report, "build_report")


@pytest.fixture
def no_weights(monkeypatch):
    """Length checks come after the configs and the tokenizer but before any weights."""

    def reached(*args, **kwargs):
        raise ReachedWeights()

    monkeypatch.setattr(tether.models, "load_causal_lm", reached)
    monkeypatch.setattr(tether.models, "load_scalar_model", reached)


@pytest.fixture
def unwritable(tmp_path) -> Path:
    """An existing directory this user cannot create files in: a read-only one, or for root (whom
    permission bits do not stop) /sys, which refuses new files to everybody."""
    if ROOT:
        if not Path("/sys").is_dir():
            pytest.skip("no /sys here, and root can write anywhere else")
        yield Path("/sys")
        return
    path = tmp_path / "read-only"
    path.mkdir()
    path.chmod(0o555)
    yield path
    path.chmod(0o755)


# --------------------------------------------------------------------------- output files

def _pairs(task, out):
    return ["pairs", "--policy", str(task / "base_model"), "--prompts", str(task / "eval_prompts.jsonl"),
            "--out", out, "--max-prompts", "2", "--max-new-tokens", "4"]


def _eval(task, out):
    base = str(task / "base_model")
    return ["eval", "--policy", base, "--reference", base, "--prompts", str(task / "eval_prompts.jsonl"),
            "--max-prompts", "2", "--out", out]


FILE_COMMANDS = {
    # name: (argv for an output file path, the flag named)
    "pairs": (_pairs, "--out"),
    "eval": (_eval, "--out"),
    "label": (lambda task, out: ["label", "--pairs", str(task / "pairs.jsonl"), "--out", out, "--port", "0"], "--out"),
    "label_export": (lambda task, out: ["label", "--pairs", str(task / "pairs.jsonl"), "--out", str(task / "l.jsonl"),
                                        "--stats", "--export", out], "--export"),
    "report": (lambda task, out: ["report", str(task), "--out", out], "--out"),
}


def file_case(case: str, tmp_path: Path, unwritable: Path) -> tuple[Path, tuple[str, ...]]:
    """(the output path, what the error says) for each way an output file cannot be written."""
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    return {
        "missing_dir": (tmp_path / "no-such-dir" / "out.jsonl", ("does not exist",)),
        "a_directory": (tmp_path, ("is a directory",)),
        "under_a_file": (a_file / "out.jsonl", (str(a_file), "is a file, not a directory")),
        "unwritable_dir": (unwritable / "out.jsonl", (str(unwritable), "cannot be written")),
    }[case]


@pytest.mark.parametrize("case", ["missing_dir", "a_directory", "under_a_file", "unwritable_dir"])
@pytest.mark.parametrize("command", sorted(FILE_COMMANDS))
def test_output_file_that_cannot_be_written(command, case, task, tmp_path, capsys, no_work, unwritable):
    argv_of, flag = FILE_COMMANDS[command]
    out, needles = file_case(case, tmp_path, unwritable)
    code, err = run_cli(capsys, argv_of(task, str(out)))
    assert_clean_error(code, err, command.split("_")[0], flag, *needles)
    assert not (tmp_path / "no-such-dir").exists()


@pytest.mark.skipif(ROOT, reason="root may write a read-only file")
@pytest.mark.parametrize("command", ["pairs", "label"])
def test_read_only_output_file(command, task, tmp_path, capsys, no_work):
    out = tmp_path / "out.jsonl"
    out.write_text("")
    out.chmod(0o444)
    argv_of, flag = FILE_COMMANDS[command]
    code, err = run_cli(capsys, argv_of(task, str(out)))
    assert_clean_error(code, err, command, flag, "read-only")


def test_report_default_out_in_an_unwritable_directory(unwritable, capsys, no_work):
    code, err = run_cli(capsys, ["report", str(unwritable)])
    assert_clean_error(code, err, "report", "--out is not given", "report.html", "give --out FILE")


# --------------------------------------------------------------------------- output directories

@pytest.fixture
def demo_like(tmp_path) -> Path:
    """A directory with task/, sft/ and rm/ (all `--from` checks look at)."""
    path = tmp_path / "demo"
    for part in ("task", "sft", "rm"):
        (path / part).mkdir(parents=True)
    return path


DIR_COMMANDS = {
    # name: (argv for an output directory, the flag or key named)
    "demo": (lambda task, demo, out: ["demo", "--out", out], "--out"),
    "compare": (lambda task, demo, out: ["compare", "--demo", "--from", str(demo), "--out", out], "--out"),
    "iterate": (lambda task, demo, out: ["iterate", "--demo", "--from", str(demo), "--out", out], "--out"),
    "sweep": (lambda task, demo, out: ["sweep", "--demo", out], "--demo"),
    "sft": (lambda task, demo, out: sft_args(task, Path(out), write_jsonl(demo / "sft.jsonl", good_sft())),
            "run.out"),
}


def dir_case(case: str, tmp_path: Path, unwritable: Path) -> tuple[Path, tuple[str, ...]]:
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    return {
        "a_file": (a_file, ("is a file, not a directory",)),
        "under_a_file": (a_file / "sub" / "dir", (str(a_file), "is a file, not a directory")),
        "unwritable_parent": (unwritable / "dir", (str(unwritable), "cannot be created")),
    }[case]


@pytest.mark.parametrize("case", ["a_file", "under_a_file", "unwritable_parent"])
@pytest.mark.parametrize("command", sorted(DIR_COMMANDS))
def test_output_dir_that_cannot_be_made(command, case, task, demo_like, tmp_path, capsys, no_work, unwritable):
    argv_of, flag = DIR_COMMANDS[command]
    out, needles = dir_case(case, tmp_path, unwritable)
    code, err = run_cli(capsys, argv_of(task, demo_like, str(out)))
    assert_clean_error(code, err, command, flag, *needles)
    assert not out.is_dir()


def test_output_dirs_are_created_with_their_parents(tmp_path):
    """A missing run directory (and its parents) is what a first run wants: it is created, not refused."""
    from tether.common.outputs import check_output_dir

    out = tmp_path / "runs" / "new" / "demo"
    assert check_output_dir(out, "--out") == out and not (tmp_path / "runs").exists()  # checked, not made


# --------------------------------------------------------------------------- pairs: lengths


def pairs_args(model: Path, prompts: Path, out: Path, *extra: str) -> list[str]:
    return ["pairs", "--policy", str(model), "--prompts", str(prompts), "--out", str(out), "--max-prompts", "2",
            *extra]


@pytest.mark.parametrize("max_new_tokens", ["32", "1000"])
def test_pairs_max_new_tokens_past_gpt2s_context(max_new_tokens, foreign, task, tmp_path, capsys, no_weights,
                                                 monkeypatch):
    def no_tokenizer(*args, **kwargs):
        raise AssertionError("the configs alone tell")

    monkeypatch.setattr(tether.models, "load_tokenizer", no_tokenizer)
    out = tmp_path / "pairs.jsonl"
    code, err = run_cli(capsys, pairs_args(foreign["gpt2"], task / "eval_prompts.jsonl", out,
                                           "--max-new-tokens", max_new_tokens))
    assert_clean_error(code, err, "pairs", "--max-new-tokens", f"got {max_new_tokens}", "32-token context",
                       "the policy", str(foreign["gpt2"]))
    assert not out.exists()


def test_pairs_smallest_context_is_the_second_policys(foreign, task, tmp_path, capsys, no_weights):
    argv = pairs_args(foreign["qwen2"], task / "eval_prompts.jsonl", tmp_path / "p.jsonl", "--max-new-tokens", "40",
                      "--strategy", "checkpoints", "--policy-b", str(foreign["gpt2"]))
    code, err = run_cli(capsys, argv)
    assert_clean_error(code, err, "pairs", "--max-new-tokens", "32-token context", "second policy")


def test_pairs_prompt_plus_new_tokens_past_the_context(foreign, tmp_path, capsys, no_weights):
    prompts = write_jsonl(tmp_path / "prompts.jsonl", good_prompts(3))
    code, err = run_cli(capsys, pairs_args(foreign["gpt2"], prompts, tmp_path / "p.jsonl", "--max-new-tokens", "30"))
    assert_clean_error(code, err, "pairs", str(prompts), "row 1", "--max-new-tokens is 30", "32-token context")


def test_pairs_on_gpt2_within_its_context_writes_the_pairs(foreign, tmp_path, capsys):
    prompts = write_jsonl(tmp_path / "prompts.jsonl", good_prompts(2))
    out = tmp_path / "pairs.jsonl"
    code, err = run_cli(capsys, pairs_args(foreign["gpt2"], prompts, out, "--max-new-tokens", "8",
                                           "--temperature", "2.0"))
    assert code == 0, err
    assert out.is_file() and not (tmp_path / "pairs.jsonl.tmp").exists()


# --------------------------------------------------------------------------- bench: lengths


@pytest.mark.parametrize("length", ["0", "1000", "100000"])
def test_bench_response_length_past_the_context(length, capsys, monkeypatch):
    import tether.distributed

    monkeypatch.setattr(tether.distributed, "DistributedSession",
                        lambda *a, **k: (_ for _ in ()).throw(AssertionError("bench started")))
    code, err = run_cli(capsys, ["bench", "--size", "micro", "--response-length", length])
    assert_clean_error(code, err, "bench", "--response-length", f"got {length}", "1024-position context")


# --------------------------------------------------------------------------- what ran: capped lengths


CAPPED = {
    # stage: (argv(task, out, data dir), the capped key, the value that runs, the configured value)
    "sft": (lambda task, out, d: sft_args(task, out, write_jsonl(d / "sft.jsonl", good_sft()), "data.max_length=512"),
            "data.max_length", 32, 512),
    "rm": (lambda task, out, d: rm_args(task, out, write_jsonl(d / "prefs.jsonl", good_prefs()), "data.max_length=512"),
           "data.max_length", 32, 512),
    "ppo": (lambda task, out, d: [*ppo_args(task, out, write_jsonl(d / "prompts.jsonl", good_prompts())),
                                  "rollout.max_new_tokens=8", "rollout.max_prompt_length=256"],
            "rollout.max_prompt_length", 24, 256),
}


@pytest.mark.parametrize("stage", sorted(CAPPED))
def test_card_config_and_dry_run_say_what_ran(stage, task, foreign, tmp_path, capsys):
    """On GPT-2's 32 positions a configured length is capped: the model card shows the capped value
    and why, config.yaml keeps the configured one (for --resume and reruns) under a comment saying
    what ran, and the dry run says so before the run."""
    argv_of, key, ran, configured = CAPPED[stage]
    out = tmp_path / "run"
    argv = [*argv_of(task, out, tmp_path), f"model.name_or_path={foreign['gpt2']}"]
    because = f"capped from {key}={configured}: the context of the model '{foreign['gpt2']}' is 32 positions"
    assert main([*argv, "--dry-run"]) == 0
    plan = capsys.readouterr().out
    assert because in plan and f"{ran} tokens" in plan, plan
    assert main(argv) == 0, capsys.readouterr().err
    card = (out / "README.md").read_text(encoding="utf-8")
    assert f"| `{key}` | {ran} ({because}" in card and f"| `{key}` | {configured} |" not in card
    text = (out / "config.yaml").read_text(encoding="utf-8")
    assert f"#   {key}: {ran} ({because}" in text.split("\nstage:")[0]  # the comment above the config
    section, name = key.split(".")
    assert yaml.safe_load(text)[section][name] == configured
    assert main(argv) == 0, capsys.readouterr().err  # the same command again: still the same run


def test_an_uncapped_length_is_shown_as_configured(task, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(sft_args(task, out, write_jsonl(tmp_path / "sft.jsonl", good_sft()))) == 0, capsys.readouterr().err
    assert "| `data.max_length` | 32 |" in (out / "README.md").read_text(encoding="utf-8")
    assert (out / "config.yaml").read_text(encoding="utf-8").startswith("stage:")
