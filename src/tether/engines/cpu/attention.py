"""fp32 attention under CPU bf16 autocast: bf16 SDPA's backward runs 2-3x slower than fp32 SDPA
on CPU at these sizes, and fp32 keeps the softmax exact (docs/performance.md, "bf16 autocast"). On
CUDA the model's own attention (SDPA / flash) is kept."""

from __future__ import annotations

from tether.models.packing import FP32_SDPA as FP32_ATTENTION


def _sdpa_fp32(module, query, key, value, attention_mask, **kwargs):
    """transformers' SDPA attention computed in fp32 whatever the autocast dtype of q, k, v.

    On CPU, bf16 SDPA's backward runs 2-3x slower than fp32 SDPA at these sizes, and fp32 keeps
    the softmax exact; the projections around it stay in bf16.
    """
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    from tether.models.packing import attention_in_fp32

    return attention_in_fp32(sdpa_attention_forward, module, query, key, value, attention_mask, **kwargs)


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
