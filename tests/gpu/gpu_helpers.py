"""What the GPU tests share: the device they run on, models and batches built at random init
(no hub), and the CLI's arguments for a run on that device.

``TETHER_GPU_SUITE_DEVICE`` (default ``cuda``) names the device. Setting it to ``cpu`` runs the
suite's logic on a CPU machine (the memory measurements, which need CUDA's allocator counters,
and flash attention then skip): a check of the tests themselves, not of any GPU path.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

DEVICE = os.environ.get("TETHER_GPU_SUITE_DEVICE", "cuda")
ON_CUDA = DEVICE.startswith("cuda")


def device_ready() -> bool:
    """The suite's device is here: CUDA available, or the CPU stand-in asked for."""
    return torch.cuda.is_available() if ON_CUDA else DEVICE == "cpu"


def device() -> torch.device:
    return torch.device(DEVICE)


def synchronize() -> None:
    if ON_CUDA:
        torch.cuda.synchronize()


def stage_args(out, *extra) -> list[str]:
    """The run block every CLI run of the suite shares: on the suite's device, quiet."""
    return [f"run.out={out}", f"run.device={DEVICE}", "run.progress=false", "run.log_every=1", *extra]


def build_model(kind: str, tokenizer, out: Path, hidden: int = 128, layers: int = 2, heads: int = 4,
                kv_heads: int = 2, positions: int = 256, seed: int = 0) -> Path:
    """A random-init ``kind`` (``qwen2`` or ``llama``) causal LM saved with ``tokenizer`` at ``out``."""
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    shape = dict(vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=2 * hidden,
                 num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
                 max_position_embeddings=positions, bos_token_id=tokenizer.bos_token_id,
                 eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, tie_word_embeddings=False)
    made = {"qwen2": (Qwen2Config, Qwen2ForCausalLM), "llama": (LlamaConfig, LlamaForCausalLM)}
    config_cls, model_cls = made[kind]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = model_cls(config_cls(**shape))
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def left_padded_batch(tokenizer, n: int = 8, prompt: int = 12, response: int = 16, seed: int = 0) -> dict:
    """A PPO-shaped batch: ``n`` rows of left-padded prompts (ragged) then ``response`` tokens,
    as ``sequences``, ``attention_mask`` and ``num_prompt_tokens`` (CPU tensors)."""
    g = torch.Generator().manual_seed(seed)
    low = max(tokenizer.all_special_ids) + 1
    vocab = len(tokenizer)
    seqs = torch.randint(low, vocab, (n, prompt + response), generator=g)
    mask = torch.ones_like(seqs)
    for row in range(n):
        pad = int(torch.randint(0, prompt // 2, (1,), generator=g))
        seqs[row, :pad] = tokenizer.pad_token_id
        mask[row, :pad] = 0
    return {"sequences": seqs, "attention_mask": mask, "num_prompt_tokens": prompt}


def load(path, tokenizer):
    from tether.models.loading import load_causal_lm

    return load_causal_lm(str(path), tokenizer)


def logprobs(model, batch, autocast: str = "none") -> torch.Tensor:
    from tether.models.forward import response_logprobs

    logp, _ = response_logprobs(model, batch["sequences"], batch["attention_mask"], batch["num_prompt_tokens"],
                                autocast=autocast)
    return logp


def response_mask(batch) -> torch.Tensor:
    return batch["attention_mask"][:, batch["num_prompt_tokens"]:].bool()


def engine_for(model, precision: str = "fp32"):
    from tether.engines.optim import OptimizerSpec
    from tether.engines.training import TrainingEngine

    return TrainingEngine(model, OptimizerSpec(lr=1e-3, fused=ON_CUDA), device(), precision)


def rl_loss(autocast: str):
    """A policy-gradient-shaped loss over the response log-probs (what the actor's update runs)."""
    def loss(model, batch):
        logp = logprobs(model, batch, autocast)
        value = -(logp * response_mask(batch)).sum() / response_mask(batch).sum()
        return value, {"loss": float(value.detach())}
    return loss
