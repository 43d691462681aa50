"""Padding-free batches: the real tokens of a padded (B, T) batch as one (1, N) sequence.

Every batch tether scores or trains on is a padded rectangle (left-padded prompts, right-padded
responses or SFT rows). With long-tailed lengths, padding is often half of the tokens the model
computes. A packed pass puts only the N real tokens through the trunk: the rows concatenated,
position ids restarting at 0 in each row (counting real tokens, as the padded pass's
:func:`tether.models.forward.position_ids` does), and no attention across rows. The outputs are
scattered back to the padded positions, so every caller sees today's shapes and values (within
float summation order); padding positions read zeros.

No attention across rows comes from the model's own attention through transformers' packed-
sequence format (position ids and no 2D mask):

- ``sdpa`` (and tether's fp32 SDPA under CPU bf16 autocast): :func:`packed_sdpa`, registered with
  transformers as an attention implementation and switched in once the model is found to pack
  (for a pass that does not pack, it is transformers' SDPA with its mask). It runs SDPA with
  ``is_causal`` on groups of rows of similar length (:func:`attention_groups`): each group is
  right-padded to its longest row, where causality alone keeps real queries off padding keys,
  so attention costs about the sum of each row's own square, not the square of the sum, and
  no (N, N) mask is ever built.
- ``flash_attention_2`` and ``flex_attention``: transformers' own varlen / block-mask paths,
  which read the rows from the position ids.
- ``eager``: transformers' block-diagonal mask built from the position ids (correct; its cost is
  that of an (N, N) mask, so eager is for debugging, not speed).

A model packs when ``model.padding_free`` is on (:func:`set_padding_free`; on for a model never
set), its attention implementation is one of the above, it has no sliding-window attention, and
its packed forward matched its padded forward at its first pass
(:func:`tether.models.forward.check_packing`); otherwise it pads, and says why once, in a warning.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch
from torch import Tensor

from tether.models.state import state_of

log = logging.getLogger(__name__)

#: The attention implementation switched in for a model that packs, by the model's own.
PACKED_SDPA = "tether_packed_sdpa"
PACKED_SDPA_FP32 = "tether_packed_sdpa_fp32"
FP32_SDPA = "tether_sdpa_fp32"  # tether.engines.cpu.attention's fp32 SDPA under CPU bf16 autocast
SWITCHED = {"sdpa": PACKED_SDPA, FP32_SDPA: PACKED_SDPA_FP32}
#: Implementations whose packed-sequence support transformers provides from the position ids.
NATIVE = ("flash_attention_2", "flash_attention_3", "flex_attention", "eager")

#: A row joins an attention group while its length is at least this fraction of the group's
#: longest: at most 1 / 0.8² ≈ 1.56× a group's own attention FLOPs are spent on its padding.
GROUP_FILL = 0.8



def _hf_model(model):
    """The Hugging Face model a forward helper runs: a value-head wrapper's policy, a LoRA model's base."""
    from tether.models.lora import unwrap

    if hasattr(model, "value_head") and hasattr(model, "policy"):
        model = model.policy
    return unwrap(model)


def set_padding_free(model, enabled: bool) -> None:
    """Whether ``model``'s passes pack their rows (``model.padding_free``); on when never set."""
    state_of(_hf_model(model)).padding_free = bool(enabled)


def padding_free(model) -> bool:
    """The setting of :func:`set_padding_free` for ``model`` (True when never set)."""
    return state_of(_hf_model(model)).padding_free


@dataclass(frozen=True)
class AttentionGroup:
    """Rows of similar length attended together, right-padded to the longest (``width``).

    ``gather``: (rows * width,) packed positions read into the group's (rows, width) layout (a
    padding slot repeats its row's last token: a key that only the padding queries after it
    see); ``real``: (rows * width,) which slots are real tokens.
    """

    gather: Tensor
    real: Tensor
    rows: int
    width: int


@dataclass(frozen=True)
class PackedRows:
    """Where the real tokens of a (B, T) batch sit once packed into one (1, N) sequence.

    ``index``: (N,) flat positions ``b * T + t`` of the real tokens, row-major; ``position_ids``:
    (1, N) each token's position within its row, counting real tokens only; ``slot``: (B * T,)
    each flat position's packed position, -1 on padding; ``groups``: the attention layout of
    :func:`attention_groups`; ``restore``: (N,) the permutation from the groups' real slots
    (concatenated in group order) back to packed order.
    """

    index: Tensor
    position_ids: Tensor
    slot: Tensor
    lengths: list[int]
    batch: int
    length: int
    groups: tuple[AttentionGroup, ...]
    restore: Tensor

    @property
    def tokens(self) -> int:
        return int(self.index.numel())

    def gather(self, x: Tensor) -> Tensor:
        """(B, T, ...) -> (1, N, ...): the real tokens' entries in packed order."""
        return x.reshape(self.batch * self.length, *x.shape[2:])[self.index].unsqueeze(0)

    def unpack(self, packed: Tensor) -> Tensor:
        """(N, ...) packed values -> (B, T, ...), zeros on padding (differentiable)."""
        out = packed.new_zeros(self.batch * self.length, *packed.shape[1:])
        return out.index_put((self.index,), packed).reshape(self.batch, self.length, *packed.shape[1:])

    def kept(self, keep: slice | Tensor) -> tuple[Tensor, Tensor]:
        """The packed positions of ``keep`` (a slice of positions, or (B, K) positions per row).

        Returns ``packed`` (K',): the packed positions of the kept positions that are real, in
        row-major order, and ``where`` (B * K,): the flat (B, K) slots they fill (the others are
        padding).
        """
        if isinstance(keep, slice):
            columns = torch.arange(self.length, device=self.index.device)[keep]
            keep = columns.expand(self.batch, columns.numel())
        rows = torch.arange(self.batch, device=keep.device)[:, None]
        slots = self.slot[(rows * self.length + keep).reshape(-1)]  # (B * K,)
        where = (slots >= 0).nonzero().squeeze(1)
        return slots[where], where

    def scatter_kept(self, values: Tensor, where: Tensor, kept: int) -> Tensor:
        """(K', ...) values at :meth:`kept`'s positions -> (B, K, ...), zeros on padding."""
        out = values.new_zeros(self.batch * kept, *values.shape[1:])
        return out.index_put((where,), values).reshape(self.batch, kept, *values.shape[1:])


def attention_groups(lengths: list[int], starts: list[int], fill: float = GROUP_FILL,
                     device=None) -> tuple[tuple[AttentionGroup, ...], Tensor]:
    """Rows grouped by length for :func:`packed_sdpa`, and the (N,) restoring permutation.

    Rows are taken longest first (ties: lower row first); a group starts at its longest row
    and takes the following rows while they are at least ``fill`` times its width. E.g. lengths
    [4, 10, 9, 5] give groups of rows [1, 2] (width 10) and [3, 0] (width 5).
    """
    order = sorted(range(len(lengths)), key=lambda r: (-lengths[r], r))
    groups, members, i = [], [], 0
    while i < len(order):
        width, group = lengths[order[i]], []
        while i < len(order) and lengths[order[i]] >= fill * width:
            group.append(order[i])
            i += 1
        members.append((group, width))
    read_order = []
    for group, width in members:
        offsets = torch.arange(width, device=device)
        starts_t = torch.tensor([starts[r] for r in group], device=device)[:, None]
        lens = torch.tensor([lengths[r] for r in group], device=device)[:, None]
        gather = (starts_t + torch.minimum(offsets, lens - 1)).reshape(-1)
        real = (offsets < lens).reshape(-1)
        groups.append(AttentionGroup(gather, real, len(group), width))
        read_order.append(gather[real])
    read = torch.cat(read_order) if read_order else torch.zeros(0, dtype=torch.long, device=device)
    return tuple(groups), torch.argsort(read)


def pack_rows(attention_mask: Tensor, fill: float = GROUP_FILL) -> PackedRows:
    """The packing of a (B, T) 0/1 attention mask (any padding side; holes are skipped too)."""
    mask = attention_mask.bool()
    batch, length = mask.shape
    flat = mask.reshape(-1)
    index = flat.nonzero().squeeze(1)
    positions = (mask.long().cumsum(dim=1) - 1).reshape(-1)[index]
    slot = torch.full((batch * length,), -1, dtype=torch.long, device=mask.device)
    slot[index] = torch.arange(index.numel(), device=mask.device)
    lengths = mask.sum(dim=1).tolist()
    starts = [0]
    for n in lengths[:-1]:
        starts.append(starts[-1] + n)
    groups, restore = attention_groups(lengths, starts, fill, mask.device)
    return PackedRows(index, positions[None], slot, lengths, batch, length, groups, restore)


def _repeat_heads(x: Tensor, times: int) -> Tensor:
    """(B, H_kv, N, d) -> (B, H_kv * times, N, d): grouped-query keys and values per query head."""
    if times == 1:
        return x
    b, h, n, d = x.shape
    return x[:, :, None].expand(b, h, times, n, d).reshape(b, h * times, n, d)


def _grouped_attention(query: Tensor, key: Tensor, value: Tensor, rows: PackedRows, dropout: float,
                       scaling: float | None) -> Tensor:
    """(1, H, N, d) packed q, k, v -> (1, N, H, d): each row attends causally to its own tokens."""
    heads, dim = query.shape[1], query.shape[3]
    parts = []
    for group in rows.groups:
        def layout(x):  # (1, H, N, d) -> (rows, H, width, d)
            return x[0].index_select(1, group.gather).view(heads, group.rows, group.width, dim).transpose(0, 1)

        out = torch.nn.functional.scaled_dot_product_attention(
            layout(query), layout(key), layout(value), dropout_p=dropout, is_causal=True, scale=scaling)
        parts.append(out.transpose(1, 2).reshape(group.rows * group.width, heads, dim)[group.real])
    return torch.cat(parts)[rows.restore].unsqueeze(0)


def packed_sdpa(module, query: Tensor, key: Tensor, value: Tensor, attention_mask, dropout: float = 0.0,
                scaling: float | None = None, tether_packing: PackedRows | None = None, **kwargs):
    """transformers' attention interface for a packed pass: q (1, H, N, d), k and v (1, H_kv, N, d)
    -> ((1, N, H, d), None), each row attending causally to its own tokens only.

    Called without ``tether_packing`` (a pass that did not pack) it is transformers' SDPA.
    """
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if tether_packing is None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      **kwargs)
    times = query.shape[1] // key.shape[1]
    key, value = _repeat_heads(key, times), _repeat_heads(value, times)
    return _grouped_attention(query, key, value, tether_packing, dropout, scaling), None


def attention_in_fp32(attention, module, query: Tensor, key: Tensor, value: Tensor, attention_mask, **kwargs):
    """``attention`` (a transformers attention function) computed in fp32 whatever the autocast
    dtype of q, k, v, its output cast back to that dtype; as it is without autocast."""
    device = query.device.type
    if not torch.is_autocast_enabled(device):
        return attention(module, query, key, value, attention_mask, **kwargs)
    dtype = torch.get_autocast_dtype(device)
    if attention_mask is not None and attention_mask.is_floating_point():
        attention_mask = attention_mask.float()
    with torch.autocast(device, enabled=False):
        out, weights = attention(module, query.float(), key.float(), value.float(), attention_mask, **kwargs)
    return out.to(dtype), weights


def packed_sdpa_fp32(module, query: Tensor, key: Tensor, value: Tensor, attention_mask, **kwargs):
    """:func:`packed_sdpa` computed in fp32 under autocast (the packed twin of tether's CPU fp32
    SDPA, :mod:`tether.engines.cpu.attention`)."""
    return attention_in_fp32(packed_sdpa, module, query, key, value, attention_mask, **kwargs)


def static_reason(model) -> str | None:
    """Why ``model`` (a Hugging Face model) cannot pack, from its config alone; None if it may."""
    config = model.config
    implementation = getattr(config, "_attn_implementation", None)
    if implementation not in SWITCHED and implementation not in NATIVE and implementation not in SWITCHED.values():
        return f"its attention implementation '{implementation}' has no packed-sequence support"
    layer_types = getattr(config, "layer_types", None) or ()
    if (getattr(config, "sliding_window", None) and getattr(config, "use_sliding_window", True)
            and (not layer_types or "sliding_attention" in layer_types)):
        return "it uses sliding-window attention, which packed rows would not keep"
    return None


def verdict(model) -> tuple[bool, str] | None:
    """(packs, reason) once decided for ``model``, else None."""
    return state_of(_hf_model(model)).packing


def decide(model, packs: bool, reason: str = "") -> bool:
    """Record whether ``model`` packs; the first refusal is a warning that says why."""
    state_of(_hf_model(model)).packing = (packs, reason)
    if not packs:
        log.warning("%s: padding-free batches are off for this model (%s); its batches are padded. "
                    "model.padding_free=false pads without this check.", type(model).__name__, reason)
    return packs


def _packed_mask(attention_mask=None, q_length: int = 0, kv_length: int = 0, **kwargs):
    """The mask function of the packed SDPA names: none for a call without a 2D mask and without a
    cache offset (a packed pass, or an unpadded one: causal SDPA), transformers' SDPA mask otherwise."""
    from transformers.masking_utils import sdpa_mask

    if attention_mask is None and q_length == kv_length:
        return None
    return sdpa_mask(attention_mask=attention_mask, q_length=q_length, kv_length=kv_length, **kwargs)


def register_attention() -> None:
    """Register :func:`packed_sdpa` (and its fp32 twin) with transformers, once."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    if PACKED_SDPA not in AttentionInterface._global_mapping:
        for name, function in ((PACKED_SDPA, packed_sdpa), (PACKED_SDPA_FP32, packed_sdpa_fp32)):
            AttentionInterface.register(name, function)
            AttentionMaskInterface.register(name, _packed_mask)


def use_packed_attention(model) -> str | None:
    """Switch ``model`` (a Hugging Face model) on SDPA to :func:`packed_sdpa`, which is SDPA for
    every call that is not packed: the switch is permanent (in memory; saved checkpoints keep
    their config), so a pass on another thread never sees a half-switched model. Returns the
    implementation it replaced, or None (other implementations pack natively)."""
    original = getattr(model.config, "_attn_implementation", None)
    packed = SWITCHED.get(original)
    if packed is None:
        return None
    register_attention()
    model.set_attn_implementation(packed)
    return original


def pass_kwargs(model, rows: PackedRows) -> dict:
    """The extra trunk arguments of a packed pass: the layout, for :func:`packed_sdpa` only."""
    packed = getattr(model.config, "_attn_implementation", None) in (PACKED_SDPA, PACKED_SDPA_FP32)
    return {"tether_packing": rows} if packed else {}
