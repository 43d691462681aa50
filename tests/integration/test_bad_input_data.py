"""Bad data through the real CLI (SFT demonstrations, preference pairs, PPO prompts): one
paragraph naming the file/row or key, exit code 2, and no output directory that looks
complete (docs/reliability.md: "never lose a run").

Skip-and-count cases (identical pairs with on_identical=skip, long prompts with
data.on_long=drop|truncate, PPO prompts over rollout.max_prompt_length) must succeed and
report the count in ``metrics.jsonl``. Every run is tiny (2 steps / 1 iteration).
"""

from __future__ import annotations

import json

import pytest

from tether.runs import MANIFEST

from bad_input_helpers import (
    LONG_PROMPT,
    assert_clean_error,
    assert_not_complete,
    cli,
    data_row,
    good_prefs,
    good_prompts,
    good_sft,
    kto_args,
    ppo_args,
    rm_args,
    sft_args,
    write_jsonl,
)


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


# --------------------------------------------------------------------------- KTO rows

KTO_GOOD = [{"prompt": f"what is {i} + 1 ?", "completion": f"the answer is {i + 1} .", "label": i % 2 == 0}
            for i in range(2)]
KTO_CASES = {
    # name: (rows (row 3 is the bad one), substrings the error must hold)
    "missing_label": ([*KTO_GOOD, {"prompt": "a", "completion": "b"}],
                      ("row 3", "'label'", "prompt, completion, label")),
    "label_not_boolean": ([*KTO_GOOD, {"prompt": "a", "completion": "b", "label": "yes"}],
                          ("row 3", "'label'", "JSON boolean", "'yes'")),
    "label_a_number": ([*KTO_GOOD, {"prompt": "a", "completion": "b", "label": 1}], ("row 3", "'label'", "number 1")),
    "pair_row_in_an_unpaired_file": ([*KTO_GOOD, good_prefs(1)[0]], ("row 3", "'completion'")),
    "unpaired_row_in_a_pair_file": ([*good_prefs(2), KTO_GOOD[0]], ("row 3", "'chosen'")),
    "misnamed_prompt": ([{"question": "a", "completion": "b", "label": True}], ("row 1", "'prompt'", "question")),
    "unknown_first_row": ([{"question": "a", "answer": "b"}], ("row 1", "no known schema", "label", "chosen")),
}


@pytest.mark.parametrize("case", sorted(KTO_CASES))
def test_kto_bad_rows(case, task, tmp_path, capsys):
    rows, needles = KTO_CASES[case]
    train = write_jsonl(tmp_path / "kto.jsonl", rows)
    out = tmp_path / "run"
    code, err = cli(capsys, kto_args(task, out, train))
    assert_clean_error(code, err, "kto", str(train), *needles)
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


