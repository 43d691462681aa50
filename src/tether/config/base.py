"""Typed config machinery: dataclass trees, YAML presets, dotted overrides, validation.

A config is a tree of frozen dataclasses. Every field is declared with :func:`option`, which
carries the help text and the constraint, so one declaration gives the default, the
documentation (``tether sft --help``) and the validation error.

    load_config(SFTConfig, "configs/demo/sft.yaml", ["optim.lr=1e-4"])
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
import re
import types
import typing
from pathlib import Path
from typing import Any

import yaml

from tether.common.errors import ConfigError

_MISSING = dataclasses.MISSING
FLOAT32_MAX = 3.4028234663852886e38  # learning rates must fit torch's float32 optimiser state


def option(
    default: Any = _MISSING,
    help: str = "",
    *,
    choices: tuple | None = None,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    lt: float | None = None,
    factory: Any = None,
    path: bool = False,
) -> Any:
    """Declare a config field with its help text and constraint.

    ``path``: the value is a local path or a hub id (or a list of them); a relative path is
    relative to the directory the run was started from (see :func:`rebase_paths`).
    """
    meta = {"help": help, "choices": choices, "ge": ge, "gt": gt, "le": le, "lt": lt, "path": path}
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def section(cls: type, help: str = "") -> Any:
    """Declare a nested config block."""
    return dataclasses.field(default_factory=cls, metadata={"help": help})


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _is_config(tp: Any) -> bool:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def _config_items(tp: Any) -> type | None:
    """The block class of a list-of-blocks annotation (``list[RewardTermConfig]``), else None."""
    if typing.get_origin(tp) not in (list, tuple):
        return None
    args = typing.get_args(tp)
    return args[0] if args and _is_config(args[0]) else None


def _config_item(value: Any, cls: type, key: str) -> Any:
    """One item of a list of blocks: a mapping (or a ``cls`` already built) -> a validated ``cls``;
    its keys are named ``key.sub`` in errors (``reward.terms[0].name``)."""
    if isinstance(value, cls):
        value = to_dict(value)
    if not isinstance(value, dict):
        valid = ", ".join(f.name for f in dataclasses.fields(cls))
        raise ConfigError(f"Config key '{key}' = {value!r}: expected a mapping of sub-keys ({valid}).")
    return from_dict(cls, value, key + ".")


def _shown(text: object) -> str:
    """User text as it can be quoted on one line (newlines and control characters escaped)."""
    text = str(text)
    return text if text.isprintable() else repr(text)[1:-1]


def _unknown_key(key: str, valid: list[str], where: str) -> ConfigError:
    close = difflib.get_close_matches(str(key), valid, n=1, cutoff=0.5)  # YAML keys may be 1, null, ...
    hint = f" Did you mean '{where}{close[0]}'?" if close else ""
    return ConfigError(
        f"Unknown config key '{_shown(f'{where}{key}')}'.{hint} Valid keys here: {', '.join(sorted(valid))}."
    )


def _coerce(value: Any, tp: Any, key: str) -> Any:
    """Check ``value`` against the annotation ``tp``; ints are accepted where floats are."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(value, arg, key)
            except ConfigError as err:
                errors.append(str(err))
        raise ConfigError(f"Config key '{key}' = {value!r}: expected {_type_name(tp)}.")
    if origin is typing.Literal:
        if value not in typing.get_args(tp):
            raise ConfigError(
                f"Config key '{key}' = {value!r}: expected one of {list(typing.get_args(tp))}."
            )
        return value
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"Config key '{key}' = {value!r}: expected a list.")
        (item_tp, *_) = typing.get_args(tp) or (Any,)
        coerce = _config_item if _is_config(item_tp) else _coerce
        items = [coerce(v, item_tp, f"{key}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if tp is Any:
        return value
    if tp is float:
        if isinstance(value, str) and _FLOAT_RE.fullmatch(value.strip()):
            value = float(value.strip())  # YAML 1.1 reads `1e-4` (no dot) as a string
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"Config key '{key}' = {value!r}: expected a number.")
        try:
            value = float(value)
        except OverflowError:
            value = math.inf
        if not math.isfinite(value):
            raise ConfigError(f"Config key '{key}' = {value!r}: expected a finite number.")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"Config key '{key}' = {value!r}: expected an integer.")
        if not -(2**63) <= value < 2**63:  # torch seeds, thread counts, ... are 64-bit
            raise ConfigError(f"Config key '{key}' = {value!r}: expected a 64-bit integer (below 2**63).")
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"Config key '{key}' = {value!r}: expected true or false.")
        return value
    if tp is str:
        if isinstance(value, os.PathLike):  # a pathlib.Path from Python: the path as text
            value = os.fspath(value)
        if not isinstance(value, str):
            raise ConfigError(f"Config key '{key}' = {value!r}: expected a string (or a path).")
        return value
    if tp is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"Config key '{key}' = {value!r}: expected a mapping.")
        return value
    return value


_FLOAT_RE = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")


_TYPE_WORDS = {int: "an integer", float: "a number", str: "a string", bool: "true or false",
               dict: "a mapping", type(None): "null"}


def _type_name(tp: Any) -> str:
    """``int | None`` -> 'an integer or null' (words a user reads in an error)."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return " or ".join(_type_name(arg) for arg in typing.get_args(tp))
    if typing.get_origin(tp) in (list, tuple):
        return "a list"
    if typing.get_origin(tp) is typing.Literal:
        return f"one of {list(typing.get_args(tp))}"
    if tp in _TYPE_WORDS:
        return _TYPE_WORDS[tp]
    if isinstance(tp, type):
        return tp.__name__
    return str(tp).replace("typing.", "")


def _check_range(value: Any, meta: dict, key: str) -> None:
    if value is None:
        return
    choices = meta.get("choices")
    if choices is not None and value not in choices:
        raise ConfigError(f"Config key '{key}' = {value!r}: expected one of {list(choices)}.")
    for name, ok, word in (
        ("ge", lambda v, b: v >= b, ">="),
        ("gt", lambda v, b: v > b, ">"),
        ("le", lambda v, b: v <= b, "<="),
        ("lt", lambda v, b: v < b, "<"),
    ):
        bound = meta.get(name)
        if bound is not None and isinstance(value, (int, float)) and not ok(value, bound):
            raise ConfigError(f"Config key '{key}' = {value!r}: must be {word} {bound}.")


def check_keys(cls: type, data: dict, prefix: str = "") -> None:
    """Unknown keys anywhere in the tree are reported before any value is judged."""
    hints = _hints(cls)
    valid = [f.name for f in dataclasses.fields(cls)]
    for key, value in data.items():
        if key not in valid:
            raise _unknown_key(key, valid, prefix)
        if _is_config(hints[key]) and isinstance(value, dict):
            check_keys(hints[key], value, f"{prefix}{key}.")
        item = _config_items(hints[key])
        if item is not None and isinstance(value, (list, tuple)):
            for i, entry in enumerate(value):
                if isinstance(entry, dict):
                    check_keys(item, entry, f"{prefix}{key}[{i}].")


def from_dict(cls: type, data: dict | None, prefix: str = "", notices: bool = True) -> Any:
    """Build the dataclass ``cls`` from a nested dict, validating every key and value; ``notices``:
    say where each moved key went (:func:`tether.config.moved.apply_moved_keys`)."""
    if data is not None and not isinstance(data, dict):
        raise ConfigError(f"Config block '{prefix.rstrip('.') or '<root>'}' must be a mapping.")
    data = dict(data or {})
    if not prefix:
        from tether.config.moved import apply_moved_keys

        data = apply_moved_keys(cls, data, notices)
        check_keys(cls, data)
    hints = _hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for key in data:
        if key not in fields:
            raise _unknown_key(key, list(fields), prefix)
    kwargs = {}
    for name, f in fields.items():
        tp = hints[name]
        key = prefix + name
        if _is_config(tp):
            sub = data.get(name)
            if sub is not None and not isinstance(sub, dict):
                raise ConfigError(f"Config key '{key}' must be a mapping of sub-keys.")
            kwargs[name] = from_dict(tp, sub, key + ".")
        elif name in data:
            value = _coerce(data[name], tp, key)
            _check_range(value, f.metadata, key)
            kwargs[name] = value
    obj = cls(**kwargs)
    check = getattr(obj, "validate", None)
    if check is not None:
        check()
    return obj


def rebase_paths(cls: type, data: dict, base: str | Path) -> dict:
    """A copy of the config dict ``data`` (of config class ``cls``) whose relative path values
    that exist under ``base`` are made absolute: a run's inputs, found again from any directory.

    Values that do not exist there (hub ids, missing files) are left alone.
    """
    base = Path(base)
    out = dict(data)
    hints = _hints(cls)
    for f in dataclasses.fields(cls):
        value = out.get(f.name)
        item = _config_items(hints[f.name])
        if _is_config(hints[f.name]) and isinstance(value, dict):
            out[f.name] = rebase_paths(hints[f.name], value, base)
        elif item is not None and isinstance(value, list):
            out[f.name] = [rebase_paths(item, v, base) if isinstance(v, dict) else v for v in value]
        elif f.metadata.get("path"):
            if isinstance(value, str):
                out[f.name] = _rebased(value, base)
            elif isinstance(value, list):
                out[f.name] = [_rebased(v, base) if isinstance(v, str) else v for v in value]
    return out


def _rebased(value: str, base: Path) -> str:
    path = Path(value).expanduser()
    if not value or path.is_absolute() or not (base / path).exists():
        return value
    return os.path.normpath(base / path)


def _leaves(obj: Any, prefix: str) -> dict[str, Any]:
    """The leaf values under the dotted ``prefix`` of the config ``obj`` (a leaf or a block), by dotted key."""
    node = obj
    for part in prefix.split("."):
        node = getattr(node, part)
    if dataclasses.is_dataclass(node):  # a block: its fields' leaves (a dict value is one leaf)
        return {f"{prefix}.{k}": v for f in dataclasses.fields(node) for k, v in _leaves(node, f.name).items()}
    return {prefix: list(node) if isinstance(node, tuple) else node}


def refuse_inert(cfg: Any, keys: typing.Iterable[str], why: str) -> None:
    """A :class:`ConfigError` for the first of ``keys`` (dotted leaves or whole blocks of ``cfg``)
    set to anything but its default: ``why`` (e.g. "with algorithm=grpo, which trains no critic")
    it would do nothing, and a setting that silently does nothing is refused."""
    defaults = type(cfg)()  # the dataclass defaults (validate is not called)
    for key in keys:
        default = _leaves(defaults, key)
        for leaf, value in _leaves(cfg, key).items():
            if value != default[leaf]:
                raise ConfigError(f"Config key '{leaf}' = {value!r} is set {why}, so it would have no effect; "
                                  f"drop it (default {default[leaf]!r}).")


def flat_dict(tree: dict, prefix: str = "") -> dict[str, Any]:
    """Nested dicts (a :func:`to_dict`) as one level of dotted keys: ``{"optim": {"lr": 1}}`` -> ``{"optim.lr": 1}``."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            flat.update(flat_dict(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def to_dict(obj: Any) -> dict:
    """The config as plain nested dicts (YAML-safe)."""
    out = {}
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if dataclasses.is_dataclass(value):
            out[f.name] = to_dict(value)
        elif isinstance(value, (list, tuple)) and any(dataclasses.is_dataclass(v) for v in value):
            out[f.name] = [to_dict(v) if dataclasses.is_dataclass(v) else v for v in value]  # a list of blocks
        elif isinstance(value, tuple):
            out[f.name] = list(value)
        else:
            out[f.name] = value
    return out


def parse_override(text: str) -> tuple[list[str], Any]:
    """``'ppo.kl.target=6'`` -> (['ppo', 'kl', 'target'], 6). Values are parsed as YAML."""
    if "=" not in text:
        raise ConfigError(f"Override '{_shown(text)}' is not of the form key.path=value.")
    key, raw = text.split("=", 1)
    key = key.strip()
    if not key or any(not part for part in key.split(".")):
        raise ConfigError(f"Override '{_shown(text)}' has an empty key.")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except Exception:  # noqa: BLE001 - YAMLError, and ValueError for '2001-13-45' or '!!int x', ...
        value = raw
    if isinstance(value, str) and _FLOAT_RE.fullmatch(value.strip()):
        value = float(value.strip())  # YAML 1.1 reads `1e-4` (no dot) as a string
    return key.split("."), value


_INDEXED = re.compile(r"(.+)\[(\d+)\]")


def merge_override(data: dict, path: list[str], value: Any) -> None:
    """Set the dotted ``path`` in ``data`` to ``value``, making the blocks on the way. A part
    ``name[i]`` is item ``i`` of the list ``name`` already there (``reward.terms[1].weight``)."""
    node = data
    for depth, part in enumerate(path):
        last = depth == len(path) - 1
        indexed = _INDEXED.fullmatch(part)
        if indexed is None:
            if last:
                node[part] = value
                return
            child = node.get(part)
            if not isinstance(child, dict):
                child = {}
                node[part] = child
            node = child
            continue
        name, index = indexed.group(1), int(indexed.group(2))
        where = ".".join([*path[:depth], name])
        items = node.get(name)
        if not isinstance(items, (list, tuple)) or index >= len(items):
            held = f"{len(items)} item(s)" if isinstance(items, (list, tuple)) else "no list"
            raise ConfigError(f"Config key '{_shown('.'.join(path))}': '{where}' holds {held}, so there is no item "
                              f"[{index}]; set the whole list ({where}=[...]) instead.")
        items = node[name] = list(items)  # a copy: the list may be a built config's own
        if last:
            items[index] = value
            return
        if not isinstance(items[index], dict):
            raise ConfigError(f"Config key '{_shown('.'.join(path))}': '{where}[{index}]' = {items[index]!r} is not "
                              "a mapping of sub-keys.")
        node = items[index] = dict(items[index])


def read_yaml(path: str | Path) -> dict:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"Config file '{path}' does not exist.")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except Exception as err:  # noqa: BLE001 - YAMLError, UnicodeDecodeError, ValueError (bad dates), ...
        reason = " ".join(str(err).split()) or type(err).__name__
        raise ConfigError(f"Config file '{path}' is not valid YAML: {reason}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"Config file '{path}' must hold a mapping at the top level.")
    return data


def load_config(cls: type, path: str | Path | None = None, overrides: list[str] = ()) -> Any:
    """Preset YAML (optional) + dotted overrides -> validated, frozen config of type ``cls``.

    The preset may be a run's own saved ``config.yaml`` (:func:`read_preset`): it loads for the
    stage that saved it only (:func:`check_saved_stage`, after the overrides, which may name the
    RL algorithm)."""
    from tether.config.moved import merge_setting
    from tether.config.saved import check_saved_stage, read_preset

    data, saved = read_preset(cls, path) if path else ({}, None)
    given: list = []
    for text in overrides:
        keys, value = parse_override(text)
        merge_setting(cls, data, keys, value, given)
    if saved is not None:
        check_saved_stage(cls, saved, data, path)
    return from_dict(cls, data)


def save_config(cfg: Any, path: str | Path) -> None:
    Path(path).write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False), encoding="utf-8")


def describe(cls: type, prefix: str = "") -> list[tuple[str, str, str]]:
    """Rows of (dotted key, default, help) for every leaf field, for ``--help``."""
    rows = []
    hints = _hints(cls)
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        if _is_config(tp):
            rows.extend(describe(tp, prefix + f.name + "."))
            continue
        if f.default is not _MISSING:
            default = f.default
        elif f.default_factory is not _MISSING:  # type: ignore[misc]
            default = f.default_factory()  # type: ignore[misc]
        else:
            default = "(required)"
        rows.append((prefix + f.name, repr(default), f.metadata.get("help", "")))
    return rows


def replace(cfg: Any, overrides: dict[str, Any]) -> Any:
    """A copy of ``cfg`` with dotted-key overrides applied and re-validated."""
    from tether.config.moved import merge_setting

    data, given = to_dict(cfg), []
    for key, value in overrides.items():
        merge_setting(type(cfg), data, key.split("."), value, given)
    return from_dict(type(cfg), data)
