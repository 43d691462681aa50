"""A generation engine that stops for good (vLLM's engine processes died) makes the server
unhealthy: ``/health`` answers 503 with the engine's reason, and every generation request a 503
naming it (not 200 and then 500s); reward scoring, which needs no engine, still answers."""

from __future__ import annotations

import json

import pytest

from tether.common.errors import ConfigError

MESSAGES = [{"role": "user", "content": "what is 1 + 2 ?"}]
REASON = "RuntimeError: Unsupported CPU attention configuration: head_dim=16"


class StoppingSampler:
    """A real sampler that stops as vLLM's engine does: ``failure()`` gives the reason once it has;
    with ``die_on_next`` the next ``generate`` is the call it dies in."""

    def __init__(self, sampler):
        self.sampler, self.dead, self.die_on_next = sampler, None, False

    def failure(self):
        return self.dead

    def generate(self, *args, **kwargs):
        if self.die_on_next:
            self.dead = REASON
        if self.dead:
            raise ConfigError(f"The vLLM engine (--engine vllm) stopped while sampling 1 requests: {self.dead}.")
        return self.sampler.generate(*args, **kwargs)


@pytest.fixture
def stopping(tiny_models, client_for):
    from tether.serve.service import ModelService

    tok, policy, rm = tiny_models
    service = ModelService(policy, tok, rm, tok, max_batch_size=8)
    service.sampler = StoppingSampler(service.sampler)
    return service.sampler, client_for(service)


def chat(client, **body):
    return client.post("/v1/chat/completions", json={"model": "tiny", "messages": MESSAGES, "max_tokens": 4, **body})


def assert_engine_stopped(resp):
    assert resp.status_code == 503, resp.text
    error = resp.json()["error"]
    assert error["code"] == "engine_stopped" and REASON in error["message"], error


def test_a_dead_engine_makes_health_fail_with_its_reason(stopping):
    sampler, client = stopping
    assert client.get("/health").status_code == 200 and chat(client).status_code == 200
    sampler.dead = REASON  # died while idle
    health = client.get("/health")
    assert health.status_code == 503 and health.json()["status"] == "engine_stopped"
    assert REASON in health.json()["error"]["message"]
    assert_engine_stopped(chat(client))
    assert_engine_stopped(client.post("/v1/completions", json={"model": "tiny", "prompt": "1 + 2 =", "max_tokens": 3}))
    scores = client.post("/v1/rewards", json={"pairs": [{"prompt": "1 + 2 =", "response": "3"}]})
    assert scores.status_code == 200, scores.text  # the reward model needs no generation engine


def test_an_engine_dying_under_a_request_is_a_503_not_a_500(stopping):
    sampler, client = stopping
    sampler.die_on_next = True
    assert_engine_stopped(chat(client))
    assert client.get("/health").status_code == 503


def test_a_streamed_request_names_the_reason_in_band(stopping):
    sampler, client = stopping
    sampler.die_on_next = True
    with client.stream("POST", "/v1/chat/completions",
                       json={"model": "tiny", "messages": MESSAGES, "max_tokens": 4, "stream": True}) as resp:
        events = [json.loads(line[6:]) for line in resp.iter_lines()
                  if line.startswith("data: ") and line != "data: [DONE]"]
    errors = [e["error"] for e in events if "error" in e]
    assert errors and errors[0]["code"] == "engine_stopped" and REASON in errors[0]["message"]
