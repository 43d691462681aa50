"""Bad input through the real CLI: one paragraph naming the file/row or key, exit code 2, and
no output directory that looks complete (issue 5, "Never lose a run").

Skip-and-count cases (identical pairs with on_identical=skip, long prompts with
data.on_long=drop|truncate, PPO prompts over rollout.max_prompt_length) must succeed and
report the count in ``metrics.jsonl``. Every run is tiny (2 steps / 1 iteration).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from tether.cli import main
from tether.metrics.logger import read_metrics
from tether.runs import MANIFEST

# --------------------------------------------------------------------------- helpers


def write_jsonl(path: Path, rows: list) -> Path:
    """Rows as JSON lines; a str row is written verbatim, a bytes row as raw bytes."""
    data = b""
    for row in rows:
        if isinstance(row, bytes):
            data += row + b"\n"
        elif isinstance(row, str):
            data += row.encode("utf-8") + b"\n"
        else:
            data += json.dumps(row).encode("utf-8") + b"\n"
    path.write_bytes(data)
    return path


def good_sft(n: int = 8) -> list[dict]:
    return [{"prompt": f"what is {i} + 1 ?", "completion": f"the answer is {i + 1} ."} for i in range(n)]


def good_prefs(n: int = 8) -> list[dict]:
    return [{"prompt": f"what is {i} + 1 ?", "chosen": f"the answer is {i + 1} .", "rejected": "i do not know !"}
            for i in range(n)]


def good_prompts(n: int = 4) -> list[dict]:
    return [{"prompt": f"what is {i} + 2 ?"} for i in range(n)]


LONG_PROMPT = "what is " + " + ".join(["1"] * 60) + " ?"  # far over 32 tokens


def cli(capsys, argv: list[str]) -> tuple[int, str]:
    code = main(argv)
    err = capsys.readouterr().err
    return code, err


def sft_args(task: Path, out: Path, train: Path, *extra: str) -> list[str]:
    return ["sft", f"run.out={out}", "run.progress=false", "run.threads=1", "run.log_every=1",
            f"model.name_or_path={task / 'base_model'}", f"data.train={train}", "data.eval_size=0",
            "data.max_length=32", "optim.batch_size=4", "max_steps=2", *extra]


def rm_args(task: Path, out: Path, train: Path, *extra: str) -> list[str]:
    return ["rm", f"run.out={out}", "run.progress=false", "run.threads=1", "run.log_every=1",
            f"model.name_or_path={task / 'base_model'}", f"data.train={train}", "data.eval_size=0",
            "data.max_length=32", "optim.batch_size=4", "max_steps=2", "normalize=false", *extra]


def ppo_args(task: Path, out: Path, prompts: Path, *extra: str, reward: str | None = None) -> list[str]:
    reward_arg = reward or "reward.callable=tether.tasks.arith.judge:gold_reward"
    return ["ppo", f"run.out={out}", "run.progress=false", "run.threads=1",
            f"model.name_or_path={task / 'base_model'}", f"prompts={prompts}", reward_arg, "critic.init=policy",
            "ppo.iterations=1", "rollout.batch_size=2", "ppo.minibatch_size=2", "ppo.epochs=1",
            "rollout.max_new_tokens=4", "rollout.max_prompt_length=32", *extra]


def assert_clean_error(code: int, err: str, stage: str, *needles: str) -> str:
    """Exit code 2, one paragraph on stderr, no traceback, naming everything in ``needles``."""
    assert code == 2, err
    text = err.strip()
    assert "Traceback" not in text, text
    assert "\n\n" not in text, f"more than one paragraph:\n{text}"
    lines = [line for line in text.splitlines() if line.startswith(f"tether {stage}: error:")]
    assert len(lines) == 1, f"expected one 'tether {stage}: error:' line:\n{text}"
    for needle in needles:
        assert needle in lines[0], f"{needle!r} not in: {lines[0]}"
    return lines[0]


def assert_not_complete(out: Path) -> None:
    assert not out.exists() or not (out / MANIFEST).exists(), f"{out} looks like a complete run"
    if out.exists():
        assert not list(out.rglob(MANIFEST)), f"{out} holds a complete checkpoint"


def data_row(out: Path, key: str):
    rows = [r for r in read_metrics(out / "metrics.jsonl") if key in r]
    assert rows, f"no metrics row with {key}"
    return rows[0][key]


@pytest.fixture(scope="module")
def task(tiny_task) -> Path:
    return tiny_task["dir"]


@pytest.fixture(scope="module")
def no_template_model(task, tmp_path_factory) -> Path:
    """The base model with its chat template removed."""
    path = tmp_path_factory.mktemp("no-template") / "model"
    shutil.copytree(task / "base_model", path)
    (path / "chat_template.jinja").unlink(missing_ok=True)
    cfg_path = path / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg.pop("chat_template", None)
    cfg_path.write_text(json.dumps(cfg))
    return path


@pytest.fixture(scope="module")
def two_output_rm(task, tmp_path_factory) -> Path:
    """A sequence-classification checkpoint whose head has two outputs."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    path = tmp_path_factory.mktemp("rm2") / "rm"
    model = AutoModelForSequenceClassification.from_pretrained(task / "base_model", num_labels=2)
    model.save_pretrained(path)
    AutoTokenizer.from_pretrained(task / "base_model").save_pretrained(path)
    return path


# --------------------------------------------------------------------------- SFT data

SFT_CASES = {
    # name: (rows (row 3 is the bad one), substrings the error must hold)
    "malformed_json": (['{"prompt": "a", "completion": "b"}', '{"prompt": "a", "completion": "b"}',
                        '{"prompt": "a", "completion": '], ("line 3", "not valid JSON")),
    "not_an_object": ([*good_sft(2), "[1, 2]"], ("line 3", "JSON object")),
    "misspelled_column": ([*good_sft(2), {"promt": "a", "completion": "b"}], ("row 3", "'prompt'", "promt")),
    "missing_column": ([*good_sft(2), {"prompt": "a"}], ("row 3", "'completion'")),
    "unknown_schema": ([*good_sft(2), {"mesages": [{"role": "user", "content": "a"}]}],
                       ("row 3", "no known schema", "messages")),
    "wrong_type": ([*good_sft(2), {"prompt": "a", "completion": 5}], ("row 3", "'completion'", "number")),
    "wrong_type_prompt": ([*good_sft(2), {"prompt": {"x": 1}, "completion": "b"}], ("row 3", "'prompt'")),
    "bad_message": ([*good_sft(2), {"messages": [{"role": "user"}, {"role": "assistant", "content": "b"}]}],
                    ("row 3", "messages[0]", "content")),
    "empty_response": ([*good_sft(2), {"prompt": "a", "completion": ""}], ("row 3", "'completion'", "empty")),
    "whitespace_response": ([*good_sft(2), {"prompt": "a", "completion": " \n\t "}],
                            ("row 3", "'completion'", "whitespace")),
    "empty_assistant_message": ([*good_sft(2), {"messages": [{"role": "user", "content": "a"},
                                                             {"role": "assistant", "content": "  "}]}],
                                ("row 3", "messages[1].content")),
    "non_utf8": ([*good_sft(2), b'{"prompt": "a\xff\xfe", "completion": "b"}'], ("line 3", "UTF-8")),
    "unpaired_surrogate": ([*good_sft(2), '{"prompt": "a\\ud800", "completion": "b"}'], ("line 3", "surrogate")),
    "empty_dataset": ([], ("empty",)),
    "whitespace_only_dataset": (["", "   ", "\t"], ("empty",)),
}


@pytest.mark.parametrize("case", sorted(SFT_CASES))
def test_sft_bad_data(case, task, tmp_path, capsys):
    rows, needles = SFT_CASES[case]
    train = write_jsonl(tmp_path / "train.jsonl", rows)
    out = tmp_path / "run"
    code, err = cli(capsys, sft_args(task, out, train))
    assert_clean_error(code, err, "sft", str(train), *needles)
    assert_not_complete(out)


def test_sft_bad_eval_file_is_named(task, tmp_path, capsys):
    train = write_jsonl(tmp_path / "train.jsonl", good_sft())
    evals = write_jsonl(tmp_path / "eval.jsonl", [*good_sft(1), {"prompt": "a", "completion": None}])
    out = tmp_path / "run"
    code, err = cli(capsys, sft_args(task, out, train, f"data.eval={evals}"))
    assert_clean_error(code, err, "sft", str(evals), "row 2", "'completion'", "null")
    assert_not_complete(out)


def test_sft_bad_json_list_file(task, tmp_path, capsys):
    train = tmp_path / "train.json"
    train.write_text(json.dumps([*good_sft(2), "not a row"]))
    out = tmp_path / "run"
    code, err = cli(capsys, sft_args(task, out, train))
    assert_clean_error(code, err, "sft", str(train), "row 3")
    assert_not_complete(out)


def test_sft_missing_data_file(task, tmp_path, capsys):
    train = tmp_path / "nope.jsonl"
    out = tmp_path / "run"
    code, err = cli(capsys, sft_args(task, out, train))
    assert_clean_error(code, err, "sft", str(train), "no such file")
    assert_not_complete(out)


# --------------------------------------------------------------------------- long prompts


def test_sft_long_prompt_error(task, tmp_path, capsys):
    train = write_jsonl(tmp_path / "train.jsonl", [*good_sft(4), {"prompt": LONG_PROMPT, "completion": "b"}])
    out = tmp_path / "run"
    code, err = cli(capsys, sft_args(task, out, train, "data.on_long=error"))
    assert_clean_error(code, err, "sft", str(train), "row 5", "max_length 32", "on_long")
    assert_not_complete(out)


@pytest.mark.parametrize("mode", ["drop", "truncate"])
def test_sft_long_prompt_skipped_and_counted(mode, task, tmp_path, capsys):
    rows = [*good_sft(6), {"prompt": LONG_PROMPT, "completion": "b"}, {"prompt": LONG_PROMPT, "completion": "c"}]
    train = write_jsonl(tmp_path / "train.jsonl", rows)
    out = tmp_path / "run"
    code, err = cli(capsys, sft_args(task, out, train, f"data.on_long={mode}"))
    assert code == 0, err
    assert (out / MANIFEST).exists()
    assert data_row(out, "data/dropped_long") == 2
    assert data_row(out, "data/train_examples") == 6


def test_sft_all_rows_too_long(task, tmp_path, capsys):
    train = write_jsonl(tmp_path / "train.jsonl", [{"prompt": LONG_PROMPT, "completion": "b"}] * 3)
    out = tmp_path / "run"
    code, err = cli(capsys, sft_args(task, out, train, "data.on_long=drop"))
    assert_clean_error(code, err, "sft", str(train), "no usable training examples")
    assert_not_complete(out)


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
                              "ppo.minibatch_size=3": ("ppo.minibatch_size", "divide"),
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


# --------------------------------------------------------------------------- preference data


def test_rm_config_out_of_range(task, tmp_path, capsys):
    train = write_jsonl(tmp_path / "prefs.jsonl", good_prefs())
    out = tmp_path / "run"
    for override, needles in {"on_identical=maybe": ("on_identical", "skip"),
                              "head_init_std=0": ("head_init_std", "> 0"),
                              "data.eval_size=-1": ("data.eval_size", ">= 0")}.items():
        code, err = cli(capsys, [*rm_args(task, out, train), override])
        assert_clean_error(code, err, "rm", *needles)
    assert not out.exists()


def test_rm_identical_pair_error(task, tmp_path, capsys):
    rows = [*good_prefs(3), {"prompt": "a", "chosen": "same .", "rejected": "same ."}]
    train = write_jsonl(tmp_path / "prefs.jsonl", rows)
    out = tmp_path / "run"
    code, err = cli(capsys, rm_args(task, out, train, "on_identical=error"))
    assert_clean_error(code, err, "rm", str(train), "row 4", "'chosen'", "'rejected'", "on_identical")
    assert_not_complete(out)


def test_rm_identical_pairs_skipped_and_counted(task, tmp_path, capsys):
    rows = [*good_prefs(6), {"prompt": "a", "chosen": "same .", "rejected": "same ."},
            {"prompt": "b", "chosen": "x", "rejected": "x"}]
    train = write_jsonl(tmp_path / "prefs.jsonl", rows)
    out = tmp_path / "run"
    code, err = cli(capsys, rm_args(task, out, train, "on_identical=skip"))
    assert code == 0, err
    assert (out / MANIFEST).exists()
    assert data_row(out, "data/identical_skipped") == 2
    assert data_row(out, "data/train_pairs") == 6


def test_rm_all_pairs_identical(task, tmp_path, capsys):
    train = write_jsonl(tmp_path / "prefs.jsonl", [{"prompt": "a", "chosen": "x", "rejected": "x"}] * 3)
    out = tmp_path / "run"
    code, err = cli(capsys, rm_args(task, out, train, "on_identical=skip"))
    assert_clean_error(code, err, "rm", str(train), "all 3 rows were skipped")
    assert_not_complete(out)


PREF_CASES = {
    "missing_column": ({"prompt": "a", "chosen": "b"}, ("row 3", "'rejected'")),
    "misspelled_column": ({"prompt": "a", "chosen": "b", "rejectd": "c"}, ("row 3", "'rejected'", "rejectd")),
    "wrong_type": ({"prompt": "a", "chosen": ["b"], "rejected": "c"}, ("row 3", "'chosen")),
    "empty_response": ({"prompt": "a", "chosen": "b", "rejected": "   "}, ("row 3", "'rejected'", "whitespace")),
    "hh_without_shared_prefix": ({"chosen": "\n\nHuman: a\n\nAssistant: b", "rejected": "c"},
                                 ("row 3", "'chosen'", "HH-RLHF")),
}


@pytest.mark.parametrize("case", sorted(PREF_CASES))
def test_rm_bad_pairs(case, task, tmp_path, capsys):
    row, needles = PREF_CASES[case]
    train = write_jsonl(tmp_path / "prefs.jsonl", [*good_prefs(2), row])
    out = tmp_path / "run"
    code, err = cli(capsys, rm_args(task, out, train))
    assert_clean_error(code, err, "rm", str(train), *needles)
    assert_not_complete(out)


def test_rm_long_prompt_dropped_and_counted(task, tmp_path, capsys):
    rows = [*good_prefs(6), {"prompt": LONG_PROMPT, "chosen": "b", "rejected": "c"}]
    train = write_jsonl(tmp_path / "prefs.jsonl", rows)
    out = tmp_path / "run"
    code, err = cli(capsys, rm_args(task, out, train, "data.on_long=drop"))
    assert code == 0, err
    assert data_row(out, "data/dropped_long") == 1
    code, err = cli(capsys, rm_args(task, tmp_path / "run2", train, "data.on_long=error"))
    assert_clean_error(code, err, "rm", str(train), "row 7", "max_length")
    assert_not_complete(tmp_path / "run2")


def test_rm_bad_margin_field(task, tmp_path, capsys):
    train = write_jsonl(tmp_path / "prefs.jsonl", [{**r, "m": 1.0} for r in good_prefs(3)]
                        + [{**good_prefs(1)[0], "m": "big"}])
    out = tmp_path / "run"
    code, err = cli(capsys, rm_args(task, out, train, "margin_field=m"))
    assert_clean_error(code, err, "rm", str(train), "row 4", "'m'", "number")
    assert_not_complete(out)


# --------------------------------------------------------------------------- PPO prompts, models


PROMPT_CASES = {
    "malformed_json": (['{"prompt": "a"}', '{"prompt": "b"}', '{"prompt": '], ("line 3", "not valid JSON")),
    "misspelled_column": ([*good_prompts(2), {"promt": "a"}], ("row 3", "promt", "prompt")),
    "wrong_type": ([*good_prompts(2), {"prompt": 7}], ("row 3", "'prompt'", "number")),
    "empty_prompt": ([*good_prompts(2), {"prompt": "  "}], ("row 3", "'prompt'", "whitespace")),
    "non_utf8": ([*good_prompts(2), b'{"prompt": "\xc3\x28"}'], ("line 3", "UTF-8")),
    "empty_dataset": ([], ("empty",)),
}


@pytest.mark.parametrize("case", sorted(PROMPT_CASES))
def test_ppo_bad_prompts(case, task, tmp_path, capsys):
    rows, needles = PROMPT_CASES[case]
    prompts = write_jsonl(tmp_path / "prompts.jsonl", rows)
    out = tmp_path / "run"
    code, err = cli(capsys, ppo_args(task, out, prompts))
    assert_clean_error(code, err, "ppo", str(prompts), *needles)
    assert_not_complete(out)


def test_ppo_long_prompts_dropped_and_counted(task, tmp_path, capsys):
    prompts = write_jsonl(tmp_path / "prompts.jsonl", [*good_prompts(3), {"prompt": LONG_PROMPT}])
    out = tmp_path / "run"
    code, err = cli(capsys, ppo_args(task, out, prompts))
    assert code == 0, err
    assert (out / MANIFEST).exists()
    assert data_row(out, "data/dropped_long") == 1
    assert data_row(out, "data/prompts") == 3


def test_ppo_all_prompts_too_long(task, tmp_path, capsys):
    prompts = write_jsonl(tmp_path / "prompts.jsonl", [{"prompt": LONG_PROMPT}] * 2)
    out = tmp_path / "run"
    code, err = cli(capsys, ppo_args(task, out, prompts))
    assert_clean_error(code, err, "ppo", str(prompts), "rollout.max_prompt_length")
    assert_not_complete(out)


def test_ppo_model_path_does_not_exist(task, tmp_path, capsys):
    prompts = write_jsonl(tmp_path / "prompts.jsonl", good_prompts())
    out = tmp_path / "run"
    missing = tmp_path / "no-such-sft"
    code, err = cli(capsys, [*ppo_args(task, out, prompts), f"model.name_or_path={missing}"])
    assert_clean_error(code, err, "ppo", str(missing), "does not exist")
    assert_not_complete(out)
    missing_rm = tmp_path / "no-such-rm"
    code, err = cli(capsys, ppo_args(task, out, prompts, reward=f"reward.models=[{missing_rm}]"))
    assert_clean_error(code, err, "ppo", str(missing_rm), "does not exist")
    assert_not_complete(out)


def test_ppo_reward_head_with_two_outputs(task, two_output_rm, tmp_path, capsys):
    prompts = write_jsonl(tmp_path / "prompts.jsonl", good_prompts())
    out = tmp_path / "run"
    code, err = cli(capsys, ppo_args(task, out, prompts, reward=f"reward.models=[{two_output_rm}]"))
    assert_clean_error(code, err, "ppo", str(two_output_rm), "2 outputs", "num_labels=1")
    assert_not_complete(out)


def test_ppo_chat_template_always_needs_one(task, no_template_model, tmp_path, capsys):
    prompts = write_jsonl(tmp_path / "prompts.jsonl", good_prompts())
    out = tmp_path / "run"
    code, err = cli(capsys, [*ppo_args(task, out, prompts), f"model.name_or_path={no_template_model}",
                             "model.chat_template=always"])
    assert_clean_error(code, err, "ppo", str(no_template_model), "no chat template")
    assert_not_complete(out)


def test_ppo_chat_prompts_need_a_chat_template(task, no_template_model, tmp_path, capsys):
    prompts = write_jsonl(tmp_path / "prompts.jsonl", [{"prompt": [{"role": "user", "content": "a"}]}] * 2)
    out = tmp_path / "run"
    code, err = cli(capsys, [*ppo_args(task, out, prompts), f"model.name_or_path={no_template_model}"])
    assert_clean_error(code, err, "ppo", str(no_template_model), "no chat template")
    assert_not_complete(out)


def test_ppo_bad_reward_callable(task, tmp_path, capsys):
    prompts = write_jsonl(tmp_path / "prompts.jsonl", good_prompts())
    out = tmp_path / "run"
    code, err = cli(capsys, ppo_args(task, out, prompts, reward="reward.callable=no_such_module_xyz:fn"))
    assert_clean_error(code, err, "ppo", "no_such_module_xyz")
    assert_not_complete(out)


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
