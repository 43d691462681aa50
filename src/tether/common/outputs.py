"""Where a command will write, checked before it does any work.

A command that samples for minutes and then cannot write its result has lost that work, so every
output path is checked first, read-only, with one paragraph naming the flag or key:

- an output *file* (``--out FILE``, ``--export``) needs an existing, writable directory, and must
  not be a directory itself; a missing directory is refused rather than created, since it is as
  likely a typo as a wish (as ``tether eval --out`` always did);
- an output *directory* (``run.out``, ``--out DIR`` of demo, compare, iterate) is created with
  its parents when missing, as a run directory's parent (``runs/``) usually is on a first run;
  it must not be a file, nor lie under one, and the directory it will be made in must be writable.

Writability is tried, not inferred from permission bits: a temporary file is opened in the
directory and closed again (it never has a name on Linux), which also catches read-only mounts
and the cases where root's ``os.access`` says yes.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from tether.common.errors import ConfigError


def shown(value: object) -> str:
    """A user's value as it can be quoted on one line (control characters escaped)."""
    text = str(value)
    return text if text.isprintable() else repr(text)[1:-1]


def write_problem(directory: Path) -> str | None:
    """Why a file cannot be created in the existing ``directory`` (the OS's reason), or None."""
    try:
        with tempfile.TemporaryFile(dir=directory):
            pass
    except OSError as err:
        return err.strerror or type(err).__name__
    return None


def check_output_file(path: str | Path, flag: str, *, what: str | None = None, hint: str | None = None,
                      example: str = "out.json") -> Path:
    """``path`` can be written as a file: not a directory, in an existing, writable directory.

    ``flag`` names the option (``--out``); ``what`` the path in the message (default
    ``FLAG 'PATH'``); ``hint`` what to do instead (default ``choose another FLAG``); ``example`` a
    file name to suggest when ``path`` is a directory. Returns ``path`` as a :class:`Path`.
    """
    out = Path(path)
    what = what or f"{flag} '{shown(path)}'"
    hint = hint or f"choose another {flag}"
    if out.is_dir():
        raise ConfigError(f"{what} is a directory; expected a file path such as '{shown(out / example)}'.")
    parent = out.parent
    if not parent.exists():
        raise ConfigError(f"{what} cannot be written: the directory '{shown(parent)}' does not exist; "
                          f"create it or {hint}.")
    if not parent.is_dir():
        raise ConfigError(f"{what} cannot be written: '{shown(parent)}' is a file, not a directory; {hint}.")
    problem = write_problem(parent)
    if problem is None and out.exists() and not _appendable(out):
        problem = "the file is read-only"
    if problem is not None:
        raise ConfigError(f"{what} cannot be written in '{shown(parent)}' ({problem}); {hint}.")
    return out


def check_output_dir(path: str | Path, flag: str, *, what: str | None = None, hint: str | None = None) -> Path:
    """``path`` is, or can be created as, a writable directory (missing parents included).

    ``flag``, ``what`` and ``hint`` as for :func:`check_output_file`. Nothing is created.
    """
    out = Path(path)
    what = what or f"{flag} '{shown(path)}'"
    hint = hint or f"choose another {flag}"
    if out.exists() and not out.is_dir():
        raise ConfigError(f"{what} is a file, not a directory; {hint}.")
    existing = out
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():  # a file somewhere above: the directory cannot be made under it
        raise ConfigError(f"{what} cannot be created: '{shown(existing)}' is a file, not a directory; {hint}.")
    problem = write_problem(existing)
    if problem is not None:
        where = "written in" if existing == out else "created in"
        raise ConfigError(f"{what} cannot be {where} '{shown(existing)}' ({problem}); {hint}.")
    return out


def _appendable(path: Path) -> bool:
    """An existing file can be opened for appending (without changing it)."""
    try:
        with open(path, "ab"):
            return True
    except OSError:
        return False
