"""Assemble benchmarks/gpu/run.sh's raw outputs into one JSON report (printed on stdout).

    python3 benchmarks/gpu/report.py RAW_DIR      # the report
    python3 benchmarks/gpu/report.py --measure-peak   # this GPU's bf16 matmul rate, as JSON

The report: the GPU suite's outcome per test; per benchmark run (model shape, algorithm, rollout
engine, LoRA / checkpointing) its seconds per iteration, tokens per second per phase, update MFU
against the device's bf16 peak (measured here, and the datasheet's), the measured peak device
memory against the memory model's prediction (overall and per phase, as far as the bench reports
them), and the lean / HF engine ratio of generated tokens per second. Standard library only (the
peak measurement imports torch); a missing or failed step is reported as such, never skipped.
"""

from __future__ import annotations

import json
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

#: Dense bf16 tensor-core rate of an H100/H200 SXM by NVIDIA's datasheet (TFLOP/s, no sparsity).
DATASHEET_BF16_TFLOPS = {"H200": 989.0, "H100": 989.0}
BENCH = re.compile(r"^bench-(?P<model>.+?)-(?P<algorithm>ppo|grpo|rloo|reinforce_pp)-(?P<engine>lean|hf)(?P<extra>-.*)?$")


def measure_peak(size: int = 8192, warmup: int = 3, timed: int = 10) -> dict:
    """The mean rate of ``timed`` bf16 (size x size) @ (size x size) products on random data, after
    ``warmup`` ones, timed with CUDA events (what the device's 'bf16 peak' means in this report)."""
    import torch

    a = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
    for _ in range(warmup):
        a @ b
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(timed):
        a @ b
    end.record()
    torch.cuda.synchronize()
    seconds = start.elapsed_time(end) / 1000 / timed
    return {"device": torch.cuda.get_device_name(), "bf16_tflops": 2 * size**3 / seconds / 1e12,
            "method": f"mean of {timed} bf16 {size}^3 matmuls on random data after {warmup} warm-ups (CUDA events)",
            "torch": torch.__version__, "cuda": torch.version.cuda}


def read_json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def read_rc(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def tail(path: Path, lines: int = 15) -> str | None:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return None


def suite(raw: Path) -> dict:
    """The suite's exit status and each test's outcome, seconds and (failed or skipped) message."""
    out = {"rc": read_rc(raw / "suite.rc"), "tests": []}
    if out["rc"] is None:
        return {**out, "status": "not run"}
    try:
        root = ET.parse(raw / "suite.xml").getroot()
    except (OSError, ET.ParseError):
        return {**out, "status": "no junit report", "log_tail": tail(raw / "suite.out")}
    for case in root.iter("testcase"):
        outcome, message = "passed", None
        for kind in ("failure", "error", "skipped"):
            node = case.find(kind)
            if node is not None:
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[kind]
                message = (node.get("message") or node.text or "")[:500]
                break
        out["tests"].append({"test": f"{case.get('classname')}::{case.get('name')}", "outcome": outcome,
                             "seconds": float(case.get("time") or 0), "message": message})
    counts: dict[str, int] = {}
    for t in out["tests"]:
        counts[t["outcome"]] = counts.get(t["outcome"], 0) + 1
    out["counts"] = counts
    out["seconds"] = round(sum(t["seconds"] for t in out["tests"]), 1)
    out["status"] = "passed" if out["rc"] == 0 else ("timed out" if out["rc"] == 124 else "failed")
    if out["rc"] != 0:
        out["log_tail"] = tail(raw / "suite.out", 40)
    return out


def peak_tflops(peak: dict | None) -> tuple[float | None, float | None]:
    """(measured bf16 TFLOP/s, datasheet bf16 TFLOP/s) of the device, where known."""
    if not peak:
        return None, None
    sheet = next((v for k, v in DATASHEET_BF16_TFLOPS.items() if k in str(peak.get("device", ""))), None)
    return peak.get("bf16_tflops"), sheet


def ratio(a, b):
    return round(a / b, 4) if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b else None


def bench_run(name: str, raw: Path, measured_tflops, sheet_tflops) -> dict:
    """One benchmark run's numbers (or why there are none)."""
    m = BENCH.match(name)
    row = {"run": name, **(m.groupdict() if m else {}), "rc": read_rc(raw / f"{name}.rc")}
    row["variant"] = (row.pop("extra", None) or "").lstrip("-") or "full"
    data = read_json(raw / f"{name}.out")
    if row["rc"] != 0 or not isinstance(data, dict):
        row["status"] = "timed out" if row["rc"] == 124 else "failed"
        row["log_tail"] = tail(raw / f"{name}.log")
        return row
    update_gflops = (data.get("achieved_gflops") or {}).get("update")
    split = data.get("predicted_peak_split") or {}
    baseline = split.get("baseline") or 0.0  # the process's RSS baseline: not device memory
    predicted = data.get("predicted_peak_mb")
    predicted_device = round(predicted - baseline, 1) if isinstance(predicted, (int, float)) else None
    measured = data.get("peak_device_mb")
    phases_pred = data.get("predicted_phases_mb") or {}
    config = data.get("config") or {}
    row["variant"] = " ".join([config.get("precision") or "?", f"lora{config['lora_r']}" if config.get("lora_r") else "full",
                               *(["grad-ckpt"] if config.get("gradient_checkpointing") else [])])
    row.update({
        "status": "ok",
        "params": data.get("params"),
        "config": data.get("config"),
        "seconds_per_iteration": (data.get("iteration_s") or {}).get("median"),
        "first_iteration_s": data.get("first_iteration_s"),
        "phases_s": data.get("phases_s"),
        "tokens_per_s": data.get("tokens_per_s"),
        "update_tflops": round(update_gflops / 1000, 2) if update_gflops else None,
        "update_mfu": ratio(update_gflops / 1000 if update_gflops else None, measured_tflops),
        "update_mfu_datasheet": ratio(update_gflops / 1000 if update_gflops else None, sheet_tflops),
        "peak_device_mb": measured,
        "peak_device_mb_by_phase": data.get("peak_device_mb_by_phase"),  # when the bench measures it
        "predicted_device_peak_mb": predicted_device,
        "predicted_phases_device_mb": {k: round(v - baseline, 1) for k, v in phases_pred.items()} or None,
        "predicted_split_mb": {k: v for k, v in split.items() if isinstance(v, (int, float))} or None,
        "measured_over_predicted": ratio(measured, predicted_device),
        "peak_rss_mb": data.get("peak_rss_mb"),
        "versions": data.get("versions"),
    })
    return row


def engines(rows: list[dict]) -> list[dict]:
    """Generated tokens per second of the lean engine over the HF engine, per model and algorithm."""
    by = {(r.get("model"), r.get("algorithm"), r.get("engine")): r for r in rows
          if r.get("status") == "ok" and " full" in r.get("variant", "") and "grad-ckpt" not in r.get("variant", "")}
    out = []
    for (model, algorithm, engine), r in sorted(by.items(), key=lambda kv: str(kv[0])):
        if engine != "lean" or (model, algorithm, "hf") not in by:
            continue
        lean = (r.get("tokens_per_s") or {}).get("generate")
        hf = (by[(model, algorithm, "hf")].get("tokens_per_s") or {}).get("generate")
        out.append({"model": model, "algorithm": algorithm, "generate_tokens_per_s": {"lean": lean, "hf": hf},
                    "lean_over_hf": ratio(lean, hf),
                    "seconds_per_iteration": {"lean": r.get("seconds_per_iteration"),
                                              "hf": by[(model, algorithm, "hf")].get("seconds_per_iteration")}})
    return out


def build(raw: Path) -> dict:
    peak = read_json(raw / "peak.out")
    measured, sheet = peak_tflops(peak)
    names = sorted(p.name[: -len(".rc")] for p in raw.glob("bench-*.rc"))
    rows = [bench_run(name, raw, measured, sheet) for name in names]
    return {
        "device": (peak or {}).get("device"),
        "bf16_peak_tflops": {"measured": round(measured, 1) if measured else None, "datasheet": sheet,
                             "method": (peak or {}).get("method")},
        "suite": suite(raw),
        "bench": rows,
        "engines": engines(rows),
        "notes": [
            "update_mfu: the bench's update FLOPs (tether.bench.flops) per update second over the measured bf16 "
            "matmul rate; update_mfu_datasheet: over the datasheet's dense bf16 rate.",
            "predicted_device_peak_mb: the memory model's peak without its process baseline (CPU RSS), against "
            "torch.cuda.max_memory_allocated; the CUDA context and allocator cache are not in either.",
        ],
    }


def main(argv: list[str]) -> int:
    if argv[:1] == ["--measure-peak"]:
        print(json.dumps(measure_peak(), indent=2))
        return 0
    if len(argv) != 1 or not Path(argv[0]).is_dir():
        print("usage: report.py RAW_DIR | --measure-peak", file=sys.stderr)
        return 2
    print(json.dumps(build(Path(argv[0])), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
