"""Episodes on the vLLM engine (its CPU build, in .venv-vllm): three-turn scripted episodes
sampled turn by turn from token ids, the observation tokens appended by tether, the trainer's
log-probs of every sampled token checked against vLLM's own (``rollout/token_mismatch``), in the
synchronous loop and with the engine sampling one iteration ahead from a thread."""

from __future__ import annotations

import pytest

vllm = pytest.importorskip("vllm", reason="runs in .venv-vllm (make test builds it); see README")

from tether.config import RLConfig, load_config  # noqa: E402
from tests.integration.test_episodes import scripted_prompts  # noqa: E402

pytestmark = pytest.mark.slow
#: The largest trainer-engine log-prob difference allowed on a sampled token (fp32 on both sides:
#: a decode step against a whole-episode forward).
EPISODE_ATOL = 1e-3


def episode_overrides(task, prompts, out, *extra):
    return [f"model.name_or_path={task / 'base_model'}", f"prompts={prompts}", "algorithm=grpo", "group.size=2",
            "reward.callable=tether.tasks.arith.judge:gold_reward", "rl.iterations=2", "rollout.batch_size=4",
            "rl.minibatch_size=8", "rl.epochs=1", "rollout.max_new_tokens=6", "run.progress=false", "run.threads=1",
            "rollout.engine=vllm", "environment.kind=scripted",
            "environment.max_turns=3", "environment.max_tokens=40", "rl.on_invariant=error", f"run.out={out}", *extra]


@pytest.mark.parametrize("staleness", [0, 1])
def test_vllm_samples_episodes_turn_by_turn_on_the_tokens_it_produced(staleness, tiny_task, tmp_path):
    from tether.loops.rl_run import run_rl

    prompts = scripted_prompts(tiny_task["dir"], tmp_path / "episodes.jsonl", n=8)
    cfg = load_config(RLConfig, None, episode_overrides(tiny_task["dir"], prompts, tmp_path / "run",
                                                        f"rollout.max_staleness={staleness}"))
    history = run_rl(cfg)["history"]
    assert len(history) == 2
    for row in history:
        assert row["env/turns"] > 1 and 0 < row["env/observation_share"] < 1, row
    # Rollouts of the weights that train on them carry the token check (all of a synchronous run's;
    # with max_staleness=1, the first: the next ones were sampled one update back).
    checked = history if staleness == 0 else history[:1]
    for row in checked:
        assert row["rollout/token_mismatch"] == 0.0 and row["rollout/logprob_diff_max"] <= EPISODE_ATOL, row
    if staleness:
        assert "rollout/token_mismatch" not in history[1] and history[1]["rollout/staleness_max"] == 1.0
    print(f"\nvLLM episodes (max_staleness={staleness}): token_mismatch "
          + ", ".join(f"{r['rollout/token_mismatch']:.3f}" for r in checked) + "; logprob_diff_max "
          + ", ".join(f"{r['rollout/logprob_diff_max']:.1e}" for r in checked)
          + "; turns " + ", ".join(f"{r['env/turns']:.2f}" for r in history))
