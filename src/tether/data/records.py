"""Raw rows from local files (.jsonl, .json, .parquet) or a Hugging Face hub dataset.

Every row becomes a :class:`Record` that remembers where it came from, so that later
validation errors can name the file and the row. Nothing here knows about schemas.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from tether.common.errors import DataError, one_line

__all__ = ["Record", "gold_margins", "load_records"]

_LOCAL_SUFFIXES = (".jsonl", ".json", ".parquet")
# Names that look like files; such a name that does not exist is "no such file", not a hub id.
_FILE_LIKE_SUFFIXES = _LOCAL_SUFFIXES + (".csv", ".tsv", ".txt", ".arrow", ".gz", ".zst", ".ndjson", ".yaml", ".yml")
# "name", "org/name", optionally ":subset".
_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*(/[A-Za-z0-9][A-Za-z0-9_.\-]*)?(:[A-Za-z0-9][A-Za-z0-9_.\-]*)?$")
_UTF8_BOM = b"\xef\xbb\xbf"
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


@dataclass(frozen=True)
class Record:
    """One raw row. ``row`` is the 1-based line number for JSON lines, index + 1 otherwise."""

    data: dict
    source: str
    row: int


def load_records(source: str | os.PathLike, split: str = "train", key: str | None = None) -> list[Record]:
    """Read every row of ``source``: a local .jsonl/.json/.parquet file or a hub dataset name.

    A hub name may carry a subset after a colon (``"org/name:subset"``). ``split`` is used
    for hub datasets only. Raises :class:`DataError` with the file and line on any problem;
    ``key`` (the config key or flag the source came from) is named beside the file.
    """
    src = os.fspath(source)
    if not isinstance(src, str) or not src.strip():
        named = f" ({key})" if key else ""
        raise DataError(f"dataset source {src!r}{named} is empty; expected a .jsonl, .json or .parquet file or a hub "
                        "dataset name")
    label = f"{src} ({key})" if key else src
    path = Path(src).expanduser()
    if path.exists():
        records = _load_local(path, label)
    elif looks_like_hub_id(src):
        records = _load_hub(src, split, label)
    else:
        raise DataError(
            f"{label}: no such file (and it is not a hub dataset name such as 'org/name' or 'org/name:subset'); "
            "expected a local .jsonl, .json or .parquet file or a hub dataset name"
        )
    if not records:
        where = label if path.exists() else f"{label} (split {split!r})"
        raise DataError(f"{where}: the dataset is empty; expected at least one row")
    return records


def looks_like_hub_id(src: str) -> bool:
    """A hub dataset name (``org/name[:subset]``) rather than a local file, as :func:`load_records` reads it."""
    if src.startswith(("/", ".", "~")) or "\\" in src or ".." in src:
        return False
    if src.lower().split(":", 1)[0].endswith(_FILE_LIKE_SUFFIXES):
        return False
    head = src.split(":", 1)[0].split("/", 1)[0]
    if "/" in src and Path(head).expanduser().is_dir():
        return False  # `data/nope` when ./data exists: a missing local file, not a hub dataset
    return bool(_HUB_ID.match(src))


# --------------------------------------------------------------------------- local files


def _load_local(path: Path, src: str) -> list[Record]:
    if path.is_dir():
        raise DataError(f"{src}: is a directory; expected a .jsonl, .json or .parquet file")
    suffix = path.suffix.lower()
    if suffix not in _LOCAL_SUFFIXES:
        raise DataError(
            f"{src}: unsupported file type {suffix or '(no extension)'!r}; expected a .jsonl, .json or .parquet file"
        )
    try:
        if suffix == ".jsonl":
            return _read_jsonl(path, src)
        if suffix == ".json":
            return _read_json(path, src)
        return _read_parquet(path, src)
    except OSError as e:
        raise DataError(f"{src}: cannot read the file ({e.strerror or e})") from e


def _read_jsonl(path: Path, src: str) -> list[Record]:
    records: list[Record] = []
    offset = 0
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, start=1):
            start = offset
            offset += len(raw)
            if lineno == 1 and raw.startswith(_UTF8_BOM):
                raw = raw[len(_UTF8_BOM):]
                start += len(_UTF8_BOM)
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise DataError(
                    f"{src}, line {lineno}: not valid UTF-8 (bad byte at file offset {start + e.start}: {e.reason}); "
                    "expected a UTF-8 encoded JSON lines file"
                ) from None
            if not line.strip():
                continue
            records.append(Record(_parse_line(line, src, lineno), src, lineno))
    return records


def _parse_line(line: str, src: str, lineno: int) -> dict:
    # Without its line break: an error at the end of the line is reported at its real column,
    # not at "column 1" of the next line.
    line = line.rstrip("\r\n")
    try:
        value = json.loads(line)
    except (ValueError, RecursionError) as e:
        raise DataError(
            f"{src}, line {lineno}: not valid JSON ({_json_reason(e)}); expected one JSON object per line"
        ) from None
    if not isinstance(value, dict):
        raise DataError(
            f"{src}, line {lineno}: expected a JSON object ({{...}}) per line, got {_json_type(value)}"
        )
    _check_surrogates(value, line, f"{src}, line {lineno}")
    return value


def _check_surrogates(value: object, text: str, where: str) -> None:
    """Reject unpaired \\uD800-\\uDFFF escapes: they decode to strings no tokenizer can encode."""
    if not _SURROGATE_ESCAPE.search(text):
        return
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise DataError(
            f"{where}: a string contains an unpaired UTF-16 surrogate escape (\\uD800-\\uDFFF); "
            "expected valid Unicode text"
        ) from None


def _read_json(path: Path, src: str) -> list[Record]:
    raw = path.read_bytes()
    if raw.startswith(_UTF8_BOM):
        raw = raw[len(_UTF8_BOM):]
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        raise DataError(
            f"{src}, line {line}: not valid UTF-8 (bad byte at file offset {e.start}: {e.reason}); "
            "expected a UTF-8 encoded JSON file"
        ) from None
    if not text.strip():
        return []
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as e:
        if text.lstrip().startswith("[") or not _first_line_is_json(text):
            # One JSON document (a list, or an object spread over lines): its error position.
            where = f", line {e.lineno}, column {e.colno}" if isinstance(e, json.JSONDecodeError) else ""
            raise DataError(
                f"{src}{where}: not valid JSON ({_json_reason(e)}); expected a JSON list of objects "
                "or one JSON object per line"
            ) from None
        # Not one JSON document: read it as JSON lines, which names the bad line.
        return _read_jsonl(path, src)
    _check_surrogates(value, text, src)
    if isinstance(value, dict):
        return [Record(value, src, 1)]
    if not isinstance(value, list):
        raise DataError(f"{src}: expected a JSON list of objects or one JSON object per line, got {_json_type(value)}")
    records = []
    for i, item in enumerate(value):
        if not isinstance(item, dict):
            raise DataError(
                f"{src}, row {i + 1}: expected a JSON object ({{...}}) as list item {i + 1}, got {_json_type(item)}"
            )
        records.append(Record(item, src, i + 1))
    return records


def _first_line_is_json(text: str) -> bool:
    """The first non-blank line is a JSON value on its own (the file is JSON lines, not one document)."""
    first = next((line for line in text.splitlines() if line.strip()), "")
    try:
        json.loads(first)
    except (ValueError, RecursionError):
        return False
    return True


def _read_parquet(path: Path, src: str) -> list[Record]:
    import pyarrow.parquet as pq

    try:
        rows = pq.read_table(path).to_pylist()
    except OSError:
        raise
    except Exception as e:  # pyarrow raises ArrowInvalid & co. on corrupt or non-parquet files
        reason = one_line(e, 300)
        raise DataError(
            f"{src}: cannot read as a parquet file ({type(e).__name__}: {reason}); expected a valid .parquet file"
        ) from None
    return [Record(dict(r), src, i + 1) for i, r in enumerate(rows)]


def _json_reason(e: BaseException) -> str:
    if isinstance(e, json.JSONDecodeError):
        return f"{e.msg.removesuffix(' at').removesuffix(':')} at column {e.colno}"
    if isinstance(e, RecursionError):
        return "nested too deeply"
    return str(e)


def _json_type(value: object) -> str:
    return {
        list: "a list", str: "a string", bool: "a boolean", int: "a number", float: "a number", type(None): "null",
    }.get(type(value), type(value).__name__)


# --------------------------------------------------------------------------- hub


def _load_hub(src: str, split: str, label: str | None = None) -> list[Record]:
    from tether.models.loading import hub_offline

    label = label or src
    name, _, subset = src.partition(":")
    what = f"hub dataset {name!r}" + (f" subset {subset!r}" if subset else "") + f" split {split!r}"
    offline = hub_offline()
    try:
        import datasets

        if offline:
            # Only the local cache, at once: no retries against a hub that cannot be reached.
            datasets.config.HF_HUB_OFFLINE = True
        ds = datasets.load_dataset(name, subset or None, split=split)
        rows = [dict(r) for r in ds]
    except Exception as e:  # offline, unknown name, unknown split, gated repo, ...
        msg = " ".join(str(e).split()) or type(e).__name__
        msg = one_line(msg, 300)
        network = ("the hub cannot be reached from here (or HF_HUB_OFFLINE is set) and the local cache does not hold "
                   "it, so" if offline else "so")
        raise DataError(
            f"{label}: cannot load {what} ({type(e).__name__}: {msg}); there is no local file of that name either, "
            f"{network} check the name, the split, and the network (or pass a local .jsonl, .json or .parquet file)"
        ) from None
    return [Record(r, label, i + 1) for i, r in enumerate(rows)]


def gold_margins(records) -> dict[tuple[str, int], float] | None:
    """(source, row) -> ``gold_chosen - gold_rejected`` when every preference row carries both as
    numbers (a synthetic task's gold judge), else None."""
    out = {}
    for rec in records:
        chosen, rejected = rec.data.get("gold_chosen"), rec.data.get("gold_rejected")
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (chosen, rejected)):
            return None
        out[rec.source, rec.row] = float(chosen) - float(rejected)
    return out
