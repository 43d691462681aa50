"""The tool of the calc task: ``environment.tools: [tether.tasks.calc.tools:calculator]``.

The tools environment checks a call's arguments against the row's schema
(:data:`tether.tasks.calc.world.TOOL_SCHEMA`: ``a`` and ``b`` integers, both required) before the
function runs, so a call that gets here has two integers; what it returns becomes the ``tool``
message (``148``).
"""

from __future__ import annotations


def calculator(a: int, b: int) -> int:
    """``a`` times ``b``."""
    return int(a) * int(b)
