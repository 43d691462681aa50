"""The judge reward kind against a real chat server on loopback (tests/judge_server.py): each
response judged by the filled rubric, its score read by the declared format, every failure
(no answer, garbage, an error, an unparseable answer) counted and scored by the stated rule, a
batch past the failure limit stopping the run with a message that names the judge, and the
kind built from a config term through the registry (its rubric file checked)."""

from __future__ import annotations

import re

import pytest
import torch
from judge_server import FakeJudge

from tether.algos.judge_format import ScoreFormat
from tether.common.errors import ConfigError, ModelError, TrainingError
from tether.config import RLConfig, load_config
from tether.placement import role
from tether.placement.local import LocalPlacement
from tether.loops.rl_setup import score_rollout
from tether.roles.judge_client import JudgeClient
from tether.roles.judge_reward import JudgeReward
from tether.roles.sources import build_reward
from tether.types import Rollout

RUBRIC = "Q: {prompt}\nA: {response}\nGrade it."


def verdict(text: str) -> str:
    """The fake judge's answer: 9 for 'great', 3 for 'meh', 42 (off the 1-10 scale) for 'huge', none for 'mute'."""
    answer = text.split("A: ", 1)[1]
    if "mute" in answer:
        return "I would rather not say."
    score = {"great": 9, "meh": 3, "huge": 42}.get(answer.split()[0], 5)
    return f"Reasons first. Score: 1 was tempting, but\nScore: {score}"


@pytest.fixture
def server():
    s = FakeJudge(answer=verdict)
    yield s
    s.close()


def rollout(responses) -> Rollout:
    b = len(responses)
    mask = torch.ones(b, 3, dtype=torch.long)
    return Rollout(prompt_ids=torch.ones(b, 2, dtype=torch.long), prompt_mask=torch.ones(b, 2, dtype=torch.long),
                   response_ids=mask.clone(), response_mask=mask, ended=torch.ones(b, dtype=torch.bool),
                   prompts=["what is 3 + 4 ?"] * b, responses=list(responses))


def judge(server, on_failure="lowest", max_failure_rate=1.0, **client) -> JudgeReward:
    c = JudgeClient(server.url, "judge-1", timeout_s=client.pop("timeout_s", 0.3), retries=0, backoff=0.01,
                    key="reward.terms[0].judge")
    return JudgeReward(c, RUBRIC, ScoreFormat(low=1, high=10), on_failure, max_failure_rate, name="helpful",
                       key="reward.terms[0].judge")


def test_scores_are_the_last_match_and_failures_score_low_and_are_counted(server):
    reward = judge(server)
    scores = reward.score(rollout(["great answer", "meh answer", "huge answer", "mute answer", "garbage",
                                   "slow", "great answer"]))
    # 9, 3; 42 is off the scale and "mute" has no score: unparseable -> low (1); garbage and slow: no answer -> 1
    assert scores.tolist() == [9.0, 3.0, 1.0, 1.0, 1.0, 1.0, 9.0]
    m = reward.metrics()
    assert m["judge/helpful/judged"] == 7 and m["judge/helpful/failed"] == 2 and m["judge/helpful/unparseable"] == 2
    assert m["judge/helpful/failure_rate"] == pytest.approx(4 / 7)
    assert m["judge/helpful/score_mean"] == pytest.approx((9 + 3 + 9) / 3)
    # 6 requests asked (the second "great answer" is a cache hit), one timed out, one bad body
    assert m["judge/helpful/requests"] == 6 and m["judge/helpful/cache_hits"] == 1
    assert m["judge/helpful/timeouts"] == 1 and m["judge/helpful/bad_bodies"] == 1
    assert m["judge/helpful/answered"] == 4 and m["judge/helpful/latency_mean_s"] > 0
    # metrics are per call: the next batch starts from zero
    reward.score(rollout(["meh answer"]))
    again = reward.metrics()
    assert again["judge/helpful/judged"] == 1 and again["judge/helpful/requests"] == 0
    assert again["judge/helpful/cache_hits"] == 1 and again["judge/helpful/failed"] == 0


def test_the_rubric_is_filled_by_plain_replacement(server):
    seen = []
    server.answer = lambda text: seen.append(text) or "Score: 4"
    judge(server).score(rollout(["{prompt} and {response} stay as written"]))
    assert seen == ["Q: what is 3 + 4 ?\nA: {prompt} and {response} stay as written\nGrade it."]


def test_on_failure_error_stops_at_the_first_failure_naming_the_judge(server):
    with pytest.raises(TrainingError, match=re.escape("reward.terms[0].judge")) as err:
        judge(server, on_failure="error").score(rollout(["great answer", "mute answer"]))
    assert "1 of 2 judgements failed" in str(err.value) and "I would rather not say." in str(err.value)


def test_a_batch_past_the_failure_limit_stops_the_run(server):
    reward = judge(server, max_failure_rate=0.5)
    reward.score(rollout(["great answer", "mute answer"]))  # 1 of 2: at the limit, goes on
    with pytest.raises(TrainingError, match="2 of 3 judgements of this batch failed, more than") as err:
        reward.score(rollout(["great answer", "error", "mute answer"]))
    assert "1 HTTP errors" in str(err.value) and "max_failure_rate=0.5" in str(err.value)


def config(url: str, tmp_path, **judge_keys) -> RLConfig:
    keys = ", ".join(f"{k}: {v}" for k, v in {"url": url, "model": "judge-1", **judge_keys}.items())
    return load_config(RLConfig, None, ["model.name_or_path=m", "prompts=p", "algorithm=grpo",
                                        f"reward.terms=[{{name: helpful, judge: {{{keys}}}}}, "
                                        f"{{name: short, length_penalty: 0.5, weight: 0}}]"])


def test_a_config_term_builds_the_judge_and_the_loop_logs_what_it_did(server, tmp_path):
    rubric = tmp_path / "rubric.txt"
    rubric.write_text(RUBRIC)
    cfg = config(server.url, tmp_path, rubric=str(rubric), timeout_s=0.3)
    reward = build_reward(cfg, tokenizer=None, settings=None)
    proxy = role(LocalPlacement({"reward": reward}), "reward")
    raw, stats = score_rollout(proxy, rollout(["great answer", "meh answer"]), cfg, "cpu")
    assert raw.tolist() == [9.0, 3.0]
    assert stats["reward/helpful"] == 6.0 and stats["judge/helpful/judged"] == 2
    assert stats["judge/helpful/failure_rate"] == 0.0


def test_bad_judge_settings_are_named(server, tmp_path):
    with pytest.raises(ConfigError, match=r"reward.terms\[0\].judge.model' is empty"):
        config(server.url, tmp_path, model="''")
    with pytest.raises(ConfigError, match="has no group"):
        config(server.url, tmp_path, pattern="score")
    with pytest.raises(ConfigError, match=r"judge' sets timeout_s without judge.url"):
        load_config(RLConfig, None, ["model.name_or_path=m", "prompts=p", "algorithm=grpo",
                                     "reward.terms=[{name: a, regex: x, judge: {timeout_s: 3}}]"])
    with pytest.raises(ConfigError, match=r"judge.url' and 'reward.terms\[0\].judge.path' are both set"):
        config(server.url, tmp_path, path="somewhere")
    with pytest.raises(ConfigError, match=r"judge.timeout_s' = 3.0 is set with path \(an in-process judge\)"):
        load_config(RLConfig, None, ["model.name_or_path=m", "prompts=p", "algorithm=grpo",
                                     "reward.terms=[{name: a, judge: {path: j, timeout_s: 3}}]"])
    with pytest.raises(ConfigError, match=r"judge.batch_size' = 2 is set with url"):
        config(server.url, tmp_path, batch_size=2)
    no_response = tmp_path / "bad.txt"
    no_response.write_text("grade {prompt}")
    with pytest.raises(ConfigError, match=r"judge.rubric' = .*bad.txt.*no \{response\} placeholder"):
        build_reward(config(server.url, tmp_path, rubric=str(no_response)), None, None)
    with pytest.raises(ConfigError, match=r"judge.rubric' = .*missing.txt.*could not be read"):
        build_reward(config(server.url, tmp_path, rubric=str(tmp_path / "missing.txt")), None, None)
    with pytest.raises(ModelError, match=r"does not serve the model 'other'"):
        build_reward(config(server.url, tmp_path, model="other"), None, None)


def test_a_judge_that_is_down_is_named_before_the_run(tmp_path):
    with pytest.raises(ModelError, match=r"The judge at http://127.0.0.1:9 \(reward.terms\[0\].judge\) could not"):
        build_reward(config("http://127.0.0.1:9", tmp_path), None, None)
