"""`tether warm`: reward models fine-tuned from the tiny task's SFT model with different seeds,
averaged in weight space into one reward model that a PPO run takes as any other; members and
the average scored on held-out pairs (accuracy, agreement with the task's gold scores); members of
another starting point or shape refused before anything is written."""

from __future__ import annotations

import json

import pytest
import torch
from stage_helpers import rm_overrides

from tether.cli import main
from tether.config import RewardModelConfig, load_config
from tether.metrics.logger import read_metrics
from tether.models import load_scalar_model, load_tokenizer
from tether.objectives.reward_model import run_reward_model

pytestmark = pytest.mark.slow


def test_three_reward_models_averaged_into_one(trained, tmp_path, capsys):
    task, sft = trained["task"], trained["sft"]
    members = []
    for seed in (0, 1, 2):  # one head initialisation, three data orders
        out = tmp_path / f"rm{seed}"
        run_reward_model(load_config(RewardModelConfig, None, rm_overrides(task, sft, out, f"run.seed={seed}",
                                                                           "head_seed=7")))
        members.append(out)
    warm = tmp_path / "warm"
    assert main(["warm", "--models", ",".join(map(str, members)), "--out", str(warm),
                 "--eval", str(task / "prefs_eval.jsonl"), "--threads", "1"]) == 0
    report = json.loads((warm / "warm.json").read_text())
    assert set(report["eval"]) == {*map(str, members), "average", "ensemble mean", "ensemble min",
                                   "ensemble mean_minus_std"}
    for entry in report["eval"].values():
        assert 0 <= entry["accuracy"] <= 1 and entry["gold_pairs"] > 0 and 0 <= entry["gold_agreement"] <= 1
    # The average's weights are the members' mean, and it scores held-out responses 0 on average.
    tok = load_tokenizer(str(warm))
    models = [load_scalar_model(str(m), tok) for m in (*members, warm)]
    name, weight = next((k, v) for k, v in models[-1].state_dict().items() if v.is_floating_point())
    assert torch.allclose(weight, sum(m.state_dict()[name] for m in models[:-1]) / 3, atol=1e-6)
    assert models[-1].config.score_offset == pytest.approx(report["eval"]["average"]["score_mean"])
    assert "weight-averaged reward model" in (warm / "README.md").read_text()
    assert "average: accuracy" in capsys.readouterr().out
    # A PPO run takes it as any reward model.
    run = tmp_path / "ppo"
    assert main(["ppo", f"run.out={run}", "run.progress=false", "run.threads=1", f"model.name_or_path={sft}",
                 f"prompts={task / 'ppo_prompts.jsonl'}", f"reward.models=[{warm}]", "rl.iterations=1",
                 "rollout.batch_size=4", "rl.minibatch_size=4", "rollout.max_new_tokens=6", "critic.init=reward"]) == 0
    assert [r for r in read_metrics(run / "metrics.jsonl") if "objective/score_raw" in r]


def test_members_from_other_starting_points_are_refused(trained, tmp_path, capsys):
    task = trained["task"]
    other = tmp_path / "rm-base"
    run_reward_model(load_config(RewardModelConfig, None, rm_overrides(task, task / "base_model", other, "max_steps=2")))
    out = tmp_path / "warm"
    assert main(["warm", "--models", f"{trained['rm']},{other}", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "was fine-tuned from" in err and "one initialisation" in err and not out.exists()
    assert main(["warm", "--models", f"{trained['rm']},{trained['sft']}", "--out", str(out)]) == 2
    assert "is not a reward model" in capsys.readouterr().err
    assert main(["warm", "--models", str(trained["rm"]), "--out", str(out)]) == 2
    assert "at least two reward models" in capsys.readouterr().err
    reseeded = tmp_path / "rm-seed1"  # the same start, but a head drawn after another run.seed
    run_reward_model(load_config(RewardModelConfig, None, rm_overrides(task, trained["sft"], reseeded, "max_steps=2",
                                                                       "run.seed=1")))
    assert main(["warm", "--models", f"{trained['rm']},{reseeded}", "--out", str(out)]) == 2
    assert "initialised from run.seed 1" in capsys.readouterr().err and not out.exists()
