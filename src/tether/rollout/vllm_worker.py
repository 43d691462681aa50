"""Methods tether adds to vLLM's workers (``worker_extension_cls``), called by name through
``LLM.collective_rpc``: stage the actor's weights bucket by bucket, then reload them in place.
Imported inside vLLM's worker processes; it needs nothing from tether."""

from __future__ import annotations

import logging

# A reload warns "RotaryEmbedding: Failed to load weights" every time: its cos/sin cache is
# computed, never in a checkpoint, and vLLM keeps it as it was (the warning says no more).
# Only that layer's warning is dropped; any other layer failing to load still warns.
_RELOAD_LOGGER = "vllm.model_executor.model_loader.reload.layerwise"


def _not_rotary(record: logging.LogRecord) -> bool:
    return not (str(record.msg).endswith("Failed to load weights") and record.args
                and str(record.args[0]) == "RotaryEmbedding")


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
        """Reload the staged weights in place (the CPU backend repacks its linear weights), then
        drop them; returns how many tensors were loaded."""
        staged = getattr(self, "_tether_staged", [])
        reload_log = logging.getLogger(_RELOAD_LOGGER)
        if _not_rotary not in reload_log.filters:
            reload_log.addFilter(_not_rotary)
        self.model_runner.reload_weights(weights_iterator=iter(staged))
        self._tether_staged = []
        return len(staged)
