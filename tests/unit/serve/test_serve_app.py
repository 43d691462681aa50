"""The HTTP app through FastAPI's TestClient: response shapes, usage, best-of-N, error bodies."""

from __future__ import annotations

import json

import pytest

from tether.data import encode_prompt

MESSAGES = [{"role": "user", "content": "what is 2 + 3 ?"}]


@pytest.fixture
def client(service, client_for):
    return client_for(service)


def chat(client, **fields):
    return client.post("/v1/chat/completions", json={"model": "tiny", "messages": MESSAGES, **fields})


def assert_error(response, status, param=None, code=None):
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    if param is not None:
        assert error["param"] == param, error
    if code is not None:
        assert error["code"] == code, error
    return error


def sse_events(response) -> list:
    lines = [line for line in response.iter_lines() if line]
    assert all(line.startswith("data: ") for line in lines)
    assert lines[-1] == "data: [DONE]"
    return [json.loads(line[6:]) for line in lines[:-1]]


# -- shapes -----------------------------------------------------------------------------------
def test_health_and_models(client):
    health = client.get("/health").json()
    assert health["status"] == "ok" and health["model"] == "tiny" and health["queue"]["pending"] == 0
    models = client.get("/v1/models").json()
    assert models["object"] == "list" and [m["id"] for m in models["data"]] == ["tiny"]


def test_chat_completion_shape_and_usage(client, service):
    body = chat(client, max_tokens=6).json()
    assert body["object"] == "chat.completion" and body["id"].startswith("chatcmpl-") and body["model"] == "tiny"
    (choice,) = body["choices"]
    assert choice["index"] == 0 and choice["message"]["role"] == "assistant"
    assert choice["finish_reason"] in ("stop", "length") and "score" not in choice
    usage = body["usage"]
    assert usage["prompt_tokens"] == len(encode_prompt(MESSAGES, service.tokenizer))
    assert 1 <= usage["completion_tokens"] <= 6
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    if choice["finish_reason"] == "length":
        assert usage["completion_tokens"] == 6


def test_completions_with_several_prompts_index_choices_per_prompt(client):
    body = client.post("/v1/completions", json={"prompt": ["a", "what is"], "n": 2, "max_tokens": 3}).json()
    assert body["object"] == "text_completion"
    assert [c["index"] for c in body["choices"]] == [0, 1, 2, 3]
    assert body["usage"]["completion_tokens"] <= 4 * 3


def test_token_id_prompt(client, service):
    ids = encode_prompt(MESSAGES, service.tokenizer)
    body = client.post("/v1/completions", json={"prompt": ids, "max_tokens": 2}).json()
    assert body["usage"]["prompt_tokens"] == len(ids)


def test_seed_makes_sampling_reproducible_and_streaming_matches(client):
    fields = dict(max_tokens=12, temperature=1.0, seed=1234)
    first = chat(client, **fields).json()["choices"][0]
    second = chat(client, **fields).json()["choices"][0]
    assert first == second
    with client.stream("POST", "/v1/chat/completions",
                       json={"messages": MESSAGES, "stream": True, "stream_options": {"include_usage": True},
                             **fields}) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        events = sse_events(response)
    assert events[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    text = "".join(e["choices"][0]["delta"].get("content", "") for e in events if e["choices"])
    assert text == first["message"]["content"]
    assert events[-2]["choices"][0]["finish_reason"] == first["finish_reason"]
    assert events[-1]["choices"] == [] and events[-1]["usage"]["completion_tokens"] >= 1
    assert all(e["object"] == "chat.completion.chunk" and e["id"] == events[0]["id"] for e in events)


def test_completion_stream(client):
    with client.stream("POST", "/v1/completions", json={"prompt": "what is", "stream": True, "max_tokens": 4,
                                                        "seed": 5}) as response:
        events = sse_events(response)
    assert all(e["object"] == "text_completion" for e in events)
    streamed = "".join(e["choices"][0]["text"] for e in events)
    body = client.post("/v1/completions", json={"prompt": "what is", "max_tokens": 4, "seed": 5}).json()
    assert streamed == body["choices"][0]["text"]
    assert events[-1]["choices"][0]["finish_reason"] == body["choices"][0]["finish_reason"]


def test_stop_sequence_cuts_the_text(client):
    # Greedy decoding is deterministic: find a prompt whose answer has a few words, then stop at one.
    for prompt in ("what is", "what is 2 + 3 ?", "user : hi", "a", "hello"):
        full = client.post("/v1/completions", json={"prompt": prompt, "max_tokens": 8, "temperature": 0}).json()
        words = full["choices"][0]["text"].split(" ")
        if len(words) >= 3:
            break
    else:
        pytest.fail("precondition: the tiny model answered every prompt with fewer than 3 words")
    stop = " " + words[2]
    text = full["choices"][0]["text"]
    cut = client.post("/v1/completions", json={"prompt": prompt, "max_tokens": 8, "temperature": 0,
                                               "stop": [stop, "never-there"]}).json()["choices"][0]
    assert cut["text"] == text[: text.index(stop)] and cut["finish_reason"] == "stop"


# -- best-of-N and rewards ------------------------------------------------------------------
def test_best_of_returns_the_highest_scored_candidates(client):
    body = chat(client, max_tokens=6, n=2, best_of=5, return_scores=True).json()
    candidates = body["candidates"]
    assert len(candidates) == 5 and all(c["prompt_index"] == 0 for c in candidates)
    scores = [c["score"] for c in candidates]
    expected = sorted(range(5), key=lambda i: -scores[i])[:2]
    assert [c["candidate_index"] for c in body["choices"]] == expected
    for choice, i in zip(body["choices"], expected):
        assert choice["message"]["content"] == candidates[i]["text"]
        assert choice["score"] == pytest.approx(scores[i])
    # Every candidate's tokens are counted, not only the returned ones.
    assert body["usage"]["completion_tokens"] >= 5


def test_reward_endpoint_agrees_with_best_of_scores(client):
    body = chat(client, max_tokens=6, best_of=3, return_scores=True, seed=3).json()
    pairs = [{"prompt": MESSAGES, "response": c["text"], "ended": c["finish_reason"] == "stop"}
             for c in body["candidates"]]
    scores = client.post("/v1/rewards", json={"pairs": pairs}).json()["scores"]
    assert scores == pytest.approx([c["score"] for c in body["candidates"]], abs=1e-4)


def test_reward_endpoint_scores_and_ended_flag(client):
    pairs = [{"prompt": "what is 2 + 3 ?", "response": "5"}, {"prompt": "what is 2 + 3 ?", "response": "5",
                                                             "ended": False}]
    body = client.post("/v1/rewards", json={"pairs": pairs}).json()
    assert len(body["scores"]) == 2 and body["scores"][0] != body["scores"][1]


def test_server_default_best_of(service, client_for):
    client = client_for(service, best_of_default=3)
    body = chat(client, max_tokens=4, return_scores=True).json()
    assert len(body["candidates"]) == 3 and len(body["choices"]) == 1


def test_best_of_needs_a_reward_model(policy_only, client_for):
    client = client_for(policy_only)
    assert_error(chat(client, best_of=2), 400, code="reward_model_required")
    assert_error(chat(client, return_scores=True), 400, code="reward_model_required")
    assert_error(client.post("/v1/rewards", json={"pairs": [{"prompt": "a", "response": "b"}]}), 400,
                 code="reward_model_required")
    assert chat(client, n=2, max_tokens=2).status_code == 200


# -- errors ----------------------------------------------------------------------------------
@pytest.mark.parametrize("path, body, param", [
    ("/v1/chat/completions", {}, "messages"),
    ("/v1/chat/completions", {"messages": "hi"}, "messages"),
    ("/v1/chat/completions", {"messages": [{"role": "user"}], "n": "many"}, "n"),
    ("/v1/chat/completions", {"messages": MESSAGES, "temperature": -1}, "temperature"),
    ("/v1/chat/completions", {"messages": MESSAGES, "best_of": 1, "n": 2}, "best_of"),
    ("/v1/chat/completions", {"messages": MESSAGES, "n": 2, "stream": True}, "stream"),
    ("/v1/chat/completions", {"messages": MESSAGES, "max_tokens": 100000}, "max_tokens"),
    ("/v1/chat/completions", {"messages": MESSAGES, "max_tokens": 60}, "max_tokens"),  # past the 64-token context
    ("/v1/chat/completions", {"messages": MESSAGES, "n": 17}, "n"),
    ("/v1/chat/completions", {"messages": MESSAGES, "n": 2, "best_of": 17}, "best_of"),
    ("/v1/completions", {"prompt": {"text": "x"}}, "prompt"),
    ("/v1/completions", {"prompt": []}, "prompt"),
    ("/v1/completions", {"prompt": [100000]}, "prompt"),
    ("/v1/completions", {"prompt": ["a"] * 9, "n": 2}, "n"),
    ("/v1/completions", {"prompt": "word " * 70}, "prompt"),
    ("/v1/rewards", {"pairs": [{"prompt": "a"}]}, "pairs[0].response"),
    ("/v1/rewards", {"pairs": [{"prompt": "a", "response": "word " * 70}]}, "pairs[0]"),
])
def test_bad_input_is_a_400_naming_the_field(client, path, body, param):
    assert_error(client.post(path, json=body), 400, param=param)


@pytest.mark.parametrize("content", [b"{not json", b"[1, 2]", b"null", b"", b"\xff\xfe", b'"text"'])
def test_malformed_bodies_are_400(client, content):
    response = client.post("/v1/chat/completions", content=content, headers={"content-type": "application/json"})
    assert_error(response, 400)


def test_context_errors_have_the_openai_code(client):
    error = assert_error(chat(client, max_tokens=60), 400)
    assert error["code"] == "context_length_exceeded" and "64" in error["message"]


def test_unknown_model_is_404(client):
    assert_error(client.post("/v1/chat/completions", json={"model": "gpt-9", "messages": MESSAGES}), 404,
                 param="model", code="model_not_found")


def test_unknown_path_and_method(client):
    assert_error(client.get("/v1/nothing"), 404)
    assert_error(client.get("/v1/chat/completions"), 405)


def test_api_key(service, client_for):
    client = client_for(service, api_key="sekret")
    assert_error(chat(client), 401, code="invalid_api_key")
    assert_error(client.post("/v1/chat/completions", json={"messages": MESSAGES},
                             headers={"Authorization": "Bearer wrong"}), 401)
    assert_error(client.get("/v1/models", headers={"Authorization": "Basic sekret"}), 401)
    assert client.get("/v1/models", headers={"Authorization": "Bearer sekret"}).status_code == 200
    assert client.get("/health").status_code == 200  # health checks need no key


def test_body_size_limit(service, client_for):
    client = client_for(service, max_body_bytes=1000)
    big = {"messages": [{"role": "user", "content": "a " * 1000}]}
    assert_error(client.post("/v1/chat/completions", json=big), 413, code="request_too_large")

    def chunks():  # no Content-Length: the limit applies while reading
        yield b'{"messages": [{"role": "user", "content": "'
        for _ in range(50):
            yield b"a " * 20
        yield b'"}]}'

    assert_error(client.post("/v1/chat/completions", content=chunks(),
                             headers={"content-type": "application/json"}), 413)
    small = client.post("/v1/chat/completions", json={"messages": MESSAGES, "max_tokens": 2})
    assert small.status_code == 200
