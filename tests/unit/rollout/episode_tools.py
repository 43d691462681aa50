"""Tools for the episode-engine tests, named 'episode_tools:NAME' (pytest puts this folder on sys.path)."""

from __future__ import annotations

import time


def add(a: int, b: int) -> int:
    return a + b


def boom() -> None:
    raise RuntimeError("the tool broke")


def sleepy() -> str:
    time.sleep(1.0)
    return "late"
