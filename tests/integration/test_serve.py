"""`tether serve` live on 127.0.0.1 (a free port): the official openai client, limits, auth,
best-of-N, PPO scoring through /v1/rewards, a small bounded load test, graceful shutdown.

The policy is the tiny task's base model; the reward model is the same trunk with a fresh
scalar head, saved to a temporary directory.
"""

from __future__ import annotations

import threading
import time

import httpx2
import openai
import pytest
import torch

from tether.config import RLConfig, load_config
from tether.data import collate_left, collate_right, encode_prompt, encode_response
from tether.loops.rl_run import run_rl
from tether.models import load_scalar_model
from tether.roles import ModelReward
from tether.roles.remote_reward import RemoteReward
from tether.serve import ModelService, ServerThread, ServeSettings, create_app
from tether.serve.loadtest import run_load
from tether.types import Rollout

KEY = "test-key"
MESSAGES = [{"role": "user", "content": "what is 2 + 3 ?"}]


@pytest.fixture(scope="module")
def models(policy_and_fresh_rm):
    return policy_and_fresh_rm


@pytest.fixture(scope="module")
def service(models):
    return ModelService.load(str(models["policy"]), str(models["rm"]), max_batch_size=16)


@pytest.fixture(scope="module")
def server(service):
    settings = ServeSettings(model_name="tiny", reward_model_name="rm", api_key=KEY, default_max_tokens=16,
                             max_body_bytes=64 * 1024)
    with ServerThread(create_app(service, settings)) as running:
        yield running


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0, timeout=60)


@pytest.fixture(scope="module")
def http(server):
    """One raw HTTP client (a new httpx2 client per call costs ~0.1 s)."""
    with httpx2.Client(base_url=server.url, timeout=60) as c:
        yield c


def post(http, path, key=KEY, **kwargs):
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    headers.update(kwargs.pop("headers", {}))
    return http.post(path, headers=headers, **kwargs)


class GatedService:
    """The service, with model calls held at a gate: makes queueing and shutdown deterministic."""

    def __init__(self, service):
        self._service = service
        self.gate = threading.Event()
        self.entered = threading.Event()

    def __getattr__(self, name):
        return getattr(self._service, name)

    def run_batch(self, jobs):
        self.entered.set()
        assert self.gate.wait(30)
        return self._service.run_batch(jobs)


def in_thread(fn, *args, **kwargs) -> tuple[threading.Thread, dict]:
    out = {}

    def target():
        try:
            out["value"] = fn(*args, **kwargs)
        except Exception as err:  # noqa: BLE001
            out["error"] = err

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread, out


def wait_for(predicate, timeout=20.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


# -- the official client ------------------------------------------------------------------------
def test_openai_client_models_chat_and_completions(client):
    assert [m.id for m in client.models.list().data] == ["tiny"]
    chat = client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=8, temperature=0.7, seed=1)
    assert chat.object == "chat.completion" and chat.choices[0].message.role == "assistant"
    assert chat.choices[0].finish_reason in ("stop", "length")
    assert chat.usage.prompt_tokens > 0 and 1 <= chat.usage.completion_tokens <= 8
    done = client.completions.create(model="tiny", prompt=["what is", "hello"], max_tokens=4, n=2, stop=["?"])
    assert [c.index for c in done.choices] == [0, 1, 2, 3]
    assert all("?" not in c.text for c in done.choices)
    assert done.usage.total_tokens == done.usage.prompt_tokens + done.usage.completion_tokens


def test_openai_client_streaming(client):
    kwargs = dict(model="tiny", messages=MESSAGES, max_tokens=10, seed=42)
    whole = client.chat.completions.create(**kwargs)
    chunks = list(client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kwargs))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == whole.choices[0].finish_reason
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    pieces = list(client.completions.create(model="tiny", prompt="what is", max_tokens=5, stream=True, seed=4))
    assert all(p.object == "text_completion" for p in pieces)
    assert pieces[-1].choices[0].finish_reason in ("stop", "length")


# -- limits and errors ---------------------------------------------------------------------------
def test_auth_is_enforced(server, http):
    stranger = openai.OpenAI(base_url=server.url + "/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        stranger.models.list()
    response = post(http, "/v1/chat/completions", key=None, json={"model": "tiny", "messages": MESSAGES})
    assert response.status_code == 401 and response.json()["error"]["code"] == "invalid_api_key"
    assert http.get("/health").status_code == 200


def test_bad_requests_get_the_right_4xx(http, client):
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="tiny", messages=MESSAGES, n=100)
    assert info.value.body["param"] == "n"
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=100000)
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="gpt-4o", messages=MESSAGES)
    garbage = [b"{", b"[]", b"null", b'{"messages": 5}', b'{"messages": [{"role": 1}]}', b'{"prompt": 1}',
               b'{"messages": [], "n": -1}', "\u00e9".encode("latin-1")]
    for body in garbage:
        for path in ("/v1/chat/completions", "/v1/completions", "/v1/rewards"):
            response = post(http, path, content=body, headers={"content-type": "application/json"})
            assert response.status_code == 400, (path, body, response.text)
            assert response.json()["error"]["type"] == "invalid_request_error"
    oversized = {"model": "tiny", "messages": [{"role": "user", "content": "x " * 40000}]}
    response = post(http, "/v1/chat/completions", json=oversized)
    assert response.status_code == 413 and response.json()["error"]["code"] == "request_too_large"


def test_full_queue_is_429_then_requests_complete(service):
    gated = GatedService(service)
    app = create_app(gated, ServeSettings(model_name="tiny", queue_depth=1, max_batch_size=1))
    body = {"model": "tiny", "messages": MESSAGES, "max_tokens": 3}
    with ServerThread(app) as running, httpx2.Client(base_url=running.url, timeout=60) as http:
        first, first_out = in_thread(http.post, "/v1/chat/completions", json=body)
        assert gated.entered.wait(20)  # the worker holds the first request
        second, second_out = in_thread(http.post, "/v1/chat/completions", json=body)
        wait_for(lambda: http.get("/health").json()["queue"]["pending"] == 1)
        refused = http.post("/v1/chat/completions", json=body)
        assert refused.status_code == 429 and refused.json()["error"]["code"] == "queue_full"
        assert "retry-after" in refused.headers
        gated.gate.set()
        first.join(30)
        second.join(30)
    assert first_out["value"].status_code == 200 and second_out["value"].status_code == 200


def test_graceful_shutdown_finishes_accepted_requests(service):
    gated = GatedService(service)
    app = create_app(gated, ServeSettings(model_name="tiny", max_batch_size=2))
    running = ServerThread(app).start()
    with httpx2.Client(base_url=running.url, timeout=60) as http:
        calls = [in_thread(http.post, "/v1/completions", json={"prompt": "what is", "max_tokens": 3, "seed": i})
                 for i in range(3)]
        assert gated.entered.wait(20)
        wait_for(lambda: http.get("/health").json()["queue"]["pending"] == 2)
        stopper, _ = in_thread(running.stop)  # like SIGTERM: stop accepting, let open requests finish
        time.sleep(0.2)
        gated.gate.set()
        stopper.join(30)
        for thread, _ in calls:
            thread.join(30)
    assert not stopper.is_alive() and not running.thread.is_alive()
    assert [out["value"].status_code for _, out in calls] == [200, 200, 200]
    assert app.state.batcher.closing and app.state.batcher.pending == 0


# -- best-of-N and rewards -----------------------------------------------------------------------
def test_best_of_returns_the_highest_scored_candidate(http, client):
    chat = client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=8,
                                          extra_body={"best_of": 4, "return_scores": True})
    candidates = chat.model_extra["candidates"]
    scores = [c["score"] for c in candidates]
    assert len(scores) == 4
    best = max(range(4), key=lambda i: scores[i])
    (choice,) = chat.choices
    assert choice.model_extra["candidate_index"] == best
    assert choice.message.content == candidates[best]["text"]
    # The reward endpoint gives each candidate the same score.
    pairs = [{"prompt": MESSAGES, "response": c["text"], "ended": c["finish_reason"] == "stop"} for c in candidates]
    rescored = post(http, "/v1/rewards", json={"pairs": pairs}).json()["scores"]
    assert rescored == pytest.approx(scores, abs=1e-4)


def test_remote_reward_matches_the_local_reward_model(server, service, models):
    """RemoteReward is a drop-in RewardSource: the same scores as ModelReward on the same rollout.

    (Text is the interface, so this holds for responses whose text re-tokenizes to the same ids:
    a special token sampled inside a response is lost in decoding.)
    """
    tok = service.tokenizer
    prompts = ["what is 2 + 3 ?", "what is 7 times 8 ?", "what is 9 - 4 ?", "what is 1 + 1 ?"]
    responses = ["5", "56 ! ! sure", "i think it is 5", "2"]
    ended = [True, True, False, True]
    response_ids = [encode_response(r, tok)[: None if e else -1] for r, e in zip(responses, ended)]
    prompt_ids, prompt_mask = collate_left([encode_prompt(p, tok) for p in prompts], tok.pad_token_id)
    resp = collate_right(response_ids, tok.pad_token_id)
    rollout = Rollout(prompt_ids, prompt_mask, resp["input_ids"], resp["attention_mask"], torch.tensor(ended),
                      prompts, responses)
    local = ModelReward(load_scalar_model(str(models["rm"]), tok)).score(rollout)
    remote = RemoteReward(server.url, api_key=KEY).score(rollout)
    assert remote.shape == local.shape == (4,)
    torch.testing.assert_close(remote, local, atol=1e-4, rtol=0)


def test_remote_reward_errors_name_the_url(server):
    rollout_like = type("R", (), {"prompts": ["a"], "responses": ["b"], "ended": torch.tensor([True])})()
    with pytest.raises(Exception, match="401"):
        RemoteReward(server.url, api_key="wrong").score(rollout_like)
    with pytest.raises(Exception, match="could not be reached"):
        RemoteReward("http://127.0.0.1:9", retries=1, backoff=0.01).score(rollout_like)


def test_ppo_scores_through_the_reward_endpoint(server, http, models, tmp_path):
    task = models["task"]
    cfg = load_config(RLConfig, None, [
        f"run.out={tmp_path / 'ppo'}", "run.progress=false", "run.log_every=1", "run.seed=0",
        f"model.name_or_path={models['policy']}", f"prompts={task / 'ppo_prompts.jsonl'}",
        f"reward.url={server.url}", f"reward.api_key={KEY}", "critic.init=policy",
        "rl.iterations=2", "rollout.batch_size=8", "rl.minibatch_size=4", "rollout.max_new_tokens=8",
        "rl.epochs=1",
    ])
    before = http.get("/health").json()["batches"]["run"]
    result = run_rl(cfg)
    assert isinstance(result["trainer"].placement.roles["reward"], RemoteReward)
    assert len(result["history"]) == 2
    assert all(torch.isfinite(torch.tensor(row["objective/score_raw"])) for row in result["history"])
    assert http.get("/health").json()["batches"]["run"] >= before + 2  # one scoring call per iteration


# -- load ------------------------------------------------------------------------------------------
def test_bounded_load_finishes_without_errors(server):
    report = run_load(server.url, requests=40, concurrency=8, max_tokens=8, api_key=KEY)
    assert report["errors"] == 0, report["error_samples"]
    assert report["ok"] == 40 and report["completion_tokens"] > 0
    assert report["latency_ms"]["p50"] <= report["latency_ms"]["p99"]
    print("\nload test (40 requests, 8 concurrent):", report)


def test_load_test_refuses_remote_hosts():
    with pytest.raises(ValueError, match="only targets this machine"):
        run_load("http://example.com:8000", requests=1, concurrency=1)
