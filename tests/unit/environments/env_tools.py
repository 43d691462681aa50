"""Tools for the environment tests, named by 'env_tools:NAME' (pytest puts this folder on sys.path)."""

from __future__ import annotations

import threading
import time

#: Set by ``wait_for_release`` callers: how a test frees a tool it left hanging.
RELEASE = threading.Event()


def add(a: float, b: float) -> float:
    return a + b


def echo(text: str) -> str:
    return text


def boom(reason: str = "no") -> None:
    raise ValueError(f"it broke: {reason}")


def sleepy(seconds: float) -> str:
    time.sleep(seconds)
    return "woke"


def hang() -> str:
    """Blocks until the test sets RELEASE (a tool that never answers in time)."""
    RELEASE.wait(5.0)
    return "released"


def stamp(seconds: float) -> list[float]:
    """[start, end] monotonic times of a call that takes ``seconds``: tells parallel calls apart."""
    start = time.monotonic()
    time.sleep(seconds)
    return [start, time.monotonic()]


def unencodable() -> object:
    return object()


def schema(name: str, properties: dict | None = None, required: tuple[str, ...] = ()) -> dict:
    """An OpenAI-format tool schema of ``name`` with these properties."""
    return {"type": "function", "function": {"name": name, "description": f"the {name} tool", "parameters": {
        "type": "object", "properties": properties or {}, "required": list(required)}}}


NUMBER, STRING = {"type": "number"}, {"type": "string"}
SCHEMAS = {
    "add": schema("add", {"a": NUMBER, "b": NUMBER}, ("a", "b")),
    "echo": schema("echo", {"text": STRING}, ("text",)),
    "boom": schema("boom", {"reason": STRING}),
    "sleepy": schema("sleepy", {"seconds": NUMBER}, ("seconds",)),
    "hang": schema("hang"),
    "stamp": schema("stamp", {"seconds": NUMBER}, ("seconds",)),
    "unencodable": schema("unencodable"),
}
TARGETS = {name: f"env_tools:{name}" for name in SCHEMAS}
