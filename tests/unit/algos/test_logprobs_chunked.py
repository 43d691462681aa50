"""The LM head and its log-softmax in chunks of positions: the same log-probs, entropies and
gradients as all at once, with the fp32 [positions, vocab] buffers bounded by one chunk."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from tether.models import forward
from tether.models.forward import logprob_chunk, logprobs_from_hidden


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=97, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1)
    return LlamaForCausalLM(config)


def inputs(seed: int = 1, batch: int = 3, length: int = 7):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(batch, length, 16, generator=g), torch.randint(0, 97, (batch, length), generator=g)


def test_chunk_size_from_the_element_budget():
    assert logprob_chunk(151_936) == 2**25 // 151_936 == 220
    assert logprob_chunk(49_152) == 682
    assert logprob_chunk(10, elements=5) == 1  # at least one position


@pytest.mark.parametrize("chunk", [1, 4, 5, 20])
def test_chunked_equals_unchunked_without_gradients(model, chunk):
    hidden, tokens = inputs()
    with torch.no_grad():
        full, full_entropy = logprobs_from_hidden(model, hidden, tokens, 0.7, True, chunk=0)
        part, part_entropy = logprobs_from_hidden(model, hidden, tokens, 0.7, True, chunk=chunk)
    assert part.shape == full.shape == (3, 7)
    torch.testing.assert_close(part, full, rtol=0, atol=1e-6)
    torch.testing.assert_close(part_entropy, full_entropy, rtol=0, atol=1e-6)


def test_chunked_gradients_equal_unchunked(model):
    hidden, tokens = inputs(2)
    grads = []
    for chunk in (0, 4):
        model.zero_grad(set_to_none=True)
        h = hidden.clone().requires_grad_(True)
        logp, entropy = logprobs_from_hidden(model, h, tokens, 1.3, True, chunk=chunk)
        (logp.sum() + 0.1 * entropy.sum()).backward()
        grads.append((logp.detach(), h.grad, model.lm_head.weight.grad.clone()))
    for full, part in zip(grads[0], grads[1]):
        torch.testing.assert_close(part, full, rtol=0, atol=1e-6)


def test_saved_for_backward_is_bounded_by_one_chunk(model):
    """With gradients, unchunked keeps the whole fp32 [positions, V] logits for the backward;
    chunked keeps only each chunk's hidden states (recomputing its logits in the backward)."""
    hidden, tokens = inputs(3, batch=4, length=10)  # 40 positions x 97 tokens

    def largest_saved(chunk: int) -> int:
        sizes = [0]

        def pack(t):
            if t.dtype.is_floating_point and t.dim() and t.shape[-1] == 97:  # a [.., V] tensor, not the weight
                sizes.append(t.numel() if t.data_ptr() != model.lm_head.weight.data_ptr() else 0)
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            logp, _ = logprobs_from_hidden(model, hidden.clone().requires_grad_(True), tokens, chunk=chunk)
        logp.sum().backward()
        return max(sizes)

    assert largest_saved(0) == 40 * 97
    assert largest_saved(8) <= 8 * 97


def test_every_chunk_of_logits_is_bounded(model, monkeypatch):
    """The temporaries of the forward too: no log-softmax ever sees more than a chunk of positions."""
    seen = []
    original = forward.token_logprobs
    monkeypatch.setattr(forward, "token_logprobs", lambda logits, labels: seen.append(logits.shape[:-1].numel())
                        or original(logits, labels))
    hidden, tokens = inputs(4, batch=5, length=9)
    with torch.no_grad():
        logprobs_from_hidden(model, hidden, tokens, chunk=6)
    assert max(seen) == 6 and sum(seen) == 45


def test_sequence_logprobs_equal_the_models_logits(model):
    """SFT's next-token log-probs through chunks of the fp32 head equal those of the model's own
    full [B, T, V] logits (fp32), with a left-padded row too."""
    from tether.algos import token_logprobs
    from tether.models.forward import position_ids, sequence_logprobs

    g = torch.Generator().manual_seed(5)
    ids = torch.randint(0, 97, (3, 9), generator=g)
    attn = torch.ones_like(ids)
    attn[0, :3] = 0
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=attn, position_ids=position_ids(attn)).logits
        expected = token_logprobs(logits[:, :-1], ids[:, 1:])
        got = sequence_logprobs(model, ids, attn, chunk=5)
    # Where a real token predicts a real token (a padding position predicts nothing: a packed pass,
    # the default, gives 0 there and never runs the head on it).
    real = (attn[:, 1:] * attn[:, :-1]).bool()
    torch.testing.assert_close(got[real], expected[real], rtol=0, atol=1e-6)
    assert bool((got[~real] == 0).all())
