"""Episodes wherever single-turn rollouts run: scripted three-turn episodes trained under the Ray
placement and under torchrun give the one-process run's metrics and weights.

- GRPO with the rollout role on the actor's one Ray worker: the same draws, bit for bit;
- REINFORCE++ on 2 actor workers (FSDP's gathered weights around the sampling) and on 2 torchrun
  ranks (gloo, DDP), each running the episodes of its share of the prompts: sampling with top_k=1
  draws the same tokens whichever rank samples them (REINFORCE++ because its batch-wide baseline
  still gives a group of identical greedy episodes an advantage, where GRPO's gives none).

The scores are a fresh reward head's, without the EOS penalty, so that they differ and the
updates move the weights."""

from __future__ import annotations

from pathlib import Path

import pytest

from run_compare import largest_metric_diff, largest_weight_diff, layout, metrics
from test_distributed import ok, torchrun
from test_episodes import scripted_prompts

pytestmark = pytest.mark.slow


GREEDY = ("rollout.top_k=1",)
SPLIT = "reinforce_pp"


def episode_args(models: dict, prompts: Path, out: Path, *extra: str) -> list[str]:
    return [f"model.name_or_path={models['policy']}", f"prompts={prompts}", f"reward.models=[{models['rm']}]",
            "reward.eos_penalty=null", "group.size=2", "rollout.batch_size=2", "rl.minibatch_size=4",
            "rl.iterations=2", "rl.epochs=1", "rollout.max_new_tokens=6", "rollout.capture_logprobs=true",
            "environment.kind=scripted", "environment.max_turns=3", "environment.max_tokens=40",
            "rl.on_invariant=error", "run.seed=5", "run.threads=1", "run.progress=false", "run.log_every=1",
            "run.save_every=0", f"run.out={out}", *extra]


def run_here(algorithm: str, args: list[str]) -> dict:
    from tether.config import RLConfig, load_config
    from tether.loops.rl_run import run_rl

    return run_rl(load_config(RLConfig, None, [f"algorithm={algorithm}", *args]))


@pytest.fixture(scope="module")
def episodes(policy_and_fresh_rm, tmp_path_factory) -> dict:
    """The models, the scripted prompts, and ``local(algorithm, *extra)``: the one-process run of
    those settings (in this process), made on first use."""
    root = tmp_path_factory.mktemp("episode-placements")
    prompts = scripted_prompts(policy_and_fresh_rm["task"], root / "episodes.jsonl", n=8)
    made: dict[tuple, Path] = {}

    def local(algorithm: str, *extra: str) -> Path:
        if (algorithm, *extra) not in made:
            out = root / f"local-{len(made)}"
            run_here(algorithm, episode_args(policy_and_fresh_rm, prompts, out, *extra))
            rows = [r for r in metrics(out) if "objective/score" in r]
            assert len(rows) == 2 and all(r["env/turns"] > 1 and r["rollout/token_mismatch"] == 0.0 for r in rows)
            made[(algorithm, *extra)] = out
        return made[(algorithm, *extra)]

    return {"models": policy_and_fresh_rm, "prompts": prompts, "local": local}


def test_episodes_on_two_ranks_match_one_process(episodes, tmp_path):
    out = tmp_path / "two-ranks"
    ok(torchrun([SPLIT, *episode_args(episodes["models"], episodes["prompts"], out, *GREEDY,
                                      "distributed.strategy=ddp")]))
    local = episodes["local"](SPLIT, *GREEDY)
    assert layout(out) == layout(local)
    largest_metric_diff(local, out)
    largest_weight_diff(local, out)


@pytest.mark.parametrize("workers", [1, 2])
def test_episodes_under_ray_match_the_local_run(episodes, one_node, tmp_path, workers):
    out = tmp_path / f"ray-{workers}"
    cpus = [f"placement.ray.roles.{role}.num_cpus={0.5 / workers}" for role in ("actor", "reference", "reward")]
    if workers == 1:
        algorithm, sampling, group = "grpo", (), ()
    else:
        algorithm, sampling, group = SPLIT, GREEDY, (f"placement.ray.roles.actor.num_workers={workers}",
                                                     "distributed.strategy=fsdp")
    result = run_here(algorithm, episode_args(episodes["models"], episodes["prompts"], out, "placement.backend=ray",
                                              *cpus, *sampling, *group))
    placement = result["trainer"].placement
    assert placement.dispatch["rollout"] == {"generate": "prompts"}  # as the actor's workers declare it
    assert len(placement.nodes()["rollout"]) == workers and placement.nodes()["rollout"] == placement.nodes()["actor"]
    local = episodes["local"](algorithm, *sampling)
    assert layout(out) == layout(local)
    if workers == 1:  # the same draws, the same maths: bitwise
        assert largest_metric_diff(local, out)[0] == 0.0
        assert largest_weight_diff(local, out) == 0.0
    else:
        largest_metric_diff(local, out)
        largest_weight_diff(local, out)
