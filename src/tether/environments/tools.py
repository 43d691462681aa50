"""Tools: their schemas in the OpenAI format, the check of a call's arguments, and the runner
that calls them, bounded.

A prompt row offers tools under its ``tools`` key, each as OpenAI's chat API writes them::

    {"type": "function", "function": {"name": "add", "description": "Add two numbers.",
     "parameters": {"type": "object", "properties": {"a": {"type": "number"}}, "required": ["a"]}}}

``parameters`` is a JSON Schema of the arguments object (absent: the tool takes none). A call's
arguments are validated against it with ``jsonschema`` before the tool runs. The tools' code is
registered by the run's settings as ``{name: "module:function"}``; a tool is called as
``function(**arguments)``, and what it returns becomes the ``tool`` message's content (a string as
it is, anything else through ``json.dumps``).

Tools are outside code, so :class:`ToolRunner` bounds them: every call runs on one thread pool
shared by all episodes (``max_workers``) and gets ``timeout_s`` seconds from the moment it is
submitted (time waiting for a free worker included). Whatever goes wrong with a call (an unknown
tool, arguments that do not fit the schema, an exception, no answer in time) becomes an error
``tool`` message (``"error: ..."``, naming the tool and the cause) and a counter, never an
exception: the model reads the error and the run goes on.

A thread cannot be killed in Python. A tool that does not return in time is abandoned, not
stopped: it keeps its worker until it returns, so hung tools take workers from the pool, and the
pool's size bounds how many can hang at once. :attr:`ToolRunner.hung` counts them; when every
worker is taken, new calls wait in the queue and time out unstarted (their message says so).
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait

from tether.common.errors import ConfigError, DataError, one_line
from tether.common.targets import import_callable
from tether.environments.base import describe
from tether.environments.tool_calls import ToolCall

#: OpenAI's rule for a function's name.
NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
NO_PARAMETERS = {"type": "object", "properties": {}}


def _schema_error(where: str, key: str, expected: str, got: object = ...) -> DataError:
    text = f"{where}: {key}: expected {expected}"
    return DataError(text + (f", got {describe(got)}" if got is not ... else "") + ".")


def check_parameters(parameters: object, where: str, key: str) -> dict:
    """A function's ``parameters``: a valid JSON Schema of an object (``"type": "object"``)."""
    if not isinstance(parameters, dict) or parameters.get("type") != "object":
        raise _schema_error(where, key, 'a JSON Schema object with "type": "object" (the arguments are an object)',
                            parameters)
    import jsonschema  # imported where used: only tool-using runs need it (not e.g. the GPU image's bench)

    try:
        jsonschema.validators.validator_for(parameters).check_schema(parameters)
    except jsonschema.exceptions.SchemaError as err:
        at = "/".join(map(str, err.path))
        raise _schema_error(where, f"{key}{'/' + at if at else ''}",
                            f"a valid JSON Schema ({one_line(err.message, 200)})") from None
    return parameters


def check_tools_schema(tools: object, where: str, key: str = "tools") -> dict[str, dict]:
    """Check a row's ``tools`` (a list of OpenAI-format tool schemas) and return each tool's
    ``parameters`` by name. A :class:`DataError` names ``where`` (e.g. "prompts.jsonl row 7"), the
    entry and what was expected: a malformed schema is the data's fault, found before a run."""
    if not isinstance(tools, list):
        raise _schema_error(where, key, 'a list of tools [{"type": "function", "function": {...}}, ...]', tools)
    out: dict[str, dict] = {}
    for i, tool in enumerate(tools):
        at = f"{key}[{i}]"
        if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(tool.get("function"), dict):
            raise _schema_error(where, at, '{"type": "function", "function": {"name": ..., "parameters": ...}}', tool)
        function = tool["function"]
        name = function.get("name")
        if not isinstance(name, str) or not NAME.match(name):
            raise _schema_error(where, f"{at}.function.name", "1 to 64 letters, digits, '_' or '-'", name)
        if name in out:
            raise _schema_error(where, f"{at}.function.name", f"a name no other tool of the row has ({name!r} twice)")
        if not isinstance(function.get("description", ""), str):
            raise _schema_error(where, f"{at}.function.description", "a string", function["description"])
        parameters = function.get("parameters", NO_PARAMETERS)
        out[name] = check_parameters(parameters, where, f"{at}.function.parameters")
    return out


def argument_error(arguments: dict, parameters: dict) -> str | None:
    """Why ``arguments`` do not fit the ``parameters`` schema (the most relevant error, with where
    in the arguments it is), or None when they do."""
    import jsonschema

    validator = jsonschema.validators.validator_for(parameters)(parameters)
    error = jsonschema.exceptions.best_match(validator.iter_errors(arguments))
    if error is None:
        return None
    at = "/".join(map(str, error.absolute_path))
    return f"{at + ': ' if at else ''}{one_line(error.message, 200)}"


def tool_message(call_id: str, content: str, name: str | None = None) -> dict:
    """A ``tool`` message answering call ``call_id`` (OpenAI format; ``name`` is the tool's)."""
    message = {"role": "tool", "tool_call_id": call_id, "content": content}
    if name is not None:
        message["name"] = name
    return message


def as_content(value: object) -> str:
    """A tool's return value as message content: a string as it is, anything else as JSON."""
    return value if isinstance(value, str) else json.dumps(value)


class ToolRunner:
    """The registered tools and the bounded pool that runs them, shared by every episode.

    ``tools``: ``{name: "module:function"}`` (or the function itself), imported here, so a wrong
    target is a :class:`ConfigError` naming ``key.name`` before any episode. ``max_workers``: the
    pool's threads (the most calls running at once, hung ones included). ``timeout_s``: how long
    a call gets from its submission. :meth:`run` may be called from several threads at once (one
    per episode in flight): they share the pool, and each gets its own answers and counters.
    """

    def __init__(self, tools: Mapping[str, str | Callable], max_workers: int = 4, timeout_s: float = 10.0,
                 key: str = "environment.tools"):
        if not isinstance(max_workers, int) or max_workers < 1:
            raise ConfigError(f"Tool runner max_workers = {max_workers!r}: expected an integer >= 1.")
        if not timeout_s > 0:
            raise ConfigError(f"Tool runner timeout_s = {timeout_s!r}: expected seconds > 0.")
        for name in tools:
            if not isinstance(name, str) or not NAME.match(name):
                raise ConfigError(f"Config key '{key}': tool name {name!r}: expected 1 to 64 letters, digits, "
                                  "'_' or '-'.")
        self.functions = {name: fn if callable(fn) else import_callable(fn, f"{key}.{name}")
                          for name, fn in tools.items()}
        self.max_workers, self.timeout_s = max_workers, float(timeout_s)
        self._pool = ThreadPoolExecutor(max_workers, thread_name_prefix="tether-tool")
        self._lock = threading.Lock()
        self._hung = 0

    @property
    def names(self) -> frozenset[str]:
        """The registered tools' names."""
        return frozenset(self.functions)

    @property
    def hung(self) -> int:
        """Calls that timed out and still hold a worker (they return when they return)."""
        with self._lock:
            return self._hung

    def run(self, calls: Sequence[ToolCall], schemas: Mapping[str, dict]) -> tuple[list[dict], Counter]:
        """Run ``calls`` side by side and answer each with one ``tool`` message, in order.

        ``schemas``: the ``parameters`` of the tools the episode offers, by name; a call to a tool
        outside them (or not registered) is an unknown tool. Returns the messages and the counters
        (``tool_calls``, and ``unknown_tools``, ``bad_arguments``, ``tool_errors``, ``tool_timeouts``
        for the failures); never raises for what a tool or a call does."""
        counters = Counter(tool_calls=len(calls))
        answers: dict[int, dict] = {}
        running: list[tuple[ToolCall, Future, float]] = []
        offered = ", ".join(sorted(n for n in schemas if n in self.functions)) or "none"
        for call in calls:
            if call.name not in schemas or call.name not in self.functions:
                counters["unknown_tools"] += 1
                answers[call.index] = self._error(call, f"unknown tool {call.name!r} (offered: {offered})")
            elif (why := argument_error(call.arguments, schemas[call.name])) is not None:
                counters["bad_arguments"] += 1
                answers[call.index] = self._error(call, f"tool {call.name!r} got wrong arguments: {why}")
            else:
                future = self._pool.submit(self.functions[call.name], **call.arguments)
                running.append((call, future, time.monotonic() + self.timeout_s))
        for call, future, deadline in running:
            answers[call.index] = self._answer(call, future, deadline, counters)
        return [answers[call.index] for call in calls], +counters

    def _answer(self, call: ToolCall, future: Future, deadline: float, counters: Counter) -> dict:
        """The message for a submitted call: its result, its exception, or its timeout."""
        done, _ = wait([future], timeout=max(deadline - time.monotonic(), 0.0))
        if not done:
            counters["tool_timeouts"] += 1
            if future.cancel():  # still queued: every worker was taken
                return self._error(call, f"tool {call.name!r} did not start within {self.timeout_s:g} s: all "
                                         f"{self.max_workers} workers were busy ({self.hung} hung)")
            with self._lock:
                self._hung += 1
            future.add_done_callback(self._unhang)
            return self._error(call, f"tool {call.name!r} did not return within {self.timeout_s:g} s")
        err = future.exception()
        if err is not None:
            counters["tool_errors"] += 1
            return self._error(call, f"tool {call.name!r} raised {type(err).__name__}: {one_line(err, 200)}")
        try:
            return tool_message(call.id, as_content(future.result()), call.name)
        except (TypeError, ValueError) as err:
            counters["tool_errors"] += 1
            return self._error(call, f"tool {call.name!r} returned what JSON cannot hold ({one_line(err, 120)})")

    def _unhang(self, _future: Future) -> None:
        with self._lock:
            self._hung -= 1

    @staticmethod
    def _error(call: ToolCall, cause: str) -> dict:
        return tool_message(call.id, f"error: {cause}", call.name)

    def close(self) -> None:
        """Stop taking calls and drop the queued ones; hung threads are left to end (see above)."""
        self._pool.shutdown(wait=False, cancel_futures=True)

    def __enter__(self) -> ToolRunner:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
