"""``'package.module:attr'`` strings -> the object they name: how config keys (``reward.callable``,
``eval.judge``) and the registries (algorithms, generation engines, stages) refer to code they
import only when it is used. Imports nothing heavy."""

from __future__ import annotations

import importlib
from collections.abc import Callable

from tether.common.errors import ConfigError


def import_callable(spec: str, key: str | None = None) -> Callable:
    """``'package.module:function'`` (or ``:Class``) -> the callable, with a clear error when it is not there.

    ``key``: the config key or flag ``spec`` came from, named in errors.
    """
    named = f"'{spec}'" + (f" ({key})" if key else "")
    if ":" not in spec:
        raise ConfigError(f"Callable {named} must be written as 'module:function'.")
    module_name, attr = spec.split(":", 1)
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise ConfigError(f"Cannot import module '{module_name}' for callable {named}: {err}") from None
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise ConfigError(f"Module '{module_name}' has no callable '{attr}' (from {named}).")
    return fn
