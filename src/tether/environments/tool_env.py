"""The ``tools`` environment: the model calls tools until it answers.

An episode opens with the row's messages (``messages``, or ``prompt`` as one user message) and
offers the row's ``tools`` (OpenAI-format schemas, checked) that the run registered code for; a
tool the row lists without registered code is not offered (it is left out of ``tools``, named in
``dropped_tools``), so rows written for a larger tool set still run. Each assistant turn is parsed
for ``<tool_call>`` blocks (:mod:`tether.environments.tool_calls`):

- no block: the turn is the final answer; the episode is done, with no reward (the run's reward
  sources score the whole episode);
- blocks: the well-formed calls run side by side on the shared :class:`ToolRunner`, and every block
  is answered by one ``tool`` message, in order (an error text for a malformed block or a failed
  call), and the episode goes on;
- the ``max_turns``-th assistant turn that still calls tools ends the episode, truncated; its
  calls are not run, since no turn would read their results.
"""

from __future__ import annotations

from collections import Counter

from tether.common.errors import ConfigError
from tether.environments.base import EnvironmentSettings, Episodes, Step, opening_messages
from tether.environments.tool_calls import MalformedCall, parse_tool_calls
from tether.environments.tools import ToolRunner, check_tools_schema, tool_message


class ToolEnvironment:
    """One tool-using episode at a time over a shared ``runner``; ``max_turns``: the most assistant
    turns an episode has (the last one truncates it if it still calls tools)."""

    def __init__(self, runner: ToolRunner, max_turns: int = 8):
        if not isinstance(max_turns, int) or max_turns < 1:
            raise ConfigError(f"Tool environment max_turns = {max_turns!r}: expected an integer >= 1.")
        self.runner, self.max_turns = runner, max_turns
        self.tools: list[dict] = []
        self.dropped_tools: tuple[str, ...] = ()
        self._schemas: dict[str, dict] = {}
        self._turn = 0
        self._done = True

    @classmethod
    def episodes(cls, settings: EnvironmentSettings) -> Episodes:
        """One environment per episode over one :class:`ToolRunner` of ``settings.tools``."""
        runner = ToolRunner(settings.tools, settings.tool_workers, settings.tool_timeout_s)
        return Episodes(lambda: cls(runner, settings.max_turns), runner.close)

    @staticmethod
    def check_row(row: dict, where: str = "the prompt row") -> None:
        """The row's opening messages and its ``tools`` (required: a list of OpenAI-format schemas)."""
        opening_messages(row, where)
        check_tools_schema(row.get("tools"), where)

    def reset(self, row: dict, where: str = "the prompt row") -> list[dict]:
        """Start an episode from ``row`` (named ``where`` in errors); returns its opening messages."""
        messages = opening_messages(row, where)
        schemas = check_tools_schema(row.get("tools"), where)
        registered = self.runner.names
        self.tools = [tool for tool in row["tools"] if tool["function"]["name"] in registered]
        self.dropped_tools = tuple(name for name in schemas if name not in registered)
        self._schemas = {name: schemas[name] for name in schemas if name in registered}
        self._turn, self._done = 0, False
        return messages

    def step(self, assistant_text: str) -> Step:
        """Answer one assistant turn (see the module docstring)."""
        if self._done:
            raise RuntimeError("ToolEnvironment.step after the episode ended: call reset(row) first.")
        self._turn += 1
        turn = parse_tool_calls(assistant_text, id_prefix=f"call_{self._turn}")
        counters = Counter(malformed_calls=len(turn.malformed))
        if not turn.blocks:
            self._done = True
            return Step([], None, done=True)
        if self._turn >= self.max_turns:
            self._done = True
            counters["tool_calls"] = len(turn.calls)  # made, not run
            return Step([], None, done=True, truncated=True, counters=dict(+counters))
        answers, ran = self.runner.run(turn.calls, self._schemas)
        counters.update(ran)
        by_index = {call.index: message for call, message in zip(turn.calls, answers)}
        by_index.update({bad.index: malformed_message(bad) for bad in turn.malformed})
        return Step([by_index[i] for i in sorted(by_index)], None, done=False, counters=dict(+counters))


def malformed_message(bad: MalformedCall) -> dict:
    """The ``tool`` message answering a block that is no call (so the model can write it again)."""
    return tool_message(bad.id, f"error: malformed tool call {bad.index + 1}: {bad.reason}; expected "
                                '<tool_call>{"name": ..., "arguments": {...}}</tool_call>')
