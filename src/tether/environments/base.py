"""What an environment is: the protocol every environment kind answers, the record of one turn,
and an episode's running totals.

An episode is a conversation. ``reset(row)`` gives its opening messages (from a prompt row);
then each assistant turn goes to ``step(text)``, which answers with a :class:`Step`: the
observation messages that follow the turn, an optional reward for it, whether the episode is
over, and what went wrong along the way (``counters``). Everything here works on messages
(``{"role", "content"}`` dicts, with ``tool_calls``/``tool_call_id``/``name`` where the OpenAI
chat format has them); the token layer renders them with the chat template elsewhere.

An environment object holds one episode at a time: a run makes one per episode in flight.
What episodes share (a tool runner's thread pool) is built once and handed to each.
"""

from __future__ import annotations

import reprlib
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from tether.common.errors import DataError

#: Every counter a built-in environment reports in :attr:`Step.counters` (a turn reports the ones
#: that are not zero). ``tool_calls``: well-formed calls the turn made; the others say what failed.
COUNTERS = ("tool_calls", "malformed_calls", "unknown_tools", "bad_arguments", "tool_errors", "tool_timeouts")

_repr = reprlib.Repr()
_repr.maxstring, _repr.maxother, _repr.maxlevel, _repr.maxlist, _repr.maxdict = 40, 40, 2, 3, 3


@dataclass(frozen=True)
class Step:
    """The environment's answer to one assistant turn.

    ``observation``: the messages that follow the turn (tool results, a user's next message);
    empty when the episode is over. ``reward``: this turn's reward, None when the environment
    gives none. ``done``: the episode is over. ``truncated``: it ended because it reached its
    turn limit, not because it was finished. ``counters``: what the turn did and what failed
    (names from :data:`COUNTERS`), zeros left out.
    """

    observation: list[dict] = field(default_factory=list)
    reward: float | None = None
    done: bool = False
    truncated: bool = False
    counters: dict[str, int] = field(default_factory=dict)


@runtime_checkable
class Environment(Protocol):
    """One environment kind, as the registry's ``"module:Class"`` names it.

    ``tools``: the tool schemas (OpenAI format) offered to the model in the episode under way, for
    the chat template (empty when it offers none). ``check_row(row, where)`` refuses a prompt row
    it cannot start from with a :class:`DataError` naming ``where`` (so a run checks every row before
    it starts); ``reset`` calls it too.
    """

    tools: list[dict]

    def check_row(self, row: dict, where: str = "the prompt row") -> None: ...

    def reset(self, row: dict, where: str = "the prompt row") -> list[dict]: ...

    def step(self, assistant_text: str) -> Step: ...


@dataclass(frozen=True)
class EnvironmentSettings:
    """What a run hands an environment kind (its ``environment`` block): the turn cap, the tools
    kind's code ({name: 'module:function'}), its call timeout and pool size, a plugin's ``args``."""

    max_turns: int = 4
    tools: Mapping[str, str] = field(default_factory=dict)
    tool_timeout_s: float = 10.0
    tool_workers: int = 4
    args: Mapping[str, str] = field(default_factory=dict)


class Episodes:
    """Makes one environment per episode (``make()``), over what they share; ``close()`` frees that
    (a tool runner's threads). An environment class answers ``episodes(settings) -> Episodes``."""

    def __init__(self, make: Callable[[], Environment], close: Callable[[], None] | None = None):
        self._make, self._close = make, close

    def __call__(self) -> Environment:
        return self._make()

    def close(self) -> None:
        if self._close is not None:
            self._close()


@dataclass(frozen=True)
class EpisodeStats:
    """An episode's totals so far: turns stepped, rewards given, whether it was truncated, and
    its counters summed. Immutable: :meth:`plus` returns the totals after one more step."""

    turns: int = 0
    reward: float = 0.0
    truncated: bool = False
    counters: Mapping[str, int] = field(default_factory=dict)

    def plus(self, step: Step) -> EpisodeStats:
        """These totals with ``step`` added."""
        counters = Counter(self.counters)
        counters.update(step.counters)
        return EpisodeStats(self.turns + 1, self.reward + (step.reward or 0.0), self.truncated or step.truncated,
                            dict(counters))


def batch_metrics(episodes: Iterable[EpisodeStats], prefix: str = "env/") -> dict[str, float]:
    """A batch of finished episodes as metrics: ``env/turns`` (mean turns per episode),
    ``env/truncated`` (the fraction truncated) and ``env/<counter>`` (each counter's total over
    the batch: failures are counted, not averaged away). Empty for no episodes."""
    episodes = list(episodes)
    if not episodes:
        return {}
    totals = Counter()
    for episode in episodes:
        totals.update(episode.counters)
    out = {f"{prefix}turns": sum(e.turns for e in episodes) / len(episodes),
           f"{prefix}truncated": sum(e.truncated for e in episodes) / len(episodes)}
    out.update({f"{prefix}{name}": float(totals[name]) for name in sorted(totals)})
    return out


def describe(value: object) -> str:
    """A value as an error names what it got: its kind and a short repr, one line."""
    if value is None:
        return "null"
    if isinstance(value, str) and not value.strip():
        return "a whitespace-only string" if value else "an empty string"
    kinds = {bool: "the boolean", str: "the string", list: "the list", dict: "the object", int: "the number",
             float: "the number"}
    return f"{kinds.get(type(value), f'a value of type {type(value).__name__}')} {_repr.repr(value)}"


def row_error(where: str, key: str, expected: str, got: object = ...) -> DataError:
    """``where: field 'key': expected ..., got ...`` (the shape of every row error in tether)."""
    text = f"{where}: field '{key}': expected {expected}"
    return DataError(text + (f", got {describe(got)}" if got is not ... else ""))


def check_messages(value: object, where: str, key: str) -> list[dict]:
    """``value`` as a non-empty list of chat messages (each a dict with a string ``role`` and a
    string ``content``; an assistant message with ``tool_calls`` may have null content); a
    :class:`DataError` naming ``where`` and ``key[i]`` otherwise. Returns shallow copies."""
    if not isinstance(value, list) or not value:
        raise row_error(where, key, 'a non-empty list of chat messages [{"role": ..., "content": ...}, ...]', value)
    out = []
    for i, message in enumerate(value):
        at = f"{key}[{i}]"
        if not isinstance(message, dict):
            raise row_error(where, at, 'a chat message {"role": ..., "content": ...}', message)
        role, content = message.get("role"), message.get("content")
        if not isinstance(role, str) or not role.strip():
            raise row_error(where, f"{at}.role", "a non-empty string such as 'system', 'user', 'assistant' or 'tool'",
                            role)
        if not isinstance(content, str) and not (content is None and message.get("tool_calls")):
            raise row_error(where, f"{at}.content", "a string", content)
        out.append(dict(message))
    return out


def opening_messages(row: object, where: str) -> list[dict]:
    """The opening messages of an episode from a prompt row: ``row["messages"]`` (a list of chat
    messages), else ``row["prompt"]`` (a string, as one user message, or a list of messages), the
    two prompt-row shapes tether reads everywhere. A :class:`DataError` naming ``where`` otherwise."""
    if not isinstance(row, dict):
        raise DataError(f"{where}: expected a JSON object per row, got {describe(row)}")
    if "messages" in row:
        return check_messages(row["messages"], where, "messages")
    prompt = row.get("prompt")
    if isinstance(prompt, str) and prompt.strip():
        return [{"role": "user", "content": prompt}]
    if isinstance(prompt, list):
        return check_messages(prompt, where, "prompt")
    if "prompt" in row:
        raise row_error(where, "prompt", "a non-empty string or a list of chat messages", prompt)
    raise DataError(f"{where}: no field 'messages' or 'prompt' (present: {', '.join(map(str, row)) or 'none'}); "
                    "expected the episode's opening messages in 'messages' (or a prompt string in 'prompt').")
