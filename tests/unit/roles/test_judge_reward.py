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
from tether.config.judge import mode_pattern
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


def judge(server, on_failure="fallback", max_failure_rate=1.0, mode="pointwise", rubric=RUBRIC,
          group_size=1) -> JudgeReward:
    c = JudgeClient(server.url, "judge-1", timeout_s=1.0, retries=0, backoff=0.01, key="reward.terms[0].judge")
    return JudgeReward(c, rubric, mode, mode_pattern(mode), ScoreFormat(low=1, high=10), on_failure, max_failure_rate,
                       name="helpful", key="reward.terms[0].judge", group_size=group_size)


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
    assert "on_failure=fallback counts them" in str(err.value)


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
    cfg = config(server.url, tmp_path, rubric=str(rubric), timeout_s=1.0)
    reward = build_reward(cfg, tokenizer=None, settings=None)
    proxy = role(LocalPlacement({"reward": reward}), "reward")
    raw, stats, _ = score_rollout(proxy, rollout(["great answer", "meh answer"]), cfg, "cpu")
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


PAIR_RUBRIC = "Q: {prompt}\nA: {response_a}\nB: {response_b}\n"
GROUP_RUBRIC = "Q: {prompt}\n{responses}\n"
QUALITY = {"best": 3, "good": 2, "bad": 1}


def pair_verdict(text: str) -> str:
    """A judge that prefers the better word, but picks A whenever 'bias' is shown first, and answers
    nothing useful when 'mute' is one of the two."""
    a = text.split("A: ", 1)[1].split("\n")[0]
    b = text.split("B: ", 1)[1].split("\n")[0]
    if "mute" in (a, b):
        return "no idea"
    if a == "bias":
        return "Winner: A"
    qa, qb = QUALITY.get(a, 0), QUALITY.get(b, 0)
    return "Winner: tie" if qa == qb else f"Winner: {'A' if qa > qb else 'B'}"


def test_pairwise_scores_are_win_rates_within_each_group_with_both_orders_asked(server):
    server.answer = pair_verdict
    reward = judge(server, mode="pairwise", rubric=PAIR_RUBRIC, group_size=3)
    ro = rollout(["bad", "best", "good", "good", "good", "bias"])
    ro.prompts[3:] = ["another prompt"] * 3
    scores = reward.score(ro)
    # group 1: best beats both (1), good beats bad (0.5 each way: 1 win, 1 loss), bad loses both (0)
    # group 2: good ties good (0.5); 'bias' wins as A and loses as B against good: position bias, 0.5
    assert scores.tolist() == [0.0, 1.0, 0.5, 0.5, 0.5, 0.5]
    m = reward.metrics()
    # 12 questions (6 pairs, both orders); good-vs-good asks one question twice, which is a cache hit
    # when the first answer is in before the second is asked (the client asks 4 at a time): 11 or 12.
    assert m["judge/helpful/judged"] == 6 and m["judge/helpful/requests"] + m["judge/helpful/cache_hits"] == 12
    assert m["judge/helpful/order_disagreement"] == pytest.approx(2 / 6) and m["judge/helpful/failure_rate"] == 0


def test_a_failed_comparison_is_left_out_and_a_response_with_none_is_a_tie(server):
    server.answer = pair_verdict
    scores = judge(server, mode="pairwise", rubric=PAIR_RUBRIC, group_size=3).score(
        rollout(["best", "mute", "bad"]))
    assert scores.tolist() == [1.0, 0.5, 0.0]  # best vs bad only; mute has no comparison left: 0.5


def test_pairwise_refuses_rows_that_are_not_whole_groups(server):
    with pytest.raises(TrainingError, match="not whole groups of 2 consecutive responses to one prompt"):
        judge(server, mode="pairwise", rubric=PAIR_RUBRIC, group_size=2).score(rollout(["a", "b", "c"]))


def group_verdict(text: str) -> str:
    """Ranks the shown answers by quality; answers with one order only when 'half' is shown first."""
    shown = re.findall(r"\[(\d+)\] (\w+)", text)
    if shown[0][1] == "half":
        return "cannot rank"
    order = sorted(shown, key=lambda item: -QUALITY.get(item[1], 0))
    return "Ranking: " + " > ".join(number for number, _ in order)


def test_group_scores_are_places_averaged_over_both_orders(server):
    server.answer = group_verdict
    reward = judge(server, mode="group", rubric=GROUP_RUBRIC, group_size=3)
    assert reward.score(rollout(["bad", "best", "good"])).tolist() == [0.0, 1.0, 0.5]
    m = reward.metrics()
    assert m["judge/helpful/judged"] == 1 and m["judge/helpful/requests"] == 2
    assert m["judge/helpful/order_disagreement"] == 0.0
    # 'half' first in the given order: only the reversed ranking is read, and the judgement counted
    scores = reward.score(rollout(["half", "best", "good"]))
    assert scores.tolist() == [0.0, 1.0, 0.5] and reward.metrics()["judge/helpful/unparseable"] == 1


def test_a_group_mode_needs_several_responses_per_prompt(server, tmp_path):
    with pytest.raises(ConfigError, match=r"judge.mode' = pairwise: the judge compares .* samples 1 per prompt"):
        load_config(RLConfig, None, ["model.name_or_path=m", "prompts=p", "algorithm=ppo", "critic.init=policy",
                                     f"reward.terms=[{{name: j, judge: {{url: {server.url}, model: judge-1, "
                                     "mode: pairwise}}]"])
    with pytest.raises(ConfigError, match=r"judge.low' = 0.0 is set with mode=group"):
        config(server.url, tmp_path, mode="group", low=0)
    bad = tmp_path / "pair.txt"
    bad.write_text("{prompt} {response}")
    with pytest.raises(ConfigError, match=r"no \{response_a\} or \{response_b\} placeholder"):
        build_reward(config(server.url, tmp_path, mode="pairwise", rubric=str(bad)), None, None)
