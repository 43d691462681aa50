import math

import pytest
import torch

from tether.algos.logprobs import token_logprobs


def test_hand_worked_with_temperature():
    # logits [0, ln 3]: p(1) = 3/4 -> ln 0.75 = -0.287682
    # T = 2: [0, ln3 / 2] -> p(1) = sqrt3 / (1 + sqrt3) = 0.633975 -> -0.455746
    logits = torch.tensor([[[0.0, math.log(3)]]])
    labels = torch.tensor([[1]])
    assert token_logprobs(logits, labels).item() == pytest.approx(math.log(0.75), abs=1e-6)
    assert token_logprobs(logits, labels, 2.0).item() == pytest.approx(-0.455746, abs=1e-6)


@pytest.mark.parametrize("temperature", [1.0, 0.7, 1.5])
def test_matches_categorical(temperature):
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 5, 11, generator=g) * 3
    labels = torch.randint(0, 11, (3, 5), generator=g)
    expected = torch.distributions.Categorical(logits=logits / temperature).log_prob(labels)
    torch.testing.assert_close(token_logprobs(logits, labels, temperature), expected)
    manual = torch.log_softmax(logits / temperature, -1).gather(-1, labels[..., None]).squeeze(-1)
    torch.testing.assert_close(token_logprobs(logits, labels, temperature), manual)


def test_gradient_and_no_input_mutation():
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(1, 2, 4, generator=g, requires_grad=True)
    before = logits.detach().clone()
    labels = torch.tensor([[2, 0]])
    token_logprobs(logits, labels, 0.5).sum().backward()
    # d/dz log softmax(z/T)[y] = (onehot(y) - softmax(z/T)) / T
    expected = (torch.nn.functional.one_hot(labels, 4) - torch.softmax(before / 0.5, -1)) / 0.5
    torch.testing.assert_close(logits.grad, expected)
    torch.testing.assert_close(logits.detach(), before)


def test_half_precision_upcast_with_grad():
    g = torch.Generator().manual_seed(2)
    base = torch.randn(2, 3, 8, generator=g)
    logits = base.to(torch.bfloat16).requires_grad_(True)
    labels = torch.randint(0, 8, (2, 3), generator=g)
    out = token_logprobs(logits, labels, 0.8)
    assert out.dtype == torch.float32
    expected = torch.log_softmax(logits.detach().float() / 0.8, -1).gather(-1, labels[..., None]).squeeze(-1)
    torch.testing.assert_close(out, expected)
    out.sum().backward()
    assert logits.grad is not None and torch.isfinite(logits.grad.float()).all()


def test_ignore_index_and_bad_temperature():
    logits = torch.zeros(1, 2, 3)
    out = token_logprobs(logits, torch.tensor([[-100, 1]]))
    torch.testing.assert_close(out, torch.tensor([[0.0, -math.log(3)]]))
    with pytest.raises(ValueError):
        token_logprobs(logits, torch.tensor([[0, 1]]), 0.0)


def test_sampled_entropy_estimate_is_minus_the_logprob():
    from tether.algos import sampled_entropy_estimate

    logp = torch.tensor([[math.log(0.25), math.log(0.5)]])
    assert torch.allclose(sampled_entropy_estimate(logp), torch.tensor([[math.log(4.0), math.log(2.0)]]))


def test_sampled_entropy_estimate_is_unbiased_over_draws():
    """Tokens drawn from p = (0.5, 0.25, 0.25): the mean of -log p(a) tends to H(p) = 1.5 ln 2."""
    from tether.algos import sampled_entropy_estimate

    p = torch.tensor([0.5, 0.25, 0.25])
    draws = torch.multinomial(p, 200_000, replacement=True, generator=torch.Generator().manual_seed(0))
    estimate = float(sampled_entropy_estimate(p.log()[draws]).mean())
    assert abs(estimate - 1.5 * math.log(2)) < 5e-3
