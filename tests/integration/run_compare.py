"""Comparing two run directories: metrics row by row, final weights file by file, the layout."""

from __future__ import annotations

import json
from pathlib import Path

from safetensors.torch import load_file

# fp32 on one CPU: ranks or workers sum gradients in another order than one process.
METRIC_ATOL, METRIC_RTOL = 1e-4, 1e-4
WEIGHT_ATOL = 5e-4  # after lr 1e-3 AdamW steps, whose normalised updates magnify rounding (largest seen: 1e-4)
SKIPPED = ("time",)
SKIPPED_PREFIXES = ("timing/", "perf/")
# An accuracy counts the signs of margins: where a margin sits at 0 up to rounding (DPO's first step,
# the policy still its reference), float noise that differs between CPUs and process counts decides
# it. The continuous margins and losses beside it are compared instead.
DISCRETE_SUFFIXES = ("accuracy",)


def metrics(run_dir: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items()
             if k not in SKIPPED and not k.startswith(SKIPPED_PREFIXES) and not k.endswith(DISCRETE_SUFFIXES)}
            for r in rows]


def largest_metric_diff(a: Path, b: Path) -> tuple[float, str]:
    rows_a, rows_b = metrics(a), metrics(b)
    assert len(rows_a) == len(rows_b), (len(rows_a), len(rows_b))
    worst = (0.0, "")
    for ra, rb in zip(rows_a, rows_b):
        assert ra.keys() == rb.keys(), set(ra) ^ set(rb)
        for key, va in ra.items():
            vb = rb[key]
            if isinstance(va, float) or isinstance(vb, float):
                diff = abs(va - vb)
                assert diff <= METRIC_ATOL + METRIC_RTOL * abs(va), f"{key} at step {ra['step']}: {va} vs {vb}"
                worst = max(worst, (diff, key))
            else:
                assert va == vb, f"{key} at step {ra['step']}: {va!r} vs {vb!r}"
    return worst


def weight_files(run_dir: Path) -> list[Path]:
    return sorted(p.relative_to(run_dir) for p in run_dir.rglob("*.safetensors") if "checkpoints" not in p.parts)


def largest_weight_diff(a: Path, b: Path) -> float:
    files = weight_files(a)
    assert files and files == weight_files(b)
    worst = 0.0
    for rel in files:
        wa, wb = load_file(str(a / rel)), load_file(str(b / rel))
        assert wa.keys() == wb.keys(), rel
        for key in wa:
            worst = max(worst, float((wa[key].float() - wb[key].float()).abs().max()))
    assert worst <= WEIGHT_ATOL, worst
    return worst


def layout(run_dir: Path) -> list[str]:
    return sorted(str(p.relative_to(run_dir)) for p in run_dir.rglob("*"))
