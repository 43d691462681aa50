"""Code that runs inside vLLM's processes: the methods tether adds to its workers
(``worker_extension_cls``), called by name through ``LLM.collective_rpc`` to stage the actor's
weights bucket by bucket and reload them in place; and the formatter of the errors those
processes log (:class:`ErrorRecord`, read back by :class:`tether.rollout.vllm_checks.EngineLog`).
It needs nothing from tether."""

from __future__ import annotations

import json
import logging

# A reload warns "RotaryEmbedding: Failed to load weights" every time: its cos/sin cache is
# computed, never in a checkpoint, and vLLM keeps it as it was (the warning says no more).
# Only that layer's warning is dropped; any other layer failing to load still warns.
_RELOAD_LOGGER = "vllm.model_executor.model_loader.reload.layerwise"


def _not_rotary(record: logging.LogRecord) -> bool:
    return not (str(record.msg).endswith("Failed to load weights") and record.args
                and str(record.args[0]) == "RotaryEmbedding")


#: The output head's weight as a Hugging Face causal LM names it.
HEAD = "lm_head.weight"


def loadable(staged: list, module_names) -> list:
    """The staged (name, tensor) pairs the model can take: all, less the output head's when the
    model has no module named ``lm_head``. Such a model's head is its input embedding (tied, as
    vLLM builds Gemma-2), which arrives under its own name; the head's name would fail the whole
    reload. A model with an ``lm_head`` of its own (vLLM's Llama, tied or not) takes the name: its
    head's packed CPU copy is refreshed only by loading it."""
    if "lm_head" in module_names:
        return staged
    return [(name, tensor) for name, tensor in staged if name != HEAD]


class WeightSync:
    """Mixed into vLLM's worker class: ``self`` is the worker (``self.model_runner``)."""

    def tether_stage(self, bucket: bytes, first: bool) -> int:
        """Keep a bucket of weights (safetensors bytes: names and tensors, exactly) for
        :meth:`tether_reload`; ``first`` starts anew."""
        from safetensors.torch import load

        if first or not hasattr(self, "_tether_staged"):
            self._tether_staged = []
        self._tether_staged.extend(load(bucket).items())
        return len(self._tether_staged)

    def tether_reload(self) -> int:
        """Reload the staged weights the model can take (:func:`loadable`) in place (the CPU backend
        repacks its linear weights), then drop them; returns how many tensors were loaded."""
        model = self.model_runner.get_model()
        if not hasattr(self, "_tether_modules"):  # every name, aliases too (a head tied by assignment)
            self._tether_modules = frozenset(name for name, _ in model.named_modules(remove_duplicate=False))
        staged = loadable(getattr(self, "_tether_staged", []), self._tether_modules)
        reload_log = logging.getLogger(_RELOAD_LOGGER)
        if _not_rotary not in reload_log.filters:
            reload_log.addFilter(_not_rotary)
        self.model_runner.reload_weights(weights_iterator=iter(staged))
        self._tether_staged = []
        return len(staged)


class ErrorRecord(logging.Formatter):
    """A logged error as one JSON line: the process, the message, and the exception it carries
    as ``Type: message`` on one line (the engine's reason for dying, when it dies)."""

    def format(self, record: logging.LogRecord) -> str:
        exc = record.exc_info[1] if record.exc_info else None
        text = " ".join(str(exc).split()) if exc is not None else ""
        error = (f"{type(exc).__name__}: {text}" if text else type(exc).__name__) if exc is not None else None
        process = getattr(record, "vllm_process_name", None) or record.processName
        return json.dumps({"process": process, "message": " ".join(record.getMessage().split())[:2000],
                           "error": error[:2000] if error else None})
