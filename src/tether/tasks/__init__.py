"""Embedded tasks (demo worlds shipped with tether) and judge loading.

``get_task(name)`` returns a task's module (e.g. :mod:`tether.tasks.arith`, which
provides ``build_task``); ``load_judge("package.module:function")`` imports a
judge callable such as ``tether.tasks.arith.judge:gold_score``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from types import ModuleType
from typing import Any

TASKS: dict[str, str] = {"arith": "tether.tasks.arith", "calc": "tether.tasks.calc", "steps": "tether.tasks.steps"}


def get_task(name: str) -> ModuleType:
    """The module of the embedded task ``name``; ``KeyError`` lists the known tasks."""
    try:
        module = TASKS[name]
    except KeyError:
        raise KeyError(f"unknown task {name!r}; known tasks: {', '.join(sorted(TASKS))}") from None
    return importlib.import_module(module)


def load_judge(spec: str) -> Callable[..., Any]:
    """Import ``"module:function"`` (dots allowed in the attribute path) and return the callable."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"judge spec must look like 'package.module:function', got {spec!r}")
    obj: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ValueError(f"judge spec {spec!r}: {module_name!r} has no attribute {attr!r}") from None
    if not callable(obj):
        raise ValueError(f"judge spec {spec!r} does not name a callable")
    return obj
