"""HTTP errors with OpenAI-shaped bodies: ``{"error": {"message", "type", "param", "code"}}``.

Bad input is a 4xx that says what to change; a 500 only ever means a bug in the server.
"""

from __future__ import annotations


def error_body(message: str, type: str = "invalid_request_error", param: str | None = None,
               code: str | None = None) -> dict:
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


class APIError(Exception):
    """Raised anywhere while handling a request; the app turns it into the JSON error response."""

    def __init__(self, status: int, message: str, type: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None, headers: dict | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code
        self.headers = headers or {}

    def body(self) -> dict:
        return error_body(self.message, self.type, self.param, self.code)


def bad_request(message: str, param: str | None = None, code: str | None = None) -> APIError:
    return APIError(400, message, "invalid_request_error", param, code)


def reward_model_required(what: str) -> APIError:
    return bad_request(
        f"{what} needs a reward model, and this server has none (start it with --reward-model PATH).",
        code="reward_model_required",
    )


def queue_full(depth: int) -> APIError:
    return APIError(429, f"The server's queue is full ({depth} requests waiting); retry shortly.",
                    "rate_limit_error", code="queue_full", headers={"Retry-After": "1"})


def shutting_down() -> APIError:
    return APIError(503, "The server is shutting down and accepts no new requests.", "server_error",
                    code="shutting_down", headers={"Retry-After": "5"})


def engine_stopped(reason: str) -> APIError:
    """The generation engine has died (vLLM's engine processes): nothing can be generated until
    the server is restarted. No Retry-After: waiting does not help."""
    return APIError(503, f"The server's generation engine has stopped ({reason}); it cannot generate until it is "
                         "restarted.", "server_error", code="engine_stopped")
