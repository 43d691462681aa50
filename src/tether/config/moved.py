"""Keys that moved: a config class's ``MOVED_KEYS`` (old dotted key -> (new key or keys, or None
when removed; a value map or the removal's reason)) applied to presets, overrides, API dicts and
saved run configs, so every key a user had keeps working with a one-line notice."""

from __future__ import annotations

import copy
from typing import Any

from tether.config.base import merge_override
from tether.common.errors import ConfigError


def apply_moved_keys(cls: type, data: dict, notices: bool = True) -> dict:
    """``data`` with the keys ``cls.MOVED_KEYS`` lists moved to their new place (a notice on
    stderr says where; a tuple of new keys: one old key that set several, each gets its value),
    or dropped with the reason when they were removed; earlier presets, overrides and saved run
    configs keep working (``notices=False``: silently, for a comparison). A key given both ways is
    an error."""
    import logging

    moved = getattr(cls, "MOVED_KEYS", {})
    if not moved:
        return data
    data = copy.deepcopy(data)
    log = logging.getLogger("tether.config")
    for old, (new, how) in moved.items():
        *parents, leaf = old.split(".")
        node, path = data, []
        for part in parents:
            path.append((node, part))
            node = node.get(part) if isinstance(node, dict) else None
        if not isinstance(node, dict) or leaf not in node:
            continue
        value = node.pop(leaf)
        for parent, part in reversed(path):  # a block the move emptied goes too (it is not a key any more)
            if parent.get(part) == {}:
                del parent[part]
        if new is None:
            if notices:
                log.warning("config key '%s' was removed (%s); its value %r is ignored.", old, how, value)
            continue
        if isinstance(how, dict):
            if value not in how:
                raise ConfigError(f"Config key '{old}' (now '{new}') = {value!r}: expected one of {list(how)}.")
            value = how[value]
        targets = (new,) if isinstance(new, str) else tuple(new)
        keep = getattr(cls, "moved_targets", None)  # a config may drop targets that do not apply
        targets = keep(data, targets) if keep is not None else targets
        for key in targets:
            _place(data, old, key, value)
        if notices:
            log.warning("config key '%s' is now '%s' (set to %r).", old, "' and '".join(targets), value)
    return data


def _place(data: dict, old: str, new: str, value) -> None:
    """Set dotted ``new`` in ``data`` to the value of the moved key ``old`` (both given, differing: an error)."""
    *new_parents, new_leaf = new.split(".")
    target = data
    for part in new_parents:
        child = target.get(part)
        if not isinstance(child, dict):
            child = {}
            target[part] = child
        target = child
    if new_leaf in target and target[new_leaf] != value:
        raise ConfigError(f"Config key '{old}' moved to '{new}', and both are given with different values "
                          f"({value!r} and {target[new_leaf]!r}); keep '{new}'.")
    target[new_leaf] = value


def merge_setting(cls: type, data: dict, path: list[str], value: Any, given: list | None = None) -> None:
    """:func:`merge_override` of a setting given on top of ``data`` (an override over a preset, a
    saved config or a config object): it wins over the other spelling of the same key there, a
    moved key's old or new name (``cls.MOVED_KEYS``), as it wins over the same name; an old name
    keeps its notice. ``given``: the (dotted key, value) settings merged before this one, appended
    to; both spellings among them stay an error."""
    dotted = ".".join(path)
    given = [] if given is None else given
    for old, (new, _how) in getattr(cls, "MOVED_KEYS", {}).items():
        if not isinstance(new, str):  # removed, or one old key that set several: both given stay an error
            continue
        for mine, other in ((old, new), (new, old)):
            if _sets(dotted, value, mine) and not any(_sets(key, v, other) for key, v in given):
                _drop(data, other)
    given.append((dotted, value))
    merge_override(data, path, value)


def _sets(dotted: str, value: Any, key: str) -> bool:
    """Whether setting ``dotted`` to ``value`` sets the dotted ``key`` (itself, or a block holding it)."""
    if dotted == key:
        return True
    if not key.startswith(dotted + "."):
        return False
    for part in key[len(dotted) + 1:].split("."):
        if not isinstance(value, dict) or part not in value:
            return False
        value = value[part]
    return True


def _drop(data: dict, key: str) -> None:
    """Remove the dotted ``key`` from ``data`` if it is there."""
    *parents, leaf = key.split(".")
    for part in parents:
        data = data.get(part) if isinstance(data, dict) else None
    if isinstance(data, dict):
        data.pop(leaf, None)
