"""LoRA and gradient checkpointing on the device, through tether's own set-up
(:func:`tether.models.lora.trainable`) and training engine."""

from __future__ import annotations

import pytest
import torch
from gpu_helpers import (ON_CUDA, build_model, device, engine_for, left_padded_batch, load, logprobs, response_mask,
                         rl_loss, synchronize)

pytestmark = pytest.mark.gpu


def test_lora_trains_the_adapters_only(gpu_task):
    """LoRA r=8 on every linear layer: two steps on the device move the adapters, and every base
    weight stays bitwise as loaded."""
    from tether.config.common import LoRAConfig
    from tether.models.lora import trainable

    tok = gpu_task["tokenizer"]
    model = trainable(load(gpu_task["llama"], tok), LoRAConfig(r=8, alpha=16.0))
    engine = engine_for(model)
    named = dict(engine.model.named_parameters())
    trained = {n for n, p in named.items() if p.requires_grad}
    assert trained and all("lora_" in n for n in trained)
    before = {n: p.detach().clone() for n, p in named.items()}
    batch = left_padded_batch(tok)
    for _ in range(2):
        out = engine.train_step([batch], rl_loss("none"))
        assert out["grad_norm"] is not None
    assert all(torch.equal(before[n], p) for n, p in named.items() if n not in trained)
    assert any(not torch.equal(before[n], named[n]) for n in trained if "lora_B" in n)
    assert {p.device.type for p in named.values()} == {device().type}


def grads_and_peak(model, batch) -> tuple[torch.Tensor, dict, int]:
    """One forward and backward of ``model`` (training mode) on ``batch``: the loss, the
    gradients by name, and the device memory the pass added at its peak (bytes; 0 off CUDA)."""
    model.train()
    synchronize()
    base = torch.cuda.memory_allocated() if ON_CUDA else 0
    if ON_CUDA:
        torch.cuda.reset_peak_memory_stats()
    logp = logprobs(model, batch)
    loss = -(logp * response_mask(batch)).sum() / response_mask(batch).sum()
    loss.backward()
    synchronize()
    peak = torch.cuda.max_memory_allocated() - base if ON_CUDA else 0
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    return loss.detach(), grads, peak


def test_gradient_checkpointing_same_gradients_less_memory(gpu_task, tmp_path):
    """Checkpointing every decoder layer gives the same loss and gradients (up to the attention
    backward's summation order) and, at a shape where activations dominate (8 layers, 8 x 256
    tokens), less than 60% of the activation memory of the plain pass."""
    from tether.models.loading import enable_gradient_checkpointing

    tok = gpu_task["tokenizer"]
    path = build_model("llama", tok, tmp_path / "deep", hidden=256, layers=8, heads=4, kv_heads=2, positions=512)
    batch = {k: v.to(device()) if torch.is_tensor(v) else v
             for k, v in left_padded_batch(tok, n=8, prompt=64, response=192).items()}
    plain = load(path, tok).to(device())
    loss_plain, grads_plain, peak_plain = grads_and_peak(plain, batch)
    del plain
    checkpointed = load(path, tok).to(device())
    enable_gradient_checkpointing(checkpointed)
    loss_ckpt, grads_ckpt, peak_ckpt = grads_and_peak(checkpointed, batch)
    assert torch.allclose(loss_ckpt, loss_plain, rtol=1e-5, atol=1e-6)
    assert grads_ckpt.keys() == grads_plain.keys()
    for name, grad in grads_plain.items():
        assert torch.allclose(grads_ckpt[name], grad, rtol=1e-3, atol=1e-6), name
    if ON_CUDA:
        assert peak_ckpt < 0.6 * peak_plain, f"checkpointed pass {peak_ckpt / 2**20:.1f} MiB, plain " \
                                             f"{peak_plain / 2**20:.1f} MiB"
