"""The judge client against a real HTTP server on loopback that answers as told: well, slowly,
with garbage, with errors; each failure counted by kind and answered None, the answers cached by
content, the requests in flight bounded, the server's model checked before a run."""

from __future__ import annotations


import pytest
from judge_server import FakeJudge

from tether.common.errors import ModelError
from tether.roles.judge_client import JudgeClient


@pytest.fixture
def judge():
    server = FakeJudge()
    yield server
    server.close()


def ask(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


def test_every_failure_is_counted_by_kind_and_answered_none(judge):
    client = JudgeClient(judge.url, "judge-1", timeout_s=1.0, retries=1, backoff=0.01, key="reward.judge")
    answers = client.ask([ask("fine"), ask("slow"), ask("garbage"), ask("error"), ask("bodyless")])
    assert answers[0] == "Score: 7 (fine)" and answers[1:] == [None] * 4
    s = client.stats
    assert (s.answered, s.timeouts, s.bad_bodies, s.http_errors) == (1, 1, 2, 1)
    assert s.requests == 5 and s.failures() == 4 and (s.prompt_tokens, s.completion_tokens) == (5, 3)
    assert judge.requests == 7  # the timeout and the 500 were tried twice; garbage (a 200) is not retried
    metrics = s.metrics("judge/quality")
    assert metrics["judge/quality/timeouts"] == 1.0 and metrics["judge/quality/latency_mean_s"] > 0
    client.close()


def test_answers_are_cached_by_content_and_requests_bounded():
    server = FakeJudge(delay=0.05)
    try:
        client = JudgeClient(server.url, "judge-1", concurrency=2)
        texts = [f"q{i % 4}" for i in range(12)]  # 4 distinct questions, each asked 3 times
        assert client.ask([ask(t) for t in texts]) == [f"Score: 7 ({t})" for t in texts]
        assert server.most <= 2
        assert client.stats.requests + client.stats.cache_hits == 12 and client.stats.cache_hits >= 4
        before = server.requests
        client.ask([ask("q0")])  # answered from the cache
        assert server.requests == before
        other = JudgeClient(server.url, "judge-1", temperature=1.0)
        assert other.cache_key(ask("q0")) != client.cache_key(ask("q0"))  # other settings: another answer
        client.close()
        other.close()
    finally:
        server.close()


def test_the_server_and_its_model_are_checked_before_a_run(judge, monkeypatch):
    JudgeClient(judge.url + "/v1", "judge-1").check()
    with pytest.raises(ModelError, match="does not serve the model 'other'.*judge-1"):
        JudgeClient(judge.url, "other", key="reward.judge").check()
    monkeypatch.setenv("TETHER_SERVICE_TIMEOUT_S", "1")
    with pytest.raises(ModelError, match=r"The judge at http://127.0.0.1:9 \(reward.judge\) could not be reached"):
        JudgeClient("http://127.0.0.1:9", "judge-1", key="reward.judge").check()
