"""fp32 attention under CPU bf16 autocast: bf16 SDPA's backward runs 2-3x slower than fp32 SDPA
on CPU at these sizes, and fp32 keeps the softmax exact (docs/performance.md, "bf16 autocast"). On
CUDA the model's own attention (SDPA / flash) is kept."""

from __future__ import annotations

import torch

FP32_ATTENTION = "tether_sdpa_fp32"


def _sdpa_fp32(module, query, key, value, attention_mask, **kwargs):
    """transformers' SDPA attention computed in fp32 whatever the autocast dtype of q, k, v.

    On CPU, bf16 SDPA's backward runs 2-3x slower than fp32 SDPA at these sizes, and fp32 keeps
    the softmax exact; the projections around it stay in bf16.
    """
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    device = query.device.type
    if not torch.is_autocast_enabled(device):
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
    dtype = torch.get_autocast_dtype(device)
    if attention_mask is not None and attention_mask.is_floating_point():
        attention_mask = attention_mask.float()
    with torch.autocast(device, enabled=False):
        out, weights = sdpa_attention_forward(module, query.float(), key.float(), value.float(), attention_mask, **kwargs)
    return out.to(dtype), weights


def use_fp32_attention(model) -> bool:
    """Switch a model on transformers' SDPA attention to :func:`_sdpa_fp32` (for bf16 autocast).

    Returns whether it switched (other attention implementations are left alone). The setting
    lives in memory only: saved checkpoints keep their config.
    """
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface

    if getattr(model.config, "_attn_implementation", None) != "sdpa":
        return False
    if FP32_ATTENTION not in AttentionInterface._global_mapping:
        AttentionInterface.register(FP32_ATTENTION, _sdpa_fp32)
        AttentionMaskInterface.register(FP32_ATTENTION, ALL_MASK_ATTENTION_FUNCTIONS["sdpa"])
    model.set_attn_implementation(FP32_ATTENTION)
    return True
