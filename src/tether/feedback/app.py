"""`tether label`'s web app: one page (plain HTML and JavaScript, no build step) and a small JSON API.

GET /            the page (it fetches everything else)
GET /api/guidelines   the guideline text
POST /api/next   {"annotator"} -> the next pair to label, responses in the order to show them
POST /api/label  {"annotator", "pair_id", "verdict": "1" | "2" | "tie" | "skip", "left": "a" | "b"}
POST /api/undo   {"annotator"} -> takes back that annotator's last verdict

With a token, every request must carry it (header ``X-Tether-Token``, or ``?token=`` for the page,
which passes it on). Response text goes into the page as text nodes, never as HTML. Malformed
requests get 4xx, and so does a label for a pair this server did not hand to that annotator
(``/api/next``) or with other sides than it showed them: a client cannot label pairs of its
choosing, or choose which response counts as the left one.
"""

from __future__ import annotations

import hmac
from importlib import resources
from typing import Literal

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import HTMLResponse
from pydantic import BaseModel, Field

from tether.feedback.store import LabelStore, left_side

Annotator = Field(min_length=1, max_length=64, pattern=r"^[\w .@-]+$")


class Who(BaseModel):
    annotator: str = Annotator


class Verdict(BaseModel):
    annotator: str = Annotator
    pair_id: str = Field(min_length=1, max_length=200)
    verdict: Literal["1", "2", "tie", "skip"]
    left: Literal["a", "b"]


def create_label_app(store: LabelStore, guidelines: str = "", token: str | None = None) -> FastAPI:
    app = FastAPI(title="tether label", docs_url=None, redoc_url=None, openapi_url=None)
    page = resources.files("tether.feedback").joinpath("page.html").read_text(encoding="utf-8")

    def check(request: Request) -> None:
        if token is None:
            return
        given = request.headers.get("x-tether-token") or request.query_params.get("token") or ""
        if not hmac.compare_digest(given.encode(), token.encode()):
            raise HTTPException(401, "missing or wrong access token")

    guard = [Depends(check)]

    @app.get("/", response_class=HTMLResponse, dependencies=guard)
    def index() -> HTMLResponse:
        return HTMLResponse(page, headers={"Content-Security-Policy": "default-src 'self'; script-src 'unsafe-inline' "
                                           "'self'; style-src 'unsafe-inline'"})

    @app.get("/api/guidelines", dependencies=guard)
    def get_guidelines() -> dict:
        return {"text": guidelines}

    @app.post("/api/next", dependencies=guard)
    def next_pair(who: Who) -> dict:
        pair = store.next_for(who.annotator)
        progress = store.progress(who.annotator)
        if pair is None:
            return {"done": True, "progress": progress}
        left = left_side(pair.pair_id, who.annotator)
        a, b = pair.response_a, pair.response_b
        return {"done": False, "pair_id": pair.pair_id, "prompt": pair.prompt, "left": left,
                "left_text": a if left == "a" else b, "right_text": b if left == "a" else a, "progress": progress}

    @app.post("/api/label", dependencies=guard)
    def label(v: Verdict) -> dict:
        if v.pair_id not in store.by_id:
            raise HTTPException(404, f"no pair {v.pair_id!r} in the pairs file")
        if not store.was_handed(v.annotator, v.pair_id):
            raise HTTPException(409, f"pair {v.pair_id!r} was not handed to {v.annotator!r} by this server (or it "
                                     "restarted since): reload the page for the next pair")
        if v.left != left_side(v.pair_id, v.annotator):
            raise HTTPException(409, "the sides do not match the ones this annotator was shown")
        try:
            store.record(v.annotator, v.pair_id, v.verdict, v.left)
        except ValueError as err:
            raise HTTPException(409, str(err)) from None
        return {"ok": True, "progress": store.progress(v.annotator)}

    @app.post("/api/undo", dependencies=guard)
    def undo(who: Who) -> dict:
        return {"undone": store.undo(who.annotator), "progress": store.progress(who.annotator)}

    return app
