"""Methods tether adds to vLLM's workers (``worker_extension_cls``), called by name through
``LLM.collective_rpc``: stage the actor's weights bucket by bucket, then reload them in place.
Imported inside vLLM's worker processes; it needs nothing from tether."""

from __future__ import annotations


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
        self.model_runner.reload_weights(weights_iterator=iter(staged))
        self._tether_staged = []
        return len(staged)
