"""Errors tether raises on purpose. Each carries a message a user can act on.

The CLI catches ``TetherError`` and prints ``str(err)`` with exit code 2, never a traceback.
"""


class TetherError(Exception):
    """Base class: a user-facing error with a complete, actionable message."""


class ConfigError(TetherError):
    """A config key is unknown or a value is out of range. The message names the key."""


class DataError(TetherError):
    """A dataset file or row is malformed. The message names the file, row and field."""


class ModelError(TetherError):
    """A model or tokenizer cannot be loaded or is unfit for the role asked of it."""


class TrainingError(TetherError):
    """Training hit a broken invariant (non-finite loss, ratio far from 1, ...)."""


def one_line(text, limit: int = 400) -> str:
    """A library's message as one line of at most about ``limit`` characters, for a one-paragraph
    error: whitespace collapsed, and a cut made at a word boundary and marked with "...", so no
    word (a path, a key, a number) is shown half."""
    text = " ".join(str(text).split())
    if len(text) <= limit:
        return text
    cut = text[:limit]
    if " " in cut and not text[limit].isspace():
        cut = cut.rsplit(" ", 1)[0]
    return cut.rstrip(" ,;:") + " ..."
