"""The parts of the vLLM engine's failure reports that need no vLLM: the JSON line each logged
error becomes inside the engine's processes, the reason read back from them, and the message
that names it with the command's own keys (the engine itself: tests/on_vllm)."""

from __future__ import annotations

import json
import logging

from tether.rollout.vllm_checks import EngineLog, unwrap
from tether.rollout.vllm_engine import CLI_KEYS, CONFIG_KEYS, dead_engine_message
from tether.rollout.vllm_worker import ErrorRecord

WRAPPED = ("RuntimeError: Worker failed with error 'Unsupported CPU attention configuration: head_dim=16 isa=2', "
           "please check the stack trace above for the root cause")


def logged(logger_name: str, path, message: str, exc: Exception | None = None) -> None:
    handler = logging.FileHandler(path)
    handler.setFormatter(ErrorRecord())
    logger = logging.getLogger(logger_name)
    logger.addHandler(handler)
    try:
        if exc is None:
            logger.error(message)
        else:
            try:
                raise exc
            except Exception:
                logger.exception(message)
    finally:
        logger.removeHandler(handler)
        handler.close()


def test_an_error_record_is_one_json_line_with_its_exception(tmp_path):
    path = tmp_path / "errors.jsonl"
    logged("test.vllm.a", path, "WorkerProc hit an exception.", RuntimeError("Unsupported CPU attention\nhead_dim=16"))
    logged("test.vllm.a", path, "Worker proc died unexpectedly %s", None)
    first, second = [json.loads(line) for line in path.read_text().splitlines()]
    assert first["message"] == "WorkerProc hit an exception."
    assert first["error"] == "RuntimeError: Unsupported CPU attention head_dim=16"  # on one line
    assert second["error"] is None


def test_the_reason_is_the_first_error_and_each_is_read_once(tmp_path):
    log = EngineLog()
    log.dir = str(tmp_path)
    path = tmp_path / "errors.jsonl"
    assert log.reason() is None  # nothing logged yet (no file)
    lines = [{"process": "Worker", "message": "WorkerProc hit an exception.",
              "error": "RuntimeError: Unsupported CPU attention configuration: head_dim=16"},
             {"process": "EngineCore", "message": "Dumping input data", "error": None},
             {"process": "EngineCore", "message": "EngineCore encountered a fatal error.", "error": WRAPPED}]
    path.write_text("".join(json.dumps(r) + "\n" for r in lines) + '{"process": "cut')  # the last line unfinished
    assert log.reason() == "RuntimeError: Unsupported CPU attention configuration: head_dim=16"
    assert log.reason() is None  # read already
    with path.open("a") as fh:  # the cut line is finished, then a death without an exception of its own
        fh.write('", "message": "noise"}\n')
        fh.write(json.dumps({"process": "EngineCore", "message": "Worker proc VllmWorker-0 died unexpectedly.",
                             "error": None}) + "\n")
        fh.write(json.dumps({"process": "EngineCore", "message": "fatal", "error": "RuntimeError: Executor failed."})
                 + "\n")
    assert log.reason() == "noise (RuntimeError: Executor failed.)"
    log.close()
    assert not tmp_path.exists()


def test_the_workers_error_is_taken_out_of_the_engine_cores_wrapper():
    assert unwrap(WRAPPED) == "Unsupported CPU attention configuration: head_dim=16 isa=2"
    assert unwrap("AssertionError: Not enough allowed NUMA nodes") == "AssertionError: Not enough allowed NUMA nodes"


def test_a_dead_engine_names_seed_requests_only_when_that_is_the_cause_and_the_command_has_it():
    other = dead_engine_message("RuntimeError: Unsupported CPU attention configuration: head_dim=16",
                                "sampling 4 requests", CONFIG_KEYS)
    assert "head_dim=16" in other and "seed_requests" not in other and "rollout.engine=vllm" in other
    seeded = "RuntimeError: CPU Generator does not use offset"
    training = dead_engine_message(seeded, "sampling 64 requests", CONFIG_KEYS)
    assert "rollout.vllm.seed_requests=false" in training and "does not use offset" in training
    for keys in (CLI_KEYS,):  # eval, serve, pairs: no such key
        text = dead_engine_message(seeded, "sampling 64 requests", keys)
        assert "seed_requests" not in text and "rollout." not in text and "VLLM_CPU_KVCACHE_SPACE" in text
        assert "--engine vllm" in text
