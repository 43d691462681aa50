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
    from stage_helpers import without_reward  # here: tests/on_vllm imports this module from elsewhere

    spec = REGISTERED[name]
    prompts = scripted_prompts(trained["task"], tmp_path / "episodes.jsonl")
    group = max(2, spec.min_group_size)
    extra = [f"group.size={group}", f"rl.minibatch_size={2 * group}", "rollout.capture_logprobs=true"]
    if spec.needs_critic:
        extra.append("critic.init=policy")
    assert main([name, *without_reward(spec, trained, episode_args(trained, tmp_path / name, prompts, *extra))]) == 0
    row = next(r for r in read_metrics(tmp_path / name / "metrics.jsonl") if "objective/score" in r)
    assert row["env/turns"] > 1 and 0 < row["env/observation_share"] < 1
    assert row["rollout/token_mismatch"] == 0.0


@pytest.mark.parametrize("engine, captured", [("lean", "true"), ("hf", "false")])
def test_the_trainer_scores_exactly_the_sampled_tokens(engine, captured, tmp_path, trained):
    """Episodes of three turns: the actor's log-probs of every sampled token, from a forward over
    the whole episode, equal the engine's from its decode steps (both sample from the actor's
    weights), so nothing was re-tokenised. With rollout.capture_logprobs the actor takes pi_old from
    the engine, and the check runs a forward of its own (timing/token_check)."""
    prompts = scripted_prompts(trained["task"], tmp_path / "episodes.jsonl")
    out = tmp_path / engine
    assert main(["grpo", *episode_args(trained, out, prompts, f"rollout.engine={engine}", "group.size=2",
                                       "rl.minibatch_size=4", "rl.iterations=2",
                                       f"rollout.capture_logprobs={captured}")]) == 0
    rows = [r for r in read_metrics(out / "metrics.jsonl") if "objective/score" in r]
    assert len(rows) == 2
    for row in rows:
        assert row["env/turns"] == 3.0, row  # two follow-ups: three assistant turns, none truncated
        assert row["env/truncated"] == 0.0
        assert row["rollout/token_mismatch"] == 0.0 and row["rollout/logprob_diff_max"] < 1e-4
        assert ("timing/token_check" in row) == (captured == "true")


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


@pytest.mark.parametrize("staleness", [0, 1])
def test_a_sigkilled_episode_run_resumes_bit_for_bit(staleness, tiny_task, tmp_path):
    """PPO on three-turn episodes, SIGKILLed once its first checkpoint is complete, then resumed:
    the metrics and the weights are those of the uninterrupted run (an episode lives inside one
    iteration, and every draw of an iteration derives from the run's seed and its number). With
    rollout.max_staleness=1 a worker process samples the next iteration's episodes while this one
    trains: the checkpoint keeps those in flight, and the resumed run trains on them."""
    from tether.config import RLConfig, load_config
    from tether.loops.rl_run import run_rl
    from tests.integration.test_resume import _cli, comparable, kill_at_first_checkpoint, ppo_overrides, same_weights

    prompts = scripted_prompts(tiny_task["dir"], tmp_path / "episodes.jsonl")

    def overrides(out):
        base = [o for o in ppo_overrides(tiny_task["dir"], out) if not o.startswith(("prompts=", "rollout.max_new"))]
        return [*base, f"prompts={prompts}", "rollout.max_new_tokens=6", "environment.kind=scripted",
                "environment.max_turns=3", "environment.max_tokens=40", f"rollout.max_staleness={staleness}"]

    reference = tmp_path / "reference"
    run_rl(load_config(RLConfig, None, overrides(reference)))
    out = tmp_path / "run"
    kill_at_first_checkpoint(overrides(out), out)
    resumed = _cli(["ppo", "--resume", str(out)])
    assert resumed.returncode == 0, resumed.stderr
    assert comparable(out) == comparable(reference)
    assert same_weights(out, reference)
    rows = [r for r in read_metrics(reference / "metrics.jsonl") if "env/turns" in r]
    assert rows and all(r["env/turns"] > 1 for r in rows)
    if staleness:  # the later iterations trained on episodes sampled one version back
        assert [r["rollout/staleness_max"] for r in rows][1:] == [1.0] * (len(rows) - 1)


def test_tether_eval_runs_the_episodes_of_a_runs_environment(trained, tmp_path, capsys):
    """`tether eval --environment RUN`: the policy and the reference both run that run's episodes;
    turns and truncation are reported per side, the samples carry each conversation; a source
    without an environment block, a bad row and best-of-N are refused up front, naming them."""
    prompts = scripted_prompts(trained["task"], tmp_path / "episodes.jsonl", n=4)
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("environment:\n  kind: scripted\n  max_turns: 3\n  max_tokens: 40\n")
    out = tmp_path / "eval.json"
    base = ["eval", "--policy", str(trained["sft"]), "--reference", str(trained["sft"]), "--prompts", str(prompts),
            "--samples-per-prompt", "2", "--max-new-tokens", "6", "--judge", "tether.tasks.arith.judge:gold_score",
            "--threads", "1", "--out", str(out)]
    assert main([*base, "--environment", str(run)]) == 0
    result = json.loads(out.read_text())
    for side in ("policy", "reference"):
        assert result[side]["n"] == 8 and result[side]["episodes"]["turns"] == 3.0, result[side]
        assert result[side]["episodes"]["truncated"] == 0.0 and "gold_score" in result[side]
    sample = result["samples"][0]
    assert [m["role"] for m in sample["policy_episode"]].count("assistant") == 3
    assert sample["policy"] == sample["policy_episode"][-1]["content"].strip()
    assert result["policy"] == result["reference"]  # the same checkpoint, the same seed: the same episodes
    assert "turns" in capsys.readouterr().out

    (run / "config.yaml").write_text("run:\n  seed: 1\n")
    assert main([*base, "--environment", str(run)]) == 2
    assert "no `environment:` block" in capsys.readouterr().err
    (run / "config.yaml").write_text("environment:\n  kind: scripted\n")
    assert main([*base, "--environment", str(run), "--reward-model", str(trained["sft"]), "--best-of-n", "2"]) == 2
    assert "--best-of-n" in capsys.readouterr().err
    lines = prompts.read_text().splitlines()
    lines[1] = json.dumps({"prompt": "what is 1 + 1 ?", "follow_ups": "not a list"})
    prompts.write_text("\n".join(lines) + "\n")
    assert main([*base, "--environment", str(run)]) == 2
    err = capsys.readouterr().err
    assert "episodes.jsonl" in err and "row 2" in err and "follow_ups" in err


def test_masked_truncated_episodes_train_nothing(trained, tmp_path, capsys):
    """environment.max_tokens=8 cuts every three-turn episode: with environment.mask_truncated the
    actor's gradient is exactly 0 (every row masked), without it the same episodes train; online DPO,
    whose pairs would compare a response with nothing, refuses the key."""
    prompts = scripted_prompts(trained["task"], tmp_path / "episodes.jsonl", n=4)
    norms = {}
    for mask in ("true", "false"):
        out = tmp_path / mask
        assert main(["grpo", *episode_args(trained, out, prompts, "group.size=2", "rl.minibatch_size=4",
                                           "environment.max_tokens=8", f"environment.mask_truncated={mask}")]) == 0
        row = next(r for r in read_metrics(out / "metrics.jsonl") if "objective/score" in r)
        assert row["env/truncated"] == 1.0
        norms[mask] = row["optim/grad_norm"]
    assert norms["true"] == 0.0 and norms["false"] > 0.0
    assert main(["online_dpo", *episode_args(trained, tmp_path / "dpo", prompts, "group.size=2",
                                             "rl.minibatch_size=4", "environment.mask_truncated=true")]) == 2
    assert "environment.mask_truncated" in capsys.readouterr().err
