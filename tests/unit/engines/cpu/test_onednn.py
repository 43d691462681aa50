"""fp32 linears through oneDNN: same products as ``F.linear`` (up to summation order), reversible."""

import copy
import threading

import pytest
import torch
import torch.nn.functional as F

from tether.bench.profile import OpClock
from tether.engines.cpu import onednn
from tether.engines.cpu.onednn import (
    OneDNNLinear,
    bf16_packing_available,
    linear_flops,
    onednn_available,
    onednn_linear,
    packed_linears,
    use_aten_linears,
    use_onednn_linears,
)

pytestmark = pytest.mark.skipif(not onednn_available(), reason="this torch build has no oneDNN")


@pytest.fixture(autouse=True)
def every_product_in_onednn(monkeypatch):
    """The test shapes are far below the size threshold: send every product to oneDNN."""
    monkeypatch.setattr(onednn, "MIN_MACS", 0)

#: Tests of bf16 packed copies, which oneDNN makes only on CPUs with AVX-512 or AVX-NE-CONVERT.
BF16_PACKING = pytest.mark.skipif(not bf16_packing_available(), reason="this CPU's oneDNN cannot pack bf16 weights")


def _close(a, b, tol=1e-5):
    return torch.allclose(a, b, rtol=tol, atol=tol * b.abs().max().item())


@pytest.mark.parametrize("shape", [(7, 16), (3, 5, 16)])
@pytest.mark.parametrize("bias", [False, True])
def test_forward_and_gradients_match_f_linear(shape, bias):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(*shape, generator=gen)
    w = torch.randn(12, 16, generator=gen)
    b = torch.randn(12, generator=gen) if bias else None
    grad = torch.randn(*shape[:-1], 12, generator=gen)
    outs, grads = [], []
    for fn in (F.linear, onednn_linear):
        xs, ws = x.clone().requires_grad_(), w.clone().requires_grad_()
        bs = b.clone().requires_grad_() if bias else None
        y = fn(xs, ws, bs)
        y.backward(grad)
        outs.append(y)
        grads.append([xs.grad, ws.grad] + ([bs.grad] if bias else []))
    assert outs[1].shape == outs[0].shape
    assert _close(outs[1], outs[0])
    for mine, ref in zip(grads[1], grads[0]):
        assert _close(mine, ref)


def _products(x, w):
    totals, flops = {}, {}
    with OpClock(totals, threading.Lock(), flops):
        onednn_linear(x, w).sum().backward()
    return totals, flops


def test_forward_and_input_gradient_in_onednn_weight_gradient_in_aten():
    totals, flops = _products(torch.randn(5, 8, requires_grad=True), torch.randn(6, 8, requires_grad=True))
    assert flops["mkldnn::_linear_pointwise"] == 2 * 2 * 5 * 8 * 6
    assert flops["aten::mm"] == 2 * 5 * 8 * 6


def test_small_products_stay_in_aten(monkeypatch):
    monkeypatch.setattr(onednn, "MIN_MACS", 5 * 8 * 6 + 1)
    totals, flops = _products(torch.randn(5, 8, requires_grad=True), torch.randn(6, 8, requires_grad=True))
    assert "mkldnn::_linear_pointwise" not in totals
    assert sum(flops.values()) == 3 * 2 * 5 * 8 * 6
    monkeypatch.setattr(onednn, "MIN_MACS", 5 * 8 * 6)
    assert "mkldnn::_linear_pointwise" in _products(torch.randn(5, 8), torch.randn(6, 8, requires_grad=True))[0]


def test_only_the_needed_gradients():
    x = torch.randn(4, 8)  # no grad: a frozen input (the embedding output of a frozen model, say)
    w = torch.randn(3, 8, requires_grad=True)
    onednn_linear(x, w).sum().backward()
    assert torch.allclose(w.grad, x.sum(0).expand(3, 8), atol=1e-5)


def test_non_contiguous_input():
    x = torch.randn(16, 6).t()  # (6, 16), transposed view
    w = torch.randn(4, 16)
    assert _close(onednn_linear(x, w), F.linear(x, w))


def test_falls_back_to_aten_outside_plain_fp32():
    w = torch.randn(4, 8)
    x = torch.randn(3, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert onednn_linear(x, w).dtype == torch.bfloat16  # autocast's bf16 matmul, as before
    assert onednn_linear(x.double(), w.double()).dtype == torch.float64
    assert onednn_linear(torch.randn(0, 8), w).shape == (0, 4)


def _llama(vocab=64):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                      intermediate_size=64, max_position_embeddings=64, tie_word_embeddings=False)
    cfg._attn_implementation = "sdpa"
    return LlamaForCausalLM(cfg)


def test_swap_keeps_parameters_and_is_reversible():
    model = _llama()
    keys = list(model.state_dict())
    n_linear = sum(type(m) is torch.nn.Linear for m in model.modules())
    assert use_onednn_linears(model) == n_linear
    assert all(type(m) is not torch.nn.Linear for m in model.modules())
    assert list(model.state_dict()) == keys
    assert isinstance(model.lm_head, torch.nn.Linear) and type(model.lm_head) is OneDNNLinear
    assert use_aten_linears(model) == n_linear
    assert type(model.lm_head) is torch.nn.Linear


def test_swapped_model_matches_aten_forward_and_backward():
    ids = torch.randint(0, 64, (3, 11))
    results = []
    for swap in (False, True):
        model = _llama()
        if swap:
            use_onednn_linears(model)
        logits = model(input_ids=ids).logits
        logits.square().mean().backward()
        results.append((logits.detach(), {n: p.grad for n, p in model.named_parameters()}))
    (ref, ref_grads), (mine, grads) = results
    assert _close(mine, ref)
    for name, g in ref_grads.items():
        assert _close(grads[name], g, 1e-4), name


def test_deepcopy_of_a_swapped_model_uses_its_own_weights():
    model = _llama()
    use_onednn_linears(model)
    twin = copy.deepcopy(model)
    with torch.no_grad():
        for p in twin.parameters():
            p.mul_(0.5)
    ids = torch.randint(0, 64, (2, 5))
    assert not torch.allclose(twin(input_ids=ids).logits, model(input_ids=ids).logits)


def test_packed_weights_give_the_same_products_and_are_dropped_after():
    model = _llama()
    use_onednn_linears(model)
    ids = torch.randint(0, 64, (4, 9))
    with torch.no_grad():
        plain = model(input_ids=ids).logits
        with packed_linears(model, rows=4) as n:
            assert n == sum(type(m) is OneDNNLinear for m in model.modules())
            assert model.lm_head._packed is not None
            packed = model(input_ids=ids).logits
    assert _close(packed, plain)
    assert all(m._packed is None for m in model.modules() if type(m) is OneDNNLinear)


def test_only_layers_above_the_threshold_are_packed(monkeypatch):
    model = _llama()  # hidden 32, ffn 64, vocab 64: every layer's weight has 1024-2048 entries
    use_onednn_linears(model)
    monkeypatch.setattr(onednn, "MIN_MACS", 4 * 2048)
    with packed_linears(model, rows=4) as n:
        packed = {name for name, m in model.named_modules() if getattr(m, "_packed", None) is not None}
    # The MLP's and the LM head's 2048-entry weights reach 4 x 2048; attention's 32 x 32 do not.
    mlp = {f"model.layers.{i}.mlp.{p}" for i in range(2) for p in ("gate_proj", "up_proj", "down_proj")}
    assert packed == mlp | {"lm_head"} and n == len(packed)


@BF16_PACKING
def test_under_bf16_autocast_bf16_copies_are_packed_and_give_autocasts_products():
    model = _llama()
    use_onednn_linears(model)
    ids = torch.randint(0, 64, (4, 9))
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        plain = model(input_ids=ids).logits
        with packed_linears(model, rows=4) as n:
            assert n == sum(type(m) is OneDNNLinear for m in model.modules())
            assert model.lm_head._packed.dtype == torch.bfloat16
            packed = model(input_ids=ids).logits
    assert packed.dtype == plain.dtype == torch.bfloat16
    # The same bf16 products; only the kernels' summation order differs (a bf16 ulp is 2^-8).
    assert torch.allclose(packed.float(), plain.float(), rtol=2e-2, atol=2e-2)
    assert all(m._packed is None for m in model.modules() if type(m) is OneDNNLinear)


@BF16_PACKING
def test_bf16_packed_weights_serve_only_bf16_autocast():
    model = _llama()
    use_onednn_linears(model)
    x = torch.randn(4, 32)
    with torch.no_grad():
        with torch.autocast("cpu", dtype=torch.bfloat16), packed_linears(model, rows=4):
            layer = model.model.layers[0].mlp.up_proj
            with torch.autocast("cpu", enabled=False):
                fp32 = layer(x)  # autocast off inside the block: the fp32 weight, not the bf16 copy
        assert fp32.dtype == torch.float32
        assert _close(fp32, torch.nn.functional.linear(x, layer.weight))


@BF16_PACKING
def test_layers_named_fp32_keep_an_fp32_packed_copy_under_bf16_autocast():
    """The lean decode loop's LM head: packed in fp32 and multiplied with autocast off."""
    model = _llama()
    use_onednn_linears(model)
    h = torch.randn(4, 32)
    with torch.no_grad():
        want = torch.nn.functional.linear(h, model.lm_head.weight)
        with torch.autocast("cpu", dtype=torch.bfloat16), packed_linears(model, rows=4, fp32=(model.lm_head,)) as n:
            assert n == sum(type(m) is OneDNNLinear for m in model.modules())
            assert model.lm_head._packed.dtype == torch.float32
            assert model.model.layers[0].mlp.up_proj._packed.dtype == torch.bfloat16
            with torch.autocast("cpu", enabled=False):
                got = model.lm_head(h)
    assert got.dtype == torch.float32 and _close(got, want)
    assert model.lm_head._packed is None


def test_without_bf16_packing_the_layers_run_as_autocast_does(monkeypatch):
    """A CPU whose oneDNN cannot pack bf16 (no AVX-512, as on some AMD EPYC machines): the trunk
    keeps no copy and multiplies as autocast does; the fp32 copies are still made."""
    from tether.engines.cpu import onednn

    monkeypatch.setattr(onednn, "bf16_packing_available", lambda: False)
    model = _llama()
    use_onednn_linears(model)
    ids = torch.randint(0, 64, (4, 9))
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        plain = model.model(input_ids=ids).last_hidden_state
        with packed_linears(model, rows=4, fp32=(model.lm_head,)) as n:
            assert n == 1 and model.lm_head._packed.dtype == torch.float32
            assert model.model.layers[0].mlp.up_proj._packed is None
            trunk = model.model(input_ids=ids).last_hidden_state
    assert torch.equal(trunk, plain)  # the very products autocast runs


def test_nothing_is_packed_under_fp16_autocast():
    model = _llama()
    use_onednn_linears(model)
    with torch.autocast("cpu", dtype=torch.float16), packed_linears(model, rows=4) as n:
        assert n == 0 and model.lm_head._packed is None


def test_packed_weights_are_not_used_with_gradients():
    model = _llama()
    use_onednn_linears(model)
    ids = torch.randint(0, 64, (2, 5))
    with packed_linears(model, rows=2):
        model(input_ids=ids).logits.sum().backward()
    assert model.lm_head.weight.grad is not None and model.lm_head.weight.grad.abs().sum() > 0


def test_linear_flops_by_hand():
    assert linear_flops((2, 3, 8), (5, 8)) == 2 * 6 * 8 * 5
    assert linear_flops((8,), (5, 8)) == 2 * 1 * 8 * 5
    assert linear_flops((4, 8), (5,)) == 0


def _mlp():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 8, bias=False))
    use_onednn_linears(model)
    return model


def test_backward_computes_weight_gradients_itself():
    model, x = _mlp(), torch.randn(5, 16)
    model(x).square().sum().backward()
    assert model[0].weight.grad is not None and model[2].weight.grad is not None
