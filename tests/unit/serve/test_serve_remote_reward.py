"""RemoteReward (PPO's reward.url source) against a mock transport, and its config wiring."""

from __future__ import annotations

import json

import httpx2
import pytest
import torch

from tether.config import RLConfig, load_config
from tether.common.errors import ConfigError, ModelError
from tether.roles.remote_reward import RemoteReward
from tether.types import Rollout

BASE = ["model.name_or_path=m", "prompts=p.jsonl", "critic.init=policy"]


def rollout(n=3) -> Rollout:
    ones = torch.ones(n, 2, dtype=torch.long)
    return Rollout(ones, ones, ones, ones, torch.tensor([True, False, True][:n]),
                   [f"p{i}" for i in range(n)], [f"r{i}" for i in range(n)])


def remote(handler, **kwargs) -> RemoteReward:
    rr = RemoteReward("http://127.0.0.1:1/v1/", backoff=0.0, **kwargs)
    rr.client = httpx2.Client(transport=httpx2.MockTransport(handler), headers=rr.client.headers)
    return rr


def test_sends_text_pairs_and_returns_scores():
    seen = []

    def handler(request):
        seen.append(request)
        pairs = json.loads(request.content)["pairs"]
        return httpx2.Response(200, json={"scores": [float(i) for i in range(len(pairs))]})

    rr = remote(handler, api_key="k")
    scores = rr.score(rollout())
    torch.testing.assert_close(scores, torch.tensor([0.0, 1.0, 2.0]))
    assert rr.endpoint == "http://127.0.0.1:1/v1/rewards"
    assert str(seen[0].url) == rr.endpoint and seen[0].headers["authorization"] == "Bearer k"
    assert json.loads(seen[0].content)["pairs"][1] == {"prompt": "p1", "response": "r1", "ended": False}


def test_large_rollouts_are_sent_in_batches():
    sizes = []

    def handler(request):
        n = len(json.loads(request.content)["pairs"])
        sizes.append(n)
        return httpx2.Response(200, json={"scores": [1.0] * n})

    assert remote(handler, batch_size=2).score(rollout(3)).shape == (3,)
    assert sizes == [2, 1]


def test_busy_server_is_retried():
    answers = iter([httpx2.Response(503, json={"error": {"message": "busy"}}),
                    httpx2.Response(200, json={"scores": [1.0, 2.0, 3.0]})])
    assert remote(lambda request: next(answers)).score(rollout()).tolist() == [1.0, 2.0, 3.0]


def test_errors_name_the_url_and_status():
    rr = remote(lambda r: httpx2.Response(400, json={"error": {"message": "pairs[0] is too long"}}))
    with pytest.raises(ModelError, match=r"http://127.0.0.1:1/v1/rewards answered HTTP 400: pairs\[0\] is too long"):
        rr.score(rollout())
    with pytest.raises(ModelError, match="2 scores for 3 pairs"):
        remote(lambda r: httpx2.Response(200, json={"scores": [1, 2]})).score(rollout())
    with pytest.raises(ModelError, match="without a 'scores' list"):
        remote(lambda r: httpx2.Response(200, text="<html>")).score(rollout())

    def refuse(request):
        raise httpx2.ConnectError("refused", request=request)

    with pytest.raises(ModelError, match="could not be reached after 3 tries"):
        remote(refuse).score(rollout())


def test_api_key_from_environment(monkeypatch):
    monkeypatch.setenv("TETHER_API_KEY", "from-env")
    assert RemoteReward("http://127.0.0.1:1").client.headers["authorization"] == "Bearer from-env"


def test_config_takes_exactly_one_reward_source():
    cfg = load_config(RLConfig, None, [*BASE, "reward.url=http://127.0.0.1:8000"])
    assert cfg.reward.url == "http://127.0.0.1:8000" and cfg.reward.api_key is None
    with pytest.raises(ConfigError, match="reward.url"):
        load_config(RLConfig, None, [*BASE, "reward.url=http://x", "reward.models=[r]"])
    with pytest.raises(ConfigError, match="reward.url"):
        load_config(RLConfig, None, BASE)


def test_check_before_the_run_names_what_is_wrong():
    """reward.url is checked (GET /health) before a run directory exists
    (docs/reliability.md, first new-user trial, class 5)."""
    def healthy(request):
        assert request.url.path == "/health"
        return httpx2.Response(200, json={"status": "ok", "reward_model": "rm"})

    remote(healthy).check()

    def no_rm(request):
        return httpx2.Response(200, json={"status": "ok", "reward_model": None})

    with pytest.raises(ModelError, match="serves no reward model"):
        remote(no_rm).check()

    def broken(request):
        return httpx2.Response(500, text="boom")

    with pytest.raises(ModelError, match="not healthy.*HTTP 500"):
        remote(broken).check()

    def refuse(request):
        raise httpx2.ConnectError("refused", request=request)

    with pytest.raises(ModelError, match=r"\(reward.url\) could not be reached"):
        remote(refuse).check()
