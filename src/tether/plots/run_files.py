"""Reading a run's files for the report: tolerant readers and which files a directory holds.

A report must still build from a run that crashed: a JSON line cut mid-write is skipped, a
missing or broken file reads as empty.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tether.registry.algorithms import DEFAULT_ALGORITHM
from tether.common.errors import TetherError


def read_jsonl(path: Path) -> list[dict]:
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut by a crash mid-write: skip it, keep the rest
        if isinstance(row, dict):
            rows.append(row)
    return rows


def read_json(path: Path | None) -> Any:
    if path is None:
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None


def read_yaml(path: Path | None) -> dict:
    if path is None:
        return {}
    try:
        import yaml

        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except Exception:  # noqa: BLE001 - a broken config must not stop the report
        return {}
    return data if isinstance(data, dict) else {}


def locate(run_dir: str | Path) -> dict[str, Any]:
    """Which files of a run or demo directory the report will read: name -> Path (or None)."""
    root = Path(run_dir)
    if not root.is_dir():
        raise TetherError(f"'{root}' is not a directory: give a run directory (with metrics.jsonl) or a demo "
                          "directory (with ppo/metrics.jsonl).")
    search = [root, root / DEFAULT_ALGORITHM]

    def first(name: str) -> Path | None:
        for d in search:
            if (d / name).is_file():
                return d / name
        return None

    metrics = first("metrics.jsonl")
    found = {
        "root": root,
        "demo": (root / DEFAULT_ALGORITHM).is_dir() and ((root / "sft").is_dir() or (root / "summary.json").is_file()),
        "metrics": metrics,
        "config": (metrics.parent / "config.yaml") if metrics and (metrics.parent / "config.yaml").is_file() else None,
    }
    for name in ("alarms.jsonl", "samples.jsonl", "summary.json", "eval.json", "frontier.json", "best_of_n.json"):
        found[name.split(".")[0]] = first(name)
    found["sft_metrics"] = root / "sft" / "metrics.jsonl" if (root / "sft" / "metrics.jsonl").is_file() else None
    found["rm_metrics"] = root / "rm" / "metrics.jsonl" if (root / "rm" / "metrics.jsonl").is_file() else None
    return found
