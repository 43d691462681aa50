"""The ``scripted`` environment: a multi-turn conversation whose user turns come from the data.

A row holds the opening conversation (``messages``, or ``prompt`` as one user message) and
``follow_ups``: the user's next messages, each a string or a ``{"role": "user", "content": ...}``
message. After each assistant turn the next follow-up is the observation; the assistant turn after
the last one ends the episode. No reward: the run's reward sources score the whole episode.
"""

from __future__ import annotations

from tether.environments.base import EnvironmentSettings, Episodes, Step, opening_messages, row_error


def follow_ups(row: dict, where: str) -> list[dict]:
    """The row's ``follow_ups`` as user messages; a DataError naming ``where`` and the entry otherwise."""
    value = row.get("follow_ups") if isinstance(row, dict) else None
    if not isinstance(value, list):
        raise row_error(where, "follow_ups", "a list of user messages (strings or {\"role\": \"user\", "
                                             "\"content\": ...})", value)
    out = []
    for i, item in enumerate(value):
        if isinstance(item, str) and item.strip():
            out.append({"role": "user", "content": item})
        elif isinstance(item, dict) and item.get("role") == "user" and isinstance(item.get("content"), str):
            out.append({"role": "user", "content": item["content"]})
        else:
            raise row_error(where, f"follow_ups[{i}]", "a non-empty string or a {\"role\": \"user\", \"content\": "
                                                       "str} message", item)
    return out


class ScriptedEnvironment:
    """One scripted conversation at a time: the follow-ups of the row, one per assistant turn."""

    def __init__(self):
        self.tools: list[dict] = []  # a scripted conversation offers no tools
        self._pending: list[dict] = []
        self._done = True

    @classmethod
    def episodes(cls, settings: EnvironmentSettings) -> Episodes:
        """A fresh scripted environment per episode (they share nothing)."""
        return Episodes(cls)

    @staticmethod
    def check_row(row: dict, where: str = "the prompt row") -> None:
        """The row's opening messages and its ``follow_ups``."""
        opening_messages(row, where)
        follow_ups(row, where)

    def reset(self, row: dict, where: str = "the prompt row") -> list[dict]:
        """Start an episode from ``row`` (named ``where`` in errors); returns its opening messages."""
        messages = opening_messages(row, where)
        self._pending = follow_ups(row, where)
        self._done = False
        return messages

    def step(self, assistant_text: str) -> Step:
        """The next follow-up, or the end of the episode when none is left."""
        if self._done:
            raise RuntimeError("ScriptedEnvironment.step after the episode ended: call reset(row) first.")
        if not self._pending:
            self._done = True
            return Step([], None, done=True)
        return Step([self._pending.pop(0)], None, done=False)
