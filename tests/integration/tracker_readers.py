"""Read a run's metrics back from each tracker with the tracker's own reader: {(step, name): value}.

Each reader gives the metrics the tracker stored, to compare with the run's ``metrics.jsonl``.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

from tether.metrics import read_metrics


def jsonl_metrics(run: Path) -> dict[tuple[int, str], float]:
    """The finite numbers of ``metrics.jsonl`` (the last value where a step logs a name twice)."""
    out = {}
    for row in read_metrics(run / "metrics.jsonl"):
        for key, value in row.items():
            if key not in ("stage", "step", "time") and isinstance(value, (int, float)) and not isinstance(value, bool):
                out[(row["step"], key)] = float(value)
    return out


def tensorboard_metrics(run: Path) -> tuple[dict, dict]:
    """Scalars and text summaries through TensorBoard's EventAccumulator (one events file expected)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run / "tensorboard"), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    scalars = {(e.step, tag): e.value for tag in acc.Tags()["scalars"] for e in acc.Scalars(tag)}
    texts = {(e.step, tag): e.tensor_proto.string_val[0].decode() for tag in acc.Tags()["tensors"]
             for e in acc.Tensors(tag)}
    return scalars, texts


def mlflow_run(run: Path):
    """(client, the one run in the store RUN/mlflow.db, its metrics)."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{(run / 'mlflow.db').resolve()}")
    experiment = client.get_experiment_by_name("tether")
    runs = client.search_runs([experiment.experiment_id])
    assert len(runs) == 1, f"expected one MLflow run, found {len(runs)}"
    info = runs[0]
    metrics = {}
    for key in info.data.metrics:
        for m in client.get_metric_history(info.info.run_id, key):
            metrics[(m.step, key)] = m.value
    return client, info, metrics


def wandb_records(run_file: Path):
    """The records of an offline W&B run file (``run-ID.wandb``): W&B's LevelDB-style log of
    protobuf ``Record``s in 32 KiB blocks, each chunk headed by crc32 (4), length (2), type (1)."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = run_file.read_bytes()
    assert data[:4] == b":W&B", f"{run_file} is not a W&B run file"
    pos, block, pending = 7, 32768, b""
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a header is padding
            pos += block - pos % block
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if kind == 0 and length == 0:
            break
        pending += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # FULL or LAST: a whole record
            record = pb.Record()
            record.ParseFromString(pending)
            pending = b""
            yield record


def wandb_history(run: Path) -> tuple[dict, dict, dict]:
    """(metrics by (step, name), tables by (step, name) as their stored rows, the run's config)."""
    (run_dir,) = list((run / "wandb").glob("offline-run-*"))
    (run_file,) = list(run_dir.glob("run-*.wandb"))
    metrics, tables, config = {}, {}, {}
    for record in wandb_records(run_file):
        kind = record.WhichOneof("record_type")
        if kind == "history":
            items, nested = {}, {}
            for item in record.history.item:
                if len(item.nested_key) > 1:  # a logged object (a table) comes as its fields
                    nested.setdefault(item.nested_key[0], {})["/".join(item.nested_key[1:])] = json.loads(item.value_json)
                else:
                    items[item.key or item.nested_key[0]] = json.loads(item.value_json)
            step = int(items.pop("_step", record.history.step.num))
            metrics.update({(step, k): float(v) for k, v in items.items()
                            if not k.startswith("_") and isinstance(v, (int, float))})
            for name, fields in nested.items():
                if fields.get("_type") == "table-file":
                    table = json.loads((run_dir / "files" / fields["path"]).read_text())
                    tables[(step, name)] = [dict(zip(table["columns"], row)) for row in table["data"]]
        elif kind in ("config", "run"):  # the config comes with the run record, updates after it
            for item in (record.config if kind == "config" else record.run.config).update:
                config[item.key or "/".join(item.nested_key)] = json.loads(item.value_json)
    return metrics, tables, config


def trackio_logs(trackio_dir: Path, project: str, run_name: str) -> list[dict]:
    """trackio's stored logs of a run, read in a fresh process (trackio reads TRACKIO_DIR on import)."""
    code = ("import json, sys\nfrom trackio.sqlite_storage import SQLiteStorage\n"
            "print(json.dumps(SQLiteStorage.get_logs(sys.argv[1], sys.argv[2]), default=str))")
    proc = subprocess.run([sys.executable, "-c", code, project, run_name], capture_output=True, text=True,
                          env={**os.environ, "TRACKIO_DIR": str(trackio_dir)}, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])
