"""A run that trains nothing says so within its first iterations: online DPO and rejection
sampling whose every score ties (or never reaches the bar) form no pair / keep no winner, and the
`nothing_to_learn` alarm fires at the second iteration, on stderr and in the run's alarms file,
naming the cause; with `health.stop_on` it stops the run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bad_input_helpers import cli

HERE = Path(__file__).parent


@pytest.fixture(autouse=True)
def reward_module(monkeypatch):
    monkeypatch.syspath_prepend(str(HERE))


def args(command, task, out, *extra):
    return [command, f"run.out={out}", "run.progress=false", "run.threads=1", f"model.name_or_path={task / 'base_model'}",
            f"prompts={task / 'ppo_prompts.jsonl'}", "reward.callable=reward_fns:constant", "rl.iterations=3",
            "rollout.batch_size=4", "rl.minibatch_size=8", "rollout.max_new_tokens=4", "reward.eos_penalty=null",
            "run.log_every=1", *extra]


@pytest.mark.parametrize("command, extra, cause", [
    ("online_dpo", (), "online DPO formed no pair"),
    ("rs", ("selection.min_score=1.0",), "rejection sampling kept no response"),
])
def test_a_run_with_nothing_to_learn_is_flagged_at_its_second_iteration(command, extra, cause, tiny_task, tmp_path,
                                                                         capsys):
    out = tmp_path / command
    code, err = cli(capsys, args(command, tiny_task["dir"], out, *extra))
    assert code == 0, err  # an alarm, not an error: health.stop_on decides
    assert "nothing_to_learn" in err and cause in err, err
    alarms = [json.loads(line) for line in (out / "alarms.jsonl").read_text().splitlines()]
    flagged = [a for a in alarms if a["name"] == "nothing_to_learn"]
    assert flagged and flagged[0]["iteration"] == 2 and flagged[0]["level"] == "alarm"


def test_nothing_to_learn_in_stop_on_ends_the_run_early(tiny_task, tmp_path, capsys):
    out = tmp_path / "stopped"
    code, err = cli(capsys, args("online_dpo", tiny_task["dir"], out, "rl.iterations=6",
                                 "health.stop_on=[nothing_to_learn]"))
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert max(r["step"] for r in rows) == 2, (code, err)
    assert "nothing_to_learn" in err
