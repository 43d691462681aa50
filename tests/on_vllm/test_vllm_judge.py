"""A judge served by vLLM's own OpenAI-compatible server (its CPU build, .venv-vllm) rewards a GRPO
run: the tiny judge of tests/judge_model.py answers ``Score: 8`` through vLLM's
``/v1/chat/completions``, every judgement is parsed, and the judge's tokens are vLLM's usage."""

from __future__ import annotations


import pytest
from judge_model import RUBRIC, build
from openai_server import vllm_openai_server

pytest.importorskip("vllm", reason="runs in .venv-vllm (make test builds it); see README")

from tether.cli import main  # noqa: E402
from tether.metrics.logger import read_metrics  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def vllm_judge(tmp_path_factory):
    root = tmp_path_factory.mktemp("vllm-judge")
    model = build(root / "judge")
    with vllm_openai_server(model, "tiny-judge", root / "server.log") as url:
        rubric = root / "rubric.txt"
        rubric.write_text(RUBRIC)
        yield url, rubric


def test_grpo_rewarded_by_a_judge_on_vllms_openai_server(tiny_task, vllm_judge, tmp_path):
    url, rubric = vllm_judge
    task, out = tiny_task["dir"], tmp_path / "run"
    judge = f"{{url: '{url}', model: tiny-judge, rubric: '{rubric}', max_tokens: 8}}"
    args = ["grpo", f"run.out={out}", "run.progress=false", "run.log_every=1", "run.seed=0", "run.threads=1",
            f"model.name_or_path={task / 'base_model'}", f"prompts={task / 'ppo_prompts.jsonl'}",
            f"reward.terms=[{{name: helpful, judge: {judge}}}]", "rl.iterations=2", "rollout.batch_size=2",
            "group.size=2", "rl.minibatch_size=4", "rollout.max_new_tokens=6", "rl.epochs=1"]
    assert main(args) == 0
    rows = [r for r in read_metrics(out / "metrics.jsonl") if "objective/score_raw" in r]
    assert len(rows) == 2
    for row in rows:
        assert row["reward/helpful"] == 8.0 and row["judge/helpful/failure_rate"] == 0.0
        assert row["judge/helpful/judged"] == 4
        # vLLM counts "Score: 8" and its end token in its own usage
        assert row["judge/helpful/completion_tokens"] >= row["judge/helpful/answered"] > 0
