"""Tool calls in assistant text: the Hermes format that Qwen's chat templates use.

The one rule: a tool call is a block ``<tool_call>{"name": NAME, "arguments": {...}}</tool_call>``
whose body (whitespace around it ignored) is one JSON object with a string ``name`` and an object
``arguments`` (absent means ``{}``, a tool without parameters; other keys are ignored). A turn holds
zero or more blocks; the text outside them is the assistant's content. A ``<tool_call>`` that is
never closed (a turn cut off mid-call) is a malformed call, and the text from it onward is no
content.

Parsing never raises: each block is either a :class:`ToolCall` or a :class:`MalformedCall` (invalid
JSON, no string name, arguments not an object, unclosed), numbered in the order the blocks appear,
so the answers can be given in that order.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

OPEN, CLOSE = "<tool_call>", "</tool_call>"
_BLOCK = re.compile(re.escape(OPEN) + r"(.*?)" + re.escape(CLOSE), re.S)


@dataclass(frozen=True)
class ToolCall:
    """A well-formed call: the block's ``index`` in the turn, its ``id`` (for the ``tool`` message
    that answers it), the tool's ``name`` and its ``arguments``."""

    index: int
    id: str
    name: str
    arguments: dict


@dataclass(frozen=True)
class MalformedCall:
    """A block that is no call: its ``index`` in the turn, its ``id``, why (``reason``, one short
    phrase) and the block's body as written (``text``)."""

    index: int
    id: str
    reason: str
    text: str


@dataclass(frozen=True)
class ParsedTurn:
    """One assistant turn: its ``content`` (the text outside the blocks, stripped), its well-formed
    ``calls`` and its ``malformed`` blocks, each in the order they appear."""

    content: str
    calls: list[ToolCall] = field(default_factory=list)
    malformed: list[MalformedCall] = field(default_factory=list)

    @property
    def blocks(self) -> int:
        """How many ``<tool_call>`` blocks the turn holds, well-formed or not."""
        return len(self.calls) + len(self.malformed)


def parse_block(body: str, index: int, call_id: str) -> ToolCall | MalformedCall:
    """One block's body as a call, or why it is not one."""
    try:
        value = json.loads(body)
    except json.JSONDecodeError as err:
        return MalformedCall(index, call_id, f"invalid JSON ({err.msg} at character {err.pos})", body)
    if not isinstance(value, dict):
        return MalformedCall(index, call_id, f"expected a JSON object, got a JSON {type(value).__name__}", body)
    name = value.get("name")
    if not isinstance(name, str) or not name.strip():
        return MalformedCall(index, call_id, "no \"name\" (a non-empty string)", body)
    arguments = value.get("arguments", {})
    if not isinstance(arguments, dict):
        kind = "string" if isinstance(arguments, str) else type(arguments).__name__
        return MalformedCall(index, call_id, f"\"arguments\" of tool {name!r} is a JSON {kind}, not an object", body)
    return ToolCall(index, call_id, name.strip(), arguments)


def parse_tool_calls(text: str, id_prefix: str = "call") -> ParsedTurn:
    """The tool calls of assistant ``text`` (the format in the module docstring). Block ``i`` gets
    the id ``f"{id_prefix}_{i}"``."""
    content, blocks, end = [], [], 0
    for match in _BLOCK.finditer(text):
        content.append(text[end:match.start()])
        blocks.append(match.group(1))
        end = match.end()
    rest = text[end:]
    unclosed = rest.find(OPEN)
    if unclosed >= 0:
        content.append(rest[:unclosed])
    else:
        content.append(rest)
    calls, malformed = [], []
    for i, body in enumerate(blocks):
        parsed = parse_block(body.strip(), i, f"{id_prefix}_{i}")
        (calls if isinstance(parsed, ToolCall) else malformed).append(parsed)
    if unclosed >= 0:
        i = len(blocks)
        malformed.append(MalformedCall(i, f"{id_prefix}_{i}", f"no closing {CLOSE}", rest[unclosed + len(OPEN):]))
    return ParsedTurn("".join(content).strip(), calls, malformed)


def assistant_message(turn: ParsedTurn) -> dict:
    """The turn as an OpenAI-format assistant message (for transcripts): its content, and its
    well-formed calls as ``tool_calls`` (arguments as a JSON string, as that format has them)."""
    message = {"role": "assistant", "content": turn.content}
    if turn.calls:
        message["tool_calls"] = [{"id": c.id, "type": "function",
                                  "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
                                 for c in turn.calls]
    return message
