"""The last decoder layer run only at the positions whose outputs are read.

RLHF reads a model's outputs at a few positions: the response positions (log-probs, values),
the last token (reward) or the last prompt token (the first decode step). Every layer but the
last must still run everywhere, since later layers attend to all positions' keys and values.
The last layer's keys and values are needed everywhere too, but its query projection,
attention output, output projection and MLP only at the read positions. At the benchmark's
"small" shape (4 layers, ~25 prompt tokens before 32 response tokens) that is ~10 % of every
forward and backward; at a 1-token read (the reward) nearly a quarter.

The result is the same function: the outputs at the kept positions are those of the full
layer, up to float summation order. Only Llama-layout layers (pre-norm attention with
q/k/v/o projections and rotary embeddings, then a pre-norm MLP) are run this way, and each
model is checked once against its full forward on the first batch it sees; a model that
fails the check, or any other architecture, silently runs its full forward as before.
"""

from __future__ import annotations

import logging
import sys
from contextlib import contextmanager
from types import MethodType

import torch
from torch import Tensor

from tether.models.packing import FP32_SDPA, PACKED_SDPA, PACKED_SDPA_FP32
from tether.models.state import state_of

log = logging.getLogger(__name__)

#: Decoder layers whose structure :func:`_forward_at` reproduces.
LLAMA_LAYOUT = ("LlamaDecoderLayer", "MistralDecoderLayer", "Qwen2DecoderLayer")
#: Attention implementations that take a 4D (B, 1, Q, K) mask (bool or additive) or None, and the
#: packed SDPA switched in for a packed pass (:mod:`tether.models.packing`).
MASKED_ATTENTION = ("sdpa", "eager", FP32_SDPA, PACKED_SDPA, PACKED_SDPA_FP32)



def decoder_layers(model):
    """The model's list of decoder layers, or None if it has no ``base_model.layers``."""
    layers = getattr(getattr(model, "base_model", None), "layers", None)
    return layers if isinstance(layers, torch.nn.ModuleList) and len(layers) > 0 else None


def supported(model) -> bool:
    """Whether ``model``'s last layer has the Llama layout and a 4D-mask attention."""
    layers = decoder_layers(model)
    if layers is None or type(layers[-1]).__name__ not in LLAMA_LAYOUT:
        return False
    config = model.config
    if getattr(config, "_attn_implementation", None) not in MASKED_ATTENTION:
        return False
    # Sliding-window attention would need the window in the rebuilt causal mask.
    return not (getattr(config, "sliding_window", None) and getattr(config, "use_sliding_window", True))


def take_positions(x: Tensor, keep: slice | Tensor) -> Tensor:
    """x: (B, T, ...) -> (B, K, ...) at ``keep``: a slice, or (B, K) positions per row."""
    if isinstance(keep, slice):
        return x[:, keep]
    index = keep.reshape(*keep.shape, *([1] * (x.dim() - 2))).expand(*keep.shape, *x.shape[2:])
    return x.gather(1, index)


def _mask_rows(mask: Tensor | None, keep: slice | Tensor, batch: int, length: int, device) -> Tensor:
    """The (B, 1, K, T) attention mask of the kept query rows.

    ``mask`` is the model's own 4D mask (B or 1, 1, T, T), or None where SDPA would have used
    ``is_causal``: that flag aligns a K-row query with the first K keys, so a causal bool mask
    over the kept rows is built instead.
    """
    if mask is None:
        positions = torch.arange(length, device=device)
        rows = take_positions(positions.expand(batch, length), keep)  # (B, K)
        return (positions[None, None, :] <= rows[:, :, None]).unsqueeze(1)
    mask = mask.expand(batch, *mask.shape[1:])
    if isinstance(keep, slice):
        return mask[:, :, keep]
    return take_positions(mask.squeeze(1), keep).unsqueeze(1)


def _forward_at(layer, keep, hidden_states: Tensor, attention_mask: Tensor | None = None,
                position_embeddings: tuple[Tensor, Tensor] | None = None, past_key_values=None,
                **kwargs) -> Tensor:
    """A Llama-layout decoder layer whose output exists only at ``keep``: (B, T, H) -> (B, K, H)."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    attn = layer.self_attn
    batch, length, _ = hidden_states.shape
    head_dim = attn.head_dim
    normed = layer.input_layernorm(hidden_states)
    query_in = take_positions(normed, keep)
    kept = query_in.shape[1]
    q = attn.q_proj(query_in).view(batch, kept, -1, head_dim).transpose(1, 2)
    k = attn.k_proj(normed).view(batch, length, -1, head_dim).transpose(1, 2)
    v = attn.v_proj(normed).view(batch, length, -1, head_dim).transpose(1, 2)
    cos, sin = (x.expand(batch, *x.shape[1:]) for x in position_embeddings)  # (B, T, head_dim)
    rotate_half = sys.modules[type(attn).__module__].rotate_half  # the model's own RoPE helper
    qcos, qsin = take_positions(cos, keep).unsqueeze(1), take_positions(sin, keep).unsqueeze(1)
    q = q * qcos + rotate_half(q) * qsin
    k = k * cos.unsqueeze(1) + rotate_half(k) * sin.unsqueeze(1)
    if past_key_values is not None:
        k, v = past_key_values.update(k, v, attn.layer_idx)
    eager = sys.modules[type(attn).__module__].eager_attention_forward
    attention = ALL_ATTENTION_FUNCTIONS.get_interface(attn.config._attn_implementation, eager)
    packed = kwargs.get("tether_packing")
    if packed is not None:
        # A packed pass (tether.models.packing): its attention keeps rows apart by their layout, for
        # every query position, so the kept queries are placed among zeros and read back after.
        full = q.new_zeros(batch, q.shape[1], length, head_dim)
        full[:, :, keep[0]] = q
        out, _ = attention(attn, full, k, v, None, dropout=0.0, scaling=attn.scaling, tether_packing=packed)
        out = out[:, keep[0]]
    else:
        mask = _mask_rows(attention_mask, keep, batch, k.shape[2], hidden_states.device)
        out, _ = attention(attn, q, k, v, mask, dropout=0.0, scaling=attn.scaling)
    out = attn.o_proj(out.reshape(batch, kept, -1).contiguous())
    hidden = take_positions(hidden_states, keep) + out
    return hidden + layer.mlp(layer.post_attention_layernorm(hidden))


@contextmanager
def last_layer_at(model, keep: slice | Tensor | None):
    """While active, ``model``'s trunk returns hidden states (B, K, H) at ``keep`` only.

    ``keep``: a slice of positions, or (B, K) positions per row. Only for a model that passed
    its check (:func:`check`); otherwise, or with ``keep=None``, nothing changes and the trunk
    returns all T positions, so callers slice its output with :func:`take_positions` when it
    still has T positions. Not for concurrent use of one model from two threads.
    """
    if keep is None or state_of(model).last_layer is not True:
        yield
        return
    with _trimmed(model, keep):
        yield


@contextmanager
def _trimmed(model, keep):
    layer = decoder_layers(model)[-1]
    layer.forward = MethodType(lambda self, *a, **kw: _forward_at(self, keep, *a, **kw), layer)
    # The trimmed layer runs without gradient checkpointing. transformers >= 5.20 checkpoints the
    # class's forward, which this instance's replaces, so it never checkpointed it; transformers
    # < 5.20 checkpoints in __call__ and recomputes through ``self.forward`` in the backward, after
    # this context has put the full forward back (a CheckpointError: other shapes). It holds its
    # activations at the K kept positions only.
    checkpointing = getattr(layer, "gradient_checkpointing", False)
    if checkpointing:
        layer.gradient_checkpointing = False
    try:
        yield
    finally:
        del layer.forward
        if checkpointing:
            layer.gradient_checkpointing = checkpointing


def run_in_full(model) -> None:
    """Never trim ``model``'s last layer (``rl.trim_last_layer=false``)."""
    state_of(model).last_layer = False


def needs_check(model) -> bool:
    """``model`` could be trimmed and has not been checked yet."""
    return state_of(model).last_layer is None and supported(model)


def check(model, run_trunk, keep: slice | Tensor) -> bool:
    """Compare the trimmed trunk with the full one once, on a real batch; remember the verdict.

    ``run_trunk()`` returns the trunk's (B, T, H) output, or (B, K, H) while trimmed. Runs
    without gradients or autocast; a mismatch beyond float noise turns trimming off for this model.
    """
    device = next(model.parameters()).device.type
    with torch.no_grad(), torch.autocast(device, enabled=False):
        full = take_positions(run_trunk(), keep)
        with _trimmed(model, keep):
            trimmed = run_trunk()
    ok = full.shape == trimmed.shape and torch.allclose(trimmed, full, rtol=1e-3, atol=1e-4)
    state_of(model).last_layer = ok
    if not ok:
        log.warning("%s: the last layer at the read positions did not match the full forward; "
                    "running the full forward for this model.", type(model).__name__)
    return ok
