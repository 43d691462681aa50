"""Checks that run before a request reaches a route: the API key (401) and the body size (413).

A pure ASGI middleware, so an oversized body is refused from its ``Content-Length`` without
being read, and a chunked body is read only up to the limit.
"""

from __future__ import annotations

import hmac

from starlette.datastructures import Headers
from starlette.responses import JSONResponse

from tether.serve.errors import error_body

PROTECTED = "/v1/"


class GuardMiddleware:
    def __init__(self, app, api_key: str | None, max_body_bytes: int):
        self.app = app
        self.api_key = api_key.encode() if api_key else None
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = Headers(scope=scope)
        if self.api_key is not None and scope["path"].startswith(PROTECTED) and not self._authorized(headers):
            return await _reject(401, error_body(
                "Missing or invalid API key: send it as the header 'Authorization: Bearer <key>'.",
                code="invalid_api_key"), scope, receive, send, {"WWW-Authenticate": "Bearer"})
        length = headers.get("content-length")
        if length is not None:
            if not length.strip().isdigit():
                return await _reject(400, error_body(f"Invalid Content-Length header {length!r}."),
                                     scope, receive, send)
            if int(length) > self.max_body_bytes:
                return await _reject(413, self._too_large(int(length)), scope, receive, send)
            return await self.app(scope, receive, send)
        if scope["method"] not in ("POST", "PUT", "PATCH"):
            return await self.app(scope, receive, send)
        # No Content-Length (chunked upload): read up to the limit, then replay the body.
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            more = message.get("more_body", False)
            if size > self.max_body_bytes:
                return await _reject(413, self._too_large(None), scope, receive, send)
        body, replayed = b"".join(chunks), False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        return await self.app(scope, replay, send)

    def _authorized(self, headers: Headers) -> bool:
        scheme, _, token = headers.get("authorization", "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), self.api_key)

    def _too_large(self, size: int | None) -> dict:
        what = f"{size} bytes" if size is not None else "larger than that"
        return error_body(f"The request body is {what}; this server accepts at most {self.max_body_bytes} bytes.",
                          code="request_too_large")


async def _reject(status: int, body: dict, scope, receive, send, headers: dict | None = None) -> None:
    await JSONResponse(body, status_code=status, headers=headers)(scope, receive, send)
