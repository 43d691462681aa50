"""What tether can know about a vLLM engine's failures: the settings its build cannot run,
checked before it starts (by the run and by ``--dry-run``), and the reason an engine that died
gave, read back from its processes' logs.

vLLM finds a head size its attention backend lacks, or a tensor-parallel size the machine cannot
host, only inside its engine processes: the engine dies there, and all the process that started it
learns is ``EngineDeadError`` ("see stack trace above"). So the checks ask vLLM itself (its
platform, its attention backend's head sizes, its CPU thread-binding settings) before the engine
starts, and :class:`EngineLog` gives every engine process a logging handler (through vLLM's own
``logging_config``) that writes each logged error as one JSON line: the first one logged after the
last look names the cause (the processes that notice a failure log after the one that had it).
"""

from __future__ import annotations

import copy
import json
import logging
import os
import re
import shutil
import tempfile

from tether.common.errors import ConfigError

ERROR_FORMATTER = "tether.rollout.vllm_worker.ErrorRecord"  # imported inside vLLM's processes


def head_dim(config) -> int:
    """The attention head size of a transformers config (``head_dim``, else hidden / heads)."""
    return getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads


# -- before the engine starts --------------------------------------------------------------------


def check_attention(config, model_path, keys: dict) -> None:
    """vLLM's CPU build runs one attention backend, whose kernels exist for some head sizes only
    (16, say, dies at the first request with 'Unsupported CPU attention configuration'): refuse
    another head size, listing the ones the installed build has. GPU builds choose among several
    backends and validate the choice themselves; a failure there is reported with its reason."""
    from vllm.platforms import current_platform

    if not current_platform.is_cpu() or getattr(config, "kv_lora_rank", None):  # MLA: another backend
        return
    size = head_dim(config)
    backend = _attention_backend(size)
    if backend is None or backend.supports_head_size(size):
        return
    sizes = ", ".join(str(s) for s in backend.get_supported_head_sizes())
    raise ConfigError(
        f"{keys['engine']} cannot run '{model_path}': its attention heads have {size} dimensions "
        f"(hidden_size {config.hidden_size} / {config.num_attention_heads} heads), and this vLLM build's attention "
        f"backend ({backend.get_name()}) supports head sizes {sizes} only. Use {keys['lean']} for this model.")


def _attention_backend(size: int):
    """The attention backend class vLLM's platform picks for a decoder with this head size (None
    if it cannot say outside an engine)."""
    import torch
    from vllm.platforms import current_platform
    from vllm.utils.import_utils import resolve_obj_by_qualname
    from vllm.v1.attention.selector import AttentionSelectorConfig

    try:
        path = current_platform.get_attn_backend_cls(
            None, attn_selector_config=AttentionSelectorConfig(size, torch.float32, None, None))
        return resolve_obj_by_qualname(path) if path else None
    except Exception:  # noqa: BLE001 - another vLLM version's signature: the engine will say
        return None


def check_tensor_parallel(size: int, keys: dict) -> None:
    """A tensor-parallel size the machine can host: on a GPU build at most the devices vLLM sees;
    on the CPU build (one worker per NUMA node when it binds threads itself, the default) at most
    the NUMA nodes this process may use, or one CPU list per worker in VLLM_CPU_OMP_THREADS_BIND."""
    if size <= 1:
        return
    from vllm import envs
    from vllm.platforms import current_platform

    what = f"{keys['tensor_parallel']} = {size}"
    if not current_platform.is_cpu():
        count = current_platform.device_count()
        if size > count:
            raise ConfigError(f"{what} shards the policy over {size} devices, but vLLM sees {count} "
                              f"{current_platform.device_name} device(s); set it to at most {count}.")
        return
    bind = envs.VLLM_CPU_OMP_THREADS_BIND
    if bind == "nobind" or os.environ.get("VLLM_CPU_SIM_MULTI_NUMA", "0") != "0":
        return
    if bind != "auto":
        lists = bind.split("|")
        if len(lists) != size:
            raise ConfigError(f"{what}, but VLLM_CPU_OMP_THREADS_BIND='{bind}' gives {len(lists)} CPU list(s); "
                              f"vLLM's CPU build needs one per worker ('|'-separated), {size} here.")
        return
    from vllm.utils.cpu_resource_utils import get_visible_memory_node

    nodes = get_visible_memory_node()
    if len(nodes) < size:
        raise ConfigError(
            f"{what}, but vLLM's CPU build runs its {size} workers on one NUMA node each and this process may use "
            f"{len(nodes)} NUMA node(s) ({', '.join(map(str, nodes)) or 'none'}); set it to at most "
            f"{max(len(nodes), 1)}, or give each worker its own CPUs with VLLM_CPU_OMP_THREADS_BIND (e.g. '0-3|4-7').")


# -- after it died ------------------------------------------------------------------------------


class EngineLog:
    """The errors an engine's processes log, one JSON line each, in a file of a private temporary
    directory; :meth:`reason` reads the ones logged since its last call.

    Works through vLLM's ``logging_config`` (its ``pylogging_config_file``), which every engine
    process applies: vLLM's own stream handler, as it would set it up, plus one for errors. A user's
    own vLLM logging config (VLLM_LOGGING_CONFIG_PATH, VLLM_CONFIGURE_LOGGING=0) is left alone; the
    reason is then only in the engine's log."""

    def __init__(self):
        self.dir: str | None = None
        self.offset = 0

    def logging_config(self):
        """The ``logging_config`` to give ``vllm.LLM`` (None: leave vLLM's logging as it is)."""
        from vllm import envs
        from vllm.config.logging import LoggingConfig

        if envs.VLLM_LOGGING_CONFIG_PATH or not envs.VLLM_CONFIGURE_LOGGING:
            return None
        try:
            config = _logging_dict(os.path.join(self._directory(), "errors.jsonl"))
        except Exception:  # noqa: BLE001 - another vLLM version's layout: no capture, nothing else lost
            return None
        path = os.path.join(self._directory(), "logging.json")
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(config, fh)
        return LoggingConfig(pylogging_config_file=path)

    def _directory(self) -> str:
        if self.dir is None:
            self.dir = tempfile.mkdtemp(prefix=f"tether-vllm-{os.getpid()}-")
            from tether.common.child_guard import remove_on_death

            remove_on_death(self.dir)
        return self.dir

    def reason(self) -> str | None:
        """The first error logged since the last call (the root cause: the processes that notice
        it log after): its exception (type and message, on one line), or its message followed by
        the first exception logged after it; None when nothing was logged."""
        records = self._new_records()
        if not records:
            return None
        if records[0].get("error"):
            return unwrap(records[0]["error"])
        later = next((unwrap(r["error"]) for r in records if r.get("error")), None)
        message = records[0].get("message") or "an error without a message"
        return f"{message.rstrip('.')} ({later})" if later else message

    def _new_records(self) -> list[dict]:
        if self.dir is None:
            return []
        try:
            with open(os.path.join(self.dir, "errors.jsonl"), "rb") as fh:
                fh.seek(self.offset)
                data = fh.read()
        except OSError:
            return []
        data = data[: data.rfind(b"\n") + 1]  # a line still being written waits for the next call
        self.offset += len(data)
        records = []
        for line in data.decode("utf-8", "replace").splitlines():
            try:
                records.append(json.loads(line))
            except ValueError:
                continue
        return records

    def close(self) -> None:
        """Drop this process's handler for the file and remove the directory."""
        if self.dir is None:
            return
        vllm_logger = logging.getLogger("vllm")
        for handler in list(vllm_logger.handlers):
            if str(getattr(handler, "baseFilename", "")).startswith(self.dir):
                vllm_logger.removeHandler(handler)
                handler.close()
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir = None


def _logging_dict(errors_path: str) -> dict:
    """vLLM's default logging config, as its logger sets it up from the environment, plus a
    handler writing errors to ``errors_path`` as JSON lines."""
    from vllm import envs
    from vllm import logger as vllm_logger

    config = copy.deepcopy(vllm_logger.DEFAULT_LOGGING_CONFIG)
    level = envs.VLLM_LOGGING_LEVEL
    config["handlers"]["vllm"].update(level=level, stream=envs.VLLM_LOGGING_STREAM)
    for formatter in config["formatters"].values():
        formatter["log_level"] = level
    config["formatters"]["tether_errors"] = {"()": ERROR_FORMATTER}
    config["handlers"]["tether_errors"] = {"class": "logging.FileHandler", "filename": errors_path, "delay": True,
                                           "level": "ERROR", "formatter": "tether_errors", "encoding": "utf-8"}
    logger = config["loggers"]["vllm"]
    logger["handlers"] = [*logger["handlers"], "tether_errors"]
    # Errors reach the file even under VLLM_LOGGING_LEVEL=CRITICAL; stderr keeps the user's level.
    numeric = logging.getLevelName(level)
    logger["level"] = min(numeric, logging.ERROR) if isinstance(numeric, int) else logging.ERROR
    return config


_WRAPPED = re.compile(r"failed with error '(?P<inner>.+)', please check the stack trace above", re.S)


def unwrap(error: str) -> str:
    """The worker's own error inside the engine core's wrapper ("RuntimeError: Worker failed with
    error '...', please check the stack trace above for the root cause")."""
    match = _WRAPPED.search(error)
    return match.group("inner") if match else error
