"""The labelling API through FastAPI's TestClient: the flow, the token, and 4xx for bad requests."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from tether.feedback.app import create_label_app
from tether.feedback.store import LabelStore, Pair, left_side

PAIRS = [Pair("p0", "2 + 2 ?", "<script>alert(1)</script> 4", "5"), Pair("p1", "3 + 3 ?", "6", "7")]


@pytest.fixture
def client(tmp_path):
    with TestClient(create_label_app(LabelStore(PAIRS, tmp_path / "l.jsonl"), "Prefer correct answers.")) as c:
        yield c


def test_next_label_undo(client):
    assert client.get("/api/guidelines").json() == {"text": "Prefer correct answers."}
    page = client.get("/")
    assert page.status_code == 200 and "textContent" in page.text and "innerHTML" not in page.text
    nxt = client.post("/api/next", json={"annotator": "ann"}).json()
    assert nxt["pair_id"] == "p0" and {nxt["left_text"], nxt["right_text"]} == {PAIRS[0].response_a, "5"}
    done = client.post("/api/label", json={"annotator": "ann", "pair_id": "p0", "verdict": "1", "left": nxt["left"]})
    assert done.json()["progress"]["labelled"] == 1
    assert client.post("/api/next", json={"annotator": "ann"}).json()["pair_id"] == "p1"
    assert client.post("/api/undo", json={"annotator": "ann"}).json()["undone"] == "p0"


@pytest.mark.parametrize("path, body, status", [
    ("/api/label", {"annotator": "ann", "pair_id": "p0", "verdict": "3", "left": "a"}, 422),
    ("/api/label", {"annotator": "ann", "pair_id": "nope", "verdict": "1", "left": "a"}, 404),
    ("/api/label", {"annotator": "", "pair_id": "p0", "verdict": "1", "left": "a"}, 422),
    ("/api/label", {"annotator": "a<b", "pair_id": "p0", "verdict": "1", "left": "a"}, 422),
    ("/api/next", {}, 422),
    ("/api/next", "not json", 422),
])
def test_malformed_requests_get_4xx(client, path, body, status):
    resp = client.post(path, json=body) if not isinstance(body, str) else client.post(path, content=body)
    assert resp.status_code == status


def test_the_sides_must_be_the_ones_shown(client):
    nxt = client.post("/api/next", json={"annotator": "ann"}).json()
    wrong = "b" if nxt["left"] == "a" else "a"
    resp = client.post("/api/label", json={"annotator": "ann", "pair_id": "p0", "verdict": "1", "left": wrong})
    assert resp.status_code == 409


def test_a_token_is_required_when_set(tmp_path):
    app = create_label_app(LabelStore(PAIRS, tmp_path / "l.jsonl"), token="s3cret")
    with TestClient(app) as c:
        assert c.get("/").status_code == 401
        assert c.get("/?token=s3cret").status_code == 200
        assert c.post("/api/next", json={"annotator": "ann"}).status_code == 401
        assert c.post("/api/next", json={"annotator": "ann"}, headers={"X-Tether-Token": "s3cret"}).status_code == 200


def test_a_label_must_answer_a_pair_the_server_handed_to_that_annotator(client):
    """A client could label any pair, for any annotator, with sides it chose itself (only the sides
    were checked, and they can be computed): now a label answers a pair /api/next handed out."""
    p1 = {"annotator": "ann", "pair_id": "p1", "verdict": "1", "left": left_side("p1", "ann")}
    resp = client.post("/api/label", json=p1)  # never handed out: p0 is ann's next pair
    assert resp.status_code == 409 and "not handed to 'ann'" in resp.json()["detail"]
    nxt = client.post("/api/next", json={"annotator": "ann"}).json()
    as_bob = {"annotator": "bob", "pair_id": nxt["pair_id"], "verdict": "1", "left": left_side(nxt["pair_id"], "bob")}
    assert client.post("/api/label", json=as_bob).status_code == 409  # handed to ann, not to bob
    mine = {"annotator": "ann", "pair_id": nxt["pair_id"], "verdict": "1", "left": nxt["left"]}
    assert client.post("/api/label", json=mine).status_code == 200
    assert client.post("/api/label", json=mine).status_code == 409  # answered: not a second time
    assert client.post("/api/undo", json={"annotator": "ann"}).json()["undone"] == nxt["pair_id"]
    again = client.post("/api/next", json={"annotator": "ann"}).json()  # handed out again after the undo
    assert again["pair_id"] == nxt["pair_id"]
    assert client.post("/api/label", json=mine).status_code == 200
