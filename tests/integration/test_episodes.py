"""Multi-turn episodes end to end: every registered algorithm trains on scripted three-turn
episodes of the tiny task through its command, the trainer scores exactly the tokens the engine
sampled (``rollout/token_mismatch`` 0 on lean and hf), and bad prompt rows are refused before
training, naming the file and the row."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tether.algorithms import ALGORITHMS as REGISTERED
from tether.cli import main
from tether.metrics.logger import read_metrics

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent


@pytest.fixture(autouse=True)
def reward_module(monkeypatch):
    monkeypatch.syspath_prepend(str(HERE))


def scripted_prompts(task: Path, out: Path, n: int = 16) -> Path:
    """Rows of the tiny task's prompts, each with two follow-up questions: three assistant turns."""
    rows = [json.loads(line) for line in (task / "ppo_prompts.jsonl").read_text().splitlines()]
    with open(out, "w") as f:
        for i, row in enumerate(rows[:n]):
            follow = [{"role": "user", "content": rows[(i + k) % len(rows)]["prompt"]} for k in (1, 2)]
            f.write(json.dumps({"prompt": row["prompt"], "follow_ups": follow}) + "\n")
    return out


def episode_args(trained, out, prompts, *extra):
    return [f"run.out={out}", "run.progress=false", "run.log_every=1", "run.seed=5", "run.threads=1",
            f"model.name_or_path={trained['sft']}", f"prompts={prompts}", "reward.callable=reward_fns:brief",
            "rl.iterations=1", "rollout.batch_size=2", "rl.epochs=1", "rollout.max_new_tokens=6",
            "environment.kind=scripted", "environment.max_turns=3", "environment.max_tokens=40", "rl.on_invariant=error",
            *extra]


@pytest.mark.parametrize("name", list(REGISTERED))
def test_every_registered_algorithm_trains_on_three_turn_episodes(name, trained, tmp_path):
    spec = REGISTERED[name]
    prompts = scripted_prompts(trained["task"], tmp_path / "episodes.jsonl")
    group = max(2, spec.min_group_size)
    extra = [f"group.size={group}", f"rl.minibatch_size={2 * group}", "rollout.capture_logprobs=true"]
    if spec.needs_critic:
        extra.append("critic.init=policy")
    assert main([name, *episode_args(trained, tmp_path / name, prompts, *extra)]) == 0
    row = next(r for r in read_metrics(tmp_path / name / "metrics.jsonl") if "objective/score" in r)
    assert row["env/turns"] > 1 and 0 < row["env/observation_share"] < 1
    assert row["rollout/token_mismatch"] == 0.0


@pytest.mark.parametrize("engine", ["lean", "hf"])
def test_the_trainer_scores_exactly_the_sampled_tokens(engine, trained, tmp_path):
    """Episodes of three turns: the actor's log-probs of every sampled token equal the engine's
    (both sample from the actor's weights), so nothing was re-tokenised."""
    prompts = scripted_prompts(trained["task"], tmp_path / "episodes.jsonl")
    out = tmp_path / engine
    assert main(["grpo", *episode_args(trained, out, prompts, f"rollout.engine={engine}", "group.size=2",
                                       "rl.minibatch_size=4", "rl.iterations=2", "rollout.capture_logprobs=true")]) == 0
    rows = [r for r in read_metrics(out / "metrics.jsonl") if "objective/score" in r]
    assert len(rows) == 2
    for row in rows:
        assert row["env/turns"] == 3.0, row  # two follow-ups: three assistant turns, none truncated
        assert row["env/truncated"] == 0.0
        assert row["rollout/token_mismatch"] == 0.0 and row["rollout/logprob_diff_max"] < 1e-4


def test_a_bad_row_is_refused_before_training_naming_the_file_and_row(trained, tmp_path, capsys):
    prompts = scripted_prompts(trained["task"], tmp_path / "episodes.jsonl", n=4)
    lines = prompts.read_text().splitlines()
    lines[2] = json.dumps({"prompt": "what is 1 + 1 ?", "follow_ups": "not a list"})
    prompts.write_text("\n".join(lines) + "\n")
    out = tmp_path / "bad"
    assert main(["grpo", *episode_args(trained, out, prompts, "group.size=2", "rl.minibatch_size=4")]) == 2
    err = capsys.readouterr().err
    assert "episodes.jsonl" in err and "row 3" in err and "follow_ups" in err
    assert not (out / "model.safetensors").exists()


def test_environment_settings_are_checked(trained, tmp_path, capsys):
    prompts = scripted_prompts(trained["task"], tmp_path / "episodes.jsonl", n=4)
    base = episode_args(trained, tmp_path / "x", prompts, "group.size=2", "rl.minibatch_size=4")
    assert main(["grpo", *base, "environment.tools=[os:getcwd]"]) == 2
    assert "environment.tools" in capsys.readouterr().err  # the scripted kind runs no tools
    assert main(["grpo", *base, "environment.kind=nope"]) == 2
    assert "environment.kind" in capsys.readouterr().err


def test_a_sigkilled_episode_run_resumes_bit_for_bit(tiny_task, tmp_path):
    """PPO on three-turn episodes, SIGKILLed once its first checkpoint is complete, then resumed:
    the metrics and the weights are those of the uninterrupted run (an episode lives inside one
    iteration, and every draw of an iteration derives from the run's seed and its number)."""
    from tether.config import RLConfig, load_config
    from tether.loops.rl_run import run_rl
    from tests.integration.test_resume import _cli, comparable, kill_at_first_checkpoint, ppo_overrides, same_weights

    prompts = scripted_prompts(tiny_task["dir"], tmp_path / "episodes.jsonl")

    def overrides(out):
        base = [o for o in ppo_overrides(tiny_task["dir"], out) if not o.startswith(("prompts=", "rollout.max_new"))]
        return [*base, f"prompts={prompts}", "rollout.max_new_tokens=6", "environment.kind=scripted",
                "environment.max_turns=3", "environment.max_tokens=40"]

    reference = tmp_path / "reference"
    run_rl(load_config(RLConfig, None, overrides(reference)))
    out = tmp_path / "run"
    kill_at_first_checkpoint(overrides(out), out)
    resumed = _cli(["ppo", "--resume", str(out)])
    assert resumed.returncode == 0, resumed.stderr
    assert comparable(out) == comparable(reference)
    assert same_weights(out, reference)
