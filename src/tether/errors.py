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
