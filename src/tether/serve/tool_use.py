"""Tool use in chat completions: the request's tools checked, the history rendered for the chat
template, and the generated text answered as OpenAI ``tool_calls``.

The format is the one episodes train on (:mod:`tether.environments.tool_calls`): a call is a
Hermes/Qwen block ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` in the text the
model generates. The rules (docs/serving.md, "Tools"):

* ``tool_choice``: absent, ``"auto"`` or ``"none"``. Anything else (``"required"``, a named
  function) is a 400 (``unsupported_value``): the server samples freely and cannot force a call.
* ``tools``: OpenAI function schemas, checked by the environments' ``check_tools_schema``; a bad
  one is a 400 whose ``param`` names the entry (``tools[1].function.name``). They are given to the
  chat template (``apply_chat_template(..., tools=...)``), with ``"none"`` too; an empty list is no
  tools.
* history: an assistant message's ``tool_calls`` go to a template that renders them as they are
  (arguments as an object). For a template that does not (probed once per tokenizer: does it write
  a probe call's name?), they are written into the content as the text the model produced: the
  content, then one ``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`` block per
  call, each on its own line. ``tool`` messages go to the template with ``tool_call_id`` and
  ``name``.
* the answer, when tools are offered and ``tool_choice`` is not ``"none"``: each well-formed block
  is a tool call (``call_<hex>_<block>``, arguments a JSON string); ``content`` is the text outside
  them, stripped, or null when nothing is left; a malformed block (bad JSON, no name, arguments
  not an object, never closed) stays in ``content`` as the text it is. ``finish_reason`` is
  ``"tool_calls"`` when there is a call and generation stopped by itself (EOS or a stop sequence);
  an answer cut at ``max_tokens`` keeps ``"length"``. Without a well-formed block the answer is
  exactly what it is without tools.
"""

from __future__ import annotations

import json
import re
import uuid

from tether.common.errors import DataError
from tether.environments.tool_calls import CLOSE, OPEN, ToolCall, parse_block
from tether.environments.tools import check_tools_schema
from tether.serve.errors import bad_request

SUPPORTED_CHOICES = ("auto", "none")
_WHERE = "request"
_BLOCK = re.compile(re.escape(OPEN) + r"(.*?)" + re.escape(CLOSE), re.S)
_PROBE = "tether_probe_tool_7c1f"


# -- the request ------------------------------------------------------------------------------------
def check_tools(tools: object, tool_choice: object) -> list[dict] | None:
    """The tools to give the chat template (None: none), or a 400 naming the field."""
    if tool_choice is not None and tool_choice not in SUPPORTED_CHOICES:
        shown = json.dumps(tool_choice)[:120]
        raise bad_request(
            f"Unsupported 'tool_choice' {shown}: this server supports \"auto\" (the model decides) and \"none\" "
            "(answers are not parsed for tool calls); it samples freely, so it cannot force a call "
            "(\"required\" or a named function).", param="tool_choice", code="unsupported_value")
    if tools is None or tools == []:
        return None
    try:
        check_tools_schema(tools, _WHERE)
    except DataError as err:
        text = str(err).removeprefix(f"{_WHERE}: ")
        param, _, rest = text.partition(": ")
        if not param.startswith("tools"):
            param, rest = "tools", text
        raise bad_request(f"Invalid '{param}': {rest}", param=param) from None
    return tools


# -- the history ------------------------------------------------------------------------------------
def renders_tool_calls(tokenizer) -> bool:
    """Whether the tokenizer's chat template writes an assistant message's ``tool_calls`` (a
    template that fails on the probe conversation is taken not to)."""
    probe = [{"role": "user", "content": "hi"},
             {"role": "assistant", "content": "", "tool_calls": [
                 {"id": "call_probe", "type": "function", "function": {"name": _PROBE, "arguments": {}}}]}]
    try:
        text = tokenizer.apply_chat_template(probe, tokenize=False)
    except Exception:  # noqa: BLE001 - any template error means "does not render them"
        return False
    return isinstance(text, str) and _PROBE in text


def call_text(name: str, arguments: dict) -> str:
    """One call as the model writes it: a Hermes block."""
    return f"{OPEN}\n{json.dumps({'name': name, 'arguments': arguments}, ensure_ascii=False)}\n{CLOSE}"


def template_messages(messages: list[dict], renders_calls: bool) -> list[dict]:
    """``messages`` (``ChatMessage.as_dict``) for a chat template: assistant ``tool_calls`` kept for
    a template that renders them, else written into the content as Hermes blocks."""
    if renders_calls:
        return messages
    out = []
    for message in messages:
        calls = message.get("tool_calls")
        if calls:
            blocks = [call_text(c["function"]["name"], c["function"]["arguments"]) for c in calls]
            content = message.get("content") or ""
            message = {k: v for k, v in message.items() if k != "tool_calls"}
            message["content"] = "\n".join([content, *blocks] if content else blocks)
        out.append(message)
    return out


# -- the answer ------------------------------------------------------------------------------------
def split_tool_calls(text: str, id_prefix: str) -> tuple[str, list[ToolCall]]:
    """``text``'s well-formed calls (block ``i`` gets the id ``f"{id_prefix}_{i}"``, as
    :func:`~tether.environments.tool_calls.parse_tool_calls` numbers them) and the text without
    them, stripped; malformed blocks stay in that text. No call: ``text`` as it is."""
    kept, calls, end = [], [], 0
    for i, match in enumerate(_BLOCK.finditer(text)):
        parsed = parse_block(match.group(1).strip(), i, f"{id_prefix}_{i}")
        if isinstance(parsed, ToolCall):
            kept.append(text[end:match.start()])
            calls.append(parsed)
            end = match.end()
    if not calls:
        return text, []
    kept.append(text[end:])
    return "".join(kept).strip(), calls


def openai_calls(calls: list[ToolCall]) -> list[dict]:
    """Calls in OpenAI's response format (arguments a JSON string)."""
    return [{"id": c.id, "type": "function",
             "function": {"name": c.name, "arguments": json.dumps(c.arguments, ensure_ascii=False)}}
            for c in calls]


def answer(text: str, finish_reason: str) -> tuple[str | None, list[dict] | None, str]:
    """A generated text as an assistant message's ``content`` and ``tool_calls`` (None: none) and
    the choice's ``finish_reason`` (rules in the module docstring)."""
    content, calls = split_tool_calls(text, f"call_{uuid.uuid4().hex[:24]}")
    if not calls:
        return text, None, finish_reason
    return content or None, openai_calls(calls), "tool_calls" if finish_reason == "stop" else finish_reason
