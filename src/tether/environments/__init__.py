"""Multi-turn episodes: an environment starts an episode from a prompt row and answers each
assistant turn with observation messages, an optional reward and whether the episode is over
(:mod:`tether.environments.base`). Torch-free; it works on chat messages, never on tokens.

The kinds are named in :mod:`tether.registry.environments` (``tools``: tool calls in the Hermes
format, run bounded; ``scripted``: follow-up user turns from the data); their modules are imported
through that table, not from here. What they share: :mod:`~tether.environments.tool_calls`
(parsing ``<tool_call>`` blocks) and :mod:`~tether.environments.tools` (OpenAI-format schemas,
argument checks, the bounded :class:`ToolRunner`).
"""

from tether.environments.base import COUNTERS, Environment, EpisodeStats, Step, batch_metrics
from tether.environments.tool_calls import MalformedCall, ParsedTurn, ToolCall, assistant_message, parse_tool_calls
from tether.environments.tools import ToolRunner, argument_error, check_tools_schema

__all__ = ["COUNTERS", "Environment", "EpisodeStats", "MalformedCall", "ParsedTurn", "Step", "ToolCall", "ToolRunner",
           "argument_error", "assistant_message", "batch_metrics", "check_tools_schema", "parse_tool_calls"]
