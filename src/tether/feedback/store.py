"""The labels of a pairs file, on disk as they are given: which pair each annotator sees next,
each verdict appended and synced, undo, and resuming from the files after a restart.

Files, next to ``out`` (the preference file the reward-model stage reads):

- ``out``: one row per preferred response: ``prompt``, ``chosen``, ``rejected`` (the RM schema),
  plus ``pair_id``, ``annotator``, ``time``, ``left`` (which response was shown on the left,
  ``"a"`` or ``"b"``) and ``preferred`` (``"a"`` or ``"b"``);
- ``out.ties.jsonl``: ties, kept apart (the RM schema has no tie): ``pair_id``, ``prompt``,
  ``response_a``, ``response_b``, ``annotator``, ``time``, ``left``;
- ``out.skips.jsonl``: skipped pairs (not shown to that annotator again).

Every write holds one lock, appends one line, flushes and fsyncs: two annotators labelling at
once never interleave partial lines, and a label the page confirmed survives a crash. Undo
rewrites the one file it touches atomically (a temporary file, fsync, rename).

Reading the files back, every line must be a label of this pairs file (a :class:`DataError`
names the file and line otherwise, as the data loaders do): a line that is not JSON, lacks the
annotator or pair, names a pair the pairs file does not hold, or repeats an annotator's verdict
would otherwise be dropped or counted without a word. The one exception is a last line cut short
by a crash mid-write (no line break, not JSON): it is left out with a warning, and cut off before
the next label is appended.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from tether.common.errors import DataError

log = logging.getLogger(__name__)

VERDICTS = ("1", "2", "tie", "skip")  # left better, right better, tie, skip
RESERVE_S = 300.0  # a pair handed to an annotator counts towards --overlap for this long


@dataclass(frozen=True)
class Pair:
    pair_id: str
    prompt: str
    response_a: str
    response_b: str


def load_pairs(path: str | Path) -> list[Pair]:
    """The pairs file `tether pairs` writes: rows with ``pair_id``, ``prompt``, ``response_a``, ``response_b``."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"Pairs file '{path}' does not exist; expected the output of `tether pairs`.")
    pairs, seen = [], set()
    for row, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except ValueError:
            raise DataError(f"{path}, row {row}: not valid JSON.") from None
        missing = [k for k in ("pair_id", "prompt", "response_a", "response_b")
                   if not isinstance(data.get(k) if isinstance(data, dict) else None, str)]
        if missing:
            raise DataError(f"{path}, row {row}: field(s) {', '.join(missing)} missing or not text; expected a row "
                            "of `tether pairs` (pair_id, prompt, response_a, response_b).")
        if data["pair_id"] in seen:
            raise DataError(f"{path}, row {row}: pair_id {data['pair_id']!r} appears twice.")
        seen.add(data["pair_id"])
        pairs.append(Pair(data["pair_id"], data["prompt"], data["response_a"], data["response_b"]))
    if not pairs:
        raise DataError(f"Pairs file '{path}' holds no pairs.")
    return pairs


def left_side(pair_id: str, annotator: str) -> str:
    """Which response an annotator sees on the left ("a" or "b"): random-looking, fixed per
    (pair, annotator), so a reload shows the same order."""
    return "a" if hashlib.sha256(f"{pair_id}\0{annotator}".encode()).digest()[0] % 2 == 0 else "b"


@dataclass
class _Action:
    file: Path
    row: dict


@dataclass
class LabelStore:
    """Pairs to label and the labels so far (rebuilt from the files when opened)."""

    pairs: list[Pair]
    out: Path
    overlap: int = 1
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self):
        self.out = Path(self.out)
        self.ties = self.out.with_name(self.out.name + ".ties.jsonl")
        self.skips = self.out.with_name(self.out.name + ".skips.jsonl")
        self.by_id = {p.pair_id: p for p in self.pairs}
        self.history: dict[str, list[_Action]] = {}  # annotator -> actions in order (for undo)
        self.reserved: dict[str, dict[str, float]] = {}  # pair -> annotator -> when handed out
        self.verdict_count: dict[str, int] = {}  # pair -> preferences and ties it has
        self.seen: dict[str, set[str]] = {}  # annotator -> pairs they gave a verdict or skipped
        self.handed: dict[str, set[str]] = {}  # annotator -> pairs next_for handed them, not yet answered
        where: dict[tuple[str, str], str] = {}  # (annotator, pair) -> "FILE, line N" of its verdict or skip
        for path in (self.out, self.ties, self.skips):
            for line, row in _read_rows(path):
                self._check_row(path, line, row, where)
                self._add(row["annotator"], _Action(path, row))

    def _check_row(self, path: Path, line: int, row: dict, where: dict) -> None:
        """A row read back must be a label of this pairs file, each annotator's verdict once."""
        here = f"{path}, line {line}"
        for key in ("annotator", "pair_id"):
            if not isinstance(row.get(key), str):
                raise DataError(f"{here}: field '{key}' missing or not text; expected a label row written by "
                                "`tether label`.")
        if row["pair_id"] not in self.by_id:
            raise DataError(f"{here}: pair_id {row['pair_id']!r} is not in the pairs file; the labels belong to "
                            "another pairs file (give that one with --pairs, or another --out).")
        if path == self.out and row.get("preferred") not in ("a", "b"):
            raise DataError(f"{here}: field 'preferred' = {row.get('preferred')!r}; expected 'a' or 'b'.")
        first = where.setdefault((row["annotator"], row["pair_id"]), here)
        if first != here:
            raise DataError(f"{here}: annotator {row['annotator']!r} already gave pair {row['pair_id']!r} a verdict "
                            f"or skip ({first}); expected one per annotator and pair.")

    def was_handed(self, annotator: str, pair_id: str) -> bool:
        """Whether :meth:`next_for` handed ``pair_id`` to ``annotator`` and it awaits their verdict."""
        return pair_id in self.handed.get(annotator, set())

    # -- reading -------------------------------------------------------------------------------
    def seen_by(self, annotator: str) -> set[str]:
        return self.seen.get(annotator, set())

    def labels_of(self, pair_id: str) -> int:
        """Verdicts (preferences and ties, not skips) the pair has."""
        return self.verdict_count.get(pair_id, 0)

    def _add(self, annotator: str, action: _Action) -> None:
        self.history.setdefault(annotator, []).append(action)
        self.seen.setdefault(annotator, set()).add(action.row["pair_id"])
        if action.file != self.skips:
            pid = action.row["pair_id"]
            self.verdict_count[pid] = self.verdict_count.get(pid, 0) + 1

    def progress(self, annotator: str) -> dict:
        mine = [a for a in self.history.get(annotator, []) if a.file != self.skips]
        left = sum(1 for p in self.pairs if p.pair_id not in self.seen_by(annotator)
                   and self.labels_of(p.pair_id) < self.overlap)
        return {"labelled": len(mine), "remaining": left, "pairs": len(self.pairs), "overlap": self.overlap}

    def next_for(self, annotator: str) -> Pair | None:
        """The first pair this annotator has not labelled or skipped that still needs a label
        (fewer than ``overlap`` verdicts, counting pairs handed to others in the last few minutes)."""
        with self.lock:
            now = time.time()
            seen = self.seen_by(annotator)
            for pair in self.pairs:
                if pair.pair_id in seen:
                    continue
                holders = {who: t for who, t in self.reserved.get(pair.pair_id, {}).items()
                           if now - t < RESERVE_S and who != annotator}
                if self.labels_of(pair.pair_id) + len(holders) < self.overlap:
                    self.reserved.setdefault(pair.pair_id, {})[annotator] = now
                    self.handed.setdefault(annotator, set()).add(pair.pair_id)
                    return pair
            return None

    # -- writing -------------------------------------------------------------------------------
    def record(self, annotator: str, pair_id: str, verdict: str, left: str) -> None:
        """``verdict``: "1" (left better), "2" (right better), "tie" or "skip"; ``left``: the
        response shown on the left ("a" or "b"), as the page received it."""
        pair = self.by_id[pair_id]
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        if verdict == "skip":
            path, row = self.skips, {"pair_id": pair_id, "annotator": annotator, "time": stamp}
        elif verdict == "tie":
            path, row = self.ties, {"pair_id": pair_id, "prompt": pair.prompt, "response_a": pair.response_a,
                                    "response_b": pair.response_b, "annotator": annotator, "time": stamp,
                                    "left": left}
        else:
            preferred = left if verdict == "1" else ("b" if left == "a" else "a")
            good, bad = (pair.response_a, pair.response_b) if preferred == "a" else (pair.response_b, pair.response_a)
            path, row = self.out, {"prompt": pair.prompt, "chosen": good, "rejected": bad, "pair_id": pair_id,
                                   "annotator": annotator, "time": stamp, "left": left, "preferred": preferred}
        with self.lock:
            if pair_id in self.seen_by(annotator):
                raise ValueError(f"{annotator!r} has already given pair {pair_id!r} a verdict")
            _append(path, row)
            self._add(annotator, _Action(path, row))
            self.reserved.get(pair_id, {}).pop(annotator, None)
            self.handed.get(annotator, set()).discard(pair_id)

    def undo(self, annotator: str) -> str | None:
        """Take back this annotator's last verdict (or skip); the pair it was on, or None."""
        with self.lock:
            actions = self.history.get(annotator)
            if not actions:
                return None
            last = actions.pop()
            pid = last.row["pair_id"]
            self.seen[annotator].discard(pid)
            if last.file != self.skips:
                self.verdict_count[pid] -= 1
            rows = [row for _, row in _read_rows(last.file)]
            for i in range(len(rows) - 1, -1, -1):
                if rows[i] == last.row:
                    del rows[i]
                    break
            _rewrite(last.file, rows)
            return last.row["pair_id"]


def _read_rows(path: Path) -> list[tuple[int, dict]]:
    """(line number, row) of every JSON object line of a labels file; any other line is a
    :class:`DataError` naming the file and line, but for a last line cut short by a crash (warned of)."""
    from tether.data.records import _parse_line  # the data loaders' messages for a bad JSON line

    if not path.is_file():
        return []
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise DataError(f"{path}: not valid UTF-8 (bad byte at file offset {e.start}); expected the JSON lines "
                        "`tether label` writes.") from None
    lines = text.split("\n")
    rows = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        if number == len(lines) and _cut_short(line):  # the last line, with no line break after it
            log.warning("%s, line %d: a label cut short by a crash mid-write (%d characters, no line break) is left "
                        "out; it is removed when the next label is written.", path, number, len(line))
            continue
        rows.append((number, _parse_line(line, str(path), number)))
    return rows


def _cut_short(line: str) -> bool:
    try:
        json.loads(line)
    except ValueError:
        return True
    return False


def _drop_cut_tail(path: Path) -> None:
    """Before appending: a last line without a line break is cut off when it is not JSON (a write
    a crash cut short, which :func:`_read_rows` left out), else given its line break."""
    if not path.is_file() or path.stat().st_size == 0:
        return
    with open(path, "rb") as fh:
        fh.seek(-1, os.SEEK_END)
        if fh.read(1) == b"\n":  # the usual case: one byte read
            return
    data = path.read_bytes()
    start = data.rfind(b"\n") + 1
    with open(path, "r+b") as fh:
        if _cut_short(data[start:].decode("utf-8", errors="replace")):
            fh.truncate(start)
        else:
            fh.seek(0, os.SEEK_END)
            fh.write(b"\n")
        fh.flush()
        os.fsync(fh.fileno())


def _append(path: Path, row: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    _drop_cut_tail(path)
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(row, ensure_ascii=False) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def _rewrite(path: Path, rows: list[dict]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
