"""Models and batches on the device, bf16 autocast, and the attention implementations.

Each test builds its model from the random-init checkpoints of ``gpu_task`` through tether's own
loader and :class:`~tether.engines.training.TrainingEngine` (what every stage runs), with a
PPO-shaped left-padded batch built on the CPU: the engine must move it.
"""

from __future__ import annotations

import importlib.util

import pytest
import torch
from gpu_helpers import ON_CUDA, device, engine_for, left_padded_batch, load, logprobs, response_mask, rl_loss

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("kind", ["qwen2", "llama"])
def test_models_and_batches_on_the_device(kind, gpu_task):
    """The engine moves the model, its optimiser state and each batch to the device; the device's
    log-probs match the CPU's (fp32) and a step moves the weights."""
    tok = gpu_task["tokenizer"]
    batch = left_padded_batch(tok)
    reference = logprobs(load(gpu_task[kind], tok), batch)
    engine = engine_for(load(gpu_task[kind], tok))
    params = list(engine.model.parameters())
    assert {p.device.type for p in params} == {device().type}
    on_device = engine.infer(logprobs, batch)
    assert on_device.device.type == device().type
    mask = response_mask(batch)
    diff = (on_device.cpu() - reference)[mask].abs().max()
    assert diff < 1e-3, f"log-probs on {device()} differ from the CPU's by {diff:.2e}"

    before = [p.detach().clone() for p in params]
    out = engine.train_step([batch], rl_loss("none"))
    assert out["grad_norm"] is not None and torch.isfinite(torch.tensor(out["grad_norm"]))
    state = [s for s in engine.optimizer.state.values() if "exp_avg" in s]
    assert state and all(s["exp_avg"].device.type == device().type for s in state)
    assert any(not torch.equal(a, b) for a, b in zip(before, params))


def test_bf16_autocast(gpu_task):
    """run.precision=bf16: the trunk's matmuls run in bf16, the master weights, the LM head's
    log-probs and the optimiser stay fp32, and the log-probs stay within bf16 rounding of fp32's."""
    tok = gpu_task["tokenizer"]
    batch = left_padded_batch(tok)
    engine = engine_for(load(gpu_task["qwen2"], tok), "bf16")
    assert engine.autocast == "bf16"
    seen = []
    hook = engine.model.model.layers[0].self_attn.q_proj.register_forward_hook(
        lambda module, args, out: seen.append(out.dtype))
    fp32 = engine.infer(logprobs, batch)
    assert set(seen) == {torch.float32}
    seen.clear()
    bf16 = engine.infer(logprobs, batch, "bf16")
    hook.remove()
    assert set(seen) == {torch.bfloat16}
    assert bf16.dtype == torch.float32
    mask = response_mask(batch).to(bf16.device)
    diff = (bf16 - fp32)[mask].abs().max()
    assert 0 < diff < 0.1, f"bf16 log-probs differ from fp32 by {diff:.2e}"

    out = engine.train_step([batch], rl_loss(engine.autocast))
    assert out["grad_norm"] is not None and torch.isfinite(torch.tensor(out["grad_norm"]))
    assert {p.dtype for p in engine.model.parameters()} == {torch.float32}
    assert all(s["exp_avg"].dtype == torch.float32 for s in engine.optimizer.state.values() if "exp_avg" in s)


def test_sdpa_attention_and_the_trimmed_last_layer(gpu_task):
    """tether's loader leaves transformers' default, SDPA, on the device; it agrees with eager
    attention, and the last layer run at the read positions only agrees with the full layer."""
    from tether.models.forward import hidden_states

    tok = gpu_task["tokenizer"]
    batch = left_padded_batch(tok)
    model = load(gpu_task["qwen2"], tok).to(device())
    assert model.config._attn_implementation == "sdpa"
    on = {k: v.to(device()) if torch.is_tensor(v) else v for k, v in batch.items()}
    keep = slice(on["num_prompt_tokens"] - 1, on["sequences"].shape[1] - 1)
    with torch.no_grad():
        full = hidden_states(model, on["sequences"], on["attention_mask"])[:, keep]
        trimmed = hidden_states(model, on["sequences"], on["attention_mask"], keep=keep)
        sdpa = logprobs(model, on)
        model.set_attn_implementation("eager")
        eager = logprobs(model, on)
    mask = response_mask(on)
    assert (trimmed - full)[mask].abs().max() < 1e-4
    assert (sdpa - eager)[mask].abs().max() < 1e-4


def flash_attention_2() -> str | None:
    """Why flash_attention_2 cannot run here, or None when it can."""
    if not ON_CUDA:
        return "flash_attention_2 needs CUDA"
    if importlib.util.find_spec("flash_attn") is None:
        return "flash_attn is not installed"
    from transformers.utils import is_flash_attn_2_available

    if not is_flash_attn_2_available():
        return "transformers cannot use the installed flash_attn (version or GPU)"
    return None


def test_flash_attention_2_matches_sdpa(gpu_task):
    """A model loaded with attn_implementation=flash_attention_2 (bf16 weights) gives tether's
    log-probs of a left-padded batch within bf16 rounding of SDPA's; tether runs its last layer in
    full there (the trimmed layer takes SDPA/eager masks only)."""
    why = flash_attention_2()
    if why:
        pytest.skip(why)
    from transformers import AutoModelForCausalLM

    from tether.models import last_layer

    tok = gpu_task["tokenizer"]
    batch = {k: v.to(device()) if torch.is_tensor(v) else v for k, v in left_padded_batch(tok).items()}
    got = {}
    for impl in ("sdpa", "flash_attention_2"):
        model = AutoModelForCausalLM.from_pretrained(str(gpu_task["qwen2"]), dtype=torch.bfloat16,
                                                     attn_implementation=impl).to(device())
        assert last_layer.supported(model) == (impl == "sdpa")
        with torch.no_grad():
            got[impl] = logprobs(model, batch, "bf16")
    mask = response_mask(batch)
    diff = (got["flash_attention_2"] - got["sdpa"])[mask].abs().max()
    assert diff < 5e-2, f"flash_attention_2 log-probs differ from SDPA's by {diff:.2e}"


@pytest.mark.parametrize("impl", ["sdpa", "flash_attention_2"])
def test_packed_rows_match_padded_on_the_device(impl, gpu_task):
    """Padding-free batches on the device: the packed pass (SDPA through tether's grouped rows, or
    flash-attention's varlen kernel reading the rows from the position ids) gives the padded
    pass's log-probs and gradients; the model really packed."""
    why = flash_attention_2() if impl == "flash_attention_2" else None
    if why:
        pytest.skip(why)
    from transformers import AutoModelForCausalLM

    from tether.models import packing

    tok = gpu_task["tokenizer"]
    batch = {k: v.to(device()) if torch.is_tensor(v) else v for k, v in left_padded_batch(tok).items()}
    dtype = torch.bfloat16 if impl == "flash_attention_2" else torch.float32
    model = AutoModelForCausalLM.from_pretrained(str(gpu_task["qwen2"]), dtype=dtype,
                                                 attn_implementation=impl).to(device())
    mask = response_mask(batch)
    got = {}
    for padding_free in (False, True):
        packing.set_padding_free(model, padding_free)
        model.zero_grad(set_to_none=True)
        logp = logprobs(model, batch)
        logp[mask].sum().backward()
        got[padding_free] = (logp.detach()[mask], model.model.embed_tokens.weight.grad.clone())
    assert packing.verdict(model) == (True, "")
    tolerance = 5e-2 if dtype == torch.bfloat16 else 1e-4
    assert (got[True][0] - got[False][0]).abs().max() < tolerance
    scale = got[False][1].abs().max()
    assert (got[True][1] - got[False][1]).abs().max() < tolerance * max(float(scale), 1.0)
