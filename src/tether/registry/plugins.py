"""Plugins and name ownership, shared by every registry.

A plugin is a module (or a ``.py`` file) outside ``src/`` that adds entries to the registries
(an algorithm, a generation engine, a stage, a reward kind, an environment) when imported:
``TETHER_PLUGINS=module_or_file.py[,...]`` or an installed package's ``tether.plugins`` entry
point names it, and :func:`load_plugins` imports it on the registries' first use, never at
``import tether``. A name belongs to the module that registered it first (:func:`claim`), so a
plugin cannot silently replace a built-in entry or another plugin's.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import traceback
from pathlib import Path

from tether.common.errors import ConfigError, one_line

#: The environment variable naming plugin modules (or ``.py`` files) to import before a run.
PLUGINS_ENV = "TETHER_PLUGINS"
#: The entry-point group an installed package registers its plugin module under.
PLUGINS_GROUP = "tether.plugins"


def owner_of(target) -> str:
    """The module that registered an entry: the module part of a ``"module:attr"`` target, or the
    module the object was defined in."""
    if isinstance(target, str):
        return target.partition(":")[0]
    return str(getattr(target, "__module__", None) or type(target).__module__)


def target_text(target) -> str:
    """``"module:attr"`` of a target given as a string or as the object itself."""
    if isinstance(target, str):
        return target
    return f"{owner_of(target)}:{getattr(target, '__qualname__', type(target).__qualname__)}"


def claim(table: dict, built_in: set[str], kind: str, spec, code: str = "target") -> None:
    """Refuse ``spec`` (an entry for ``table``, a ``kind`` such as "Algorithm") when its name is a
    built-in's or another module's: the same module registering it again replaces its entry (a
    reloaded plugin). ``code``: the entry's field naming its code, whose module owns the name."""
    held = table.get(spec.name)
    if held is None:
        return
    name, target, held_target = spec.name, getattr(spec, code), getattr(held, code)
    if name in built_in or owner_of(held_target) != owner_of(target):
        title = getattr(held, "title", None) or held.name
        whose = f"tether's built-in {title}" if name in built_in else f"the plugin {owner_of(held_target)!r}"
        raise ConfigError(f"{kind} name {name!r} is already registered by {whose} ({target_text(held_target)}); "
                          f"{owner_of(target)!r} ({target_text(target)}) may not replace it: expected a name no "
                          f"registered {kind.lower()} has (registered: {', '.join(table)}).")


# Process-wide by nature: Python imports a module once per process, and so do the plugins.
_loaded: set[str] = set()  # plugin modules, files and entry points imported so far
_installed: list | None = None  # the installed packages' plugin entry points, read once per process


def _installed_plugins() -> list:
    """The ``tether.plugins`` entry points of the installed packages (scanned on first use only:
    the scan reads every distribution's metadata, and config validation asks the registry often)."""
    global _installed
    if _installed is None:
        try:
            from importlib.metadata import entry_points

            _installed = list(entry_points(group=PLUGINS_GROUP))
        except Exception:  # a broken installed distribution must not stop tether itself
            _installed = []
    return _installed


def _import_plugin(name: str) -> None:
    """Import the plugin ``name``: a module name, or a ``.py`` file's path."""
    if not name.endswith(".py"):
        importlib.import_module(name)
        return
    path = Path(name).expanduser().resolve()
    spec = importlib.util.spec_from_file_location(path.stem, path)
    if spec is None or not path.is_file():
        raise FileNotFoundError(f"No such file {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        # A half-run module must not stay importable: the next load_plugins (or an import of it
        # by name) would find it there and skip the error.
        if sys.modules.get(path.stem) is module:
            del sys.modules[path.stem]
        raise


def _cause(err: BaseException, name: str) -> str:
    """What went wrong importing plugin ``name``, in one line: where a syntax error is, which
    module is missing, or the exception and the line that raised it."""
    if isinstance(err, SyntaxError):
        where = Path(err.filename).name if err.filename else name
        return f"{type(err).__name__} at line {err.lineno} of {where}: {one_line(err.msg, 200)}"
    if isinstance(err, FileNotFoundError) and str(err).startswith("No such file "):
        return str(err)
    if isinstance(err, ModuleNotFoundError) and err.name and (name == err.name or name.startswith(err.name + ".")):
        # the plugin itself (or its package) is not importable, not one of its own imports
        return f"No module named {err.name!r} on sys.path (a .py file is named by its path, ending in .py)"
    text = f"{type(err).__name__}: {one_line(err, 300)}" if str(err) else type(err).__name__
    frames = traceback.extract_tb(err.__traceback__)
    if frames and not isinstance(err, ImportError):
        text += f" (raised at {Path(frames[-1].filename).name} line {frames[-1].lineno})"
    return text


def _plugin_error(which: str, err: Exception, name: str, fix: str) -> ConfigError:
    """The one-paragraph error for plugin ``which`` (how the user named it) that raised ``err``."""
    if isinstance(err, ConfigError):  # it imported, but tether refused what it registers (a taken name, ...)
        return ConfigError(f"{which} was refused while it imported: {one_line(err).rstrip('.')} ({fix}).")
    return ConfigError(f"{which} failed to import: {_cause(err, name)}; expected a module that imports without "
                       f"error and registers what it adds with tether.registry's register_* functions ({fix}).")


def load_plugins() -> None:
    """Import the plugin modules of ``TETHER_PLUGINS`` and the ``tether.plugins`` entry points
    (once each); a plugin that fails to import is a one-paragraph :class:`ConfigError` naming it,
    the cause and what was expected (the CLI prints it and exits 2). Nothing calls this at
    ``import tether``: the registry's users (the CLI's command list, ``tether.NAME``, a run's
    config checks) call it on first use, where a broken plugin is an error they report."""
    for name in (n.strip() for n in os.environ.get(PLUGINS_ENV, "").split(",")):
        if not name or name in _loaded:
            continue
        try:
            _import_plugin(name)
        except Exception as err:
            raise _plugin_error(f"{PLUGINS_ENV} names {name!r}, which", err, name,
                                f"fix it, or remove it from {PLUGINS_ENV}") from err
        _loaded.add(name)
    for point in _installed_plugins():
        if point.value in _loaded:
            continue
        try:
            point.load()
        except Exception as err:
            dist = getattr(getattr(point, "dist", None), "name", None)
            of = f" of the installed package {dist!r}" if dist else ""
            raise _plugin_error(f"The '{PLUGINS_GROUP}' entry point {point.name!r} ({point.value}){of}", err,
                                point.module, "fix or uninstall the package") from err
        _loaded.add(point.value)
