"""On-policy distillation's per-token divergences and advantages against hand-worked values, and
against the exact divergences and gradients over a whole (small) vocabulary."""

import math

import pytest
import torch

from tether.algos.distill import distill_advantages, log_mixture_ratio, token_advantage, token_divergence


def t(*x):
    return torch.tensor([list(x)], dtype=torch.float64)


def test_reverse_kl_by_hand():
    # S(y) = 0.5, T(y) = 0.25: log S - log T = log 2; the advantage log T - log S = -log 2.
    s, te = t(math.log(0.5)), t(math.log(0.25))
    assert token_divergence(s, te, "reverse_kl").item() == pytest.approx(math.log(2))
    assert token_advantage(s, te, "reverse_kl").item() == pytest.approx(-math.log(2))


def test_jsd_by_hand():
    # beta 0.5, rho = T/S = 0.5, m = 0.5 * 0.5 + 0.5 = 0.75:
    # f = 0.5 * 0.5 * log(0.5 / 0.75) - 0.5 * log(0.75) = -0.1013663 + 0.1438410 = 0.0424747
    # advantage (1 - beta) log m = 0.5 * log 0.75 = -0.1438410
    s, te = t(math.log(0.5)), t(math.log(0.25))
    assert token_divergence(s, te, "jsd", 0.5).item() == pytest.approx(0.0424747, abs=1e-6)
    assert token_advantage(s, te, "jsd", 0.5).item() == pytest.approx(-0.1438410, abs=1e-6)


def test_log_mixture_ratio_is_stable_for_huge_ratios():
    # rho = e^800 overflows a float64; log(beta rho + 1 - beta) = 800 + log(beta) to rounding.
    out = log_mixture_ratio(torch.tensor([800.0], dtype=torch.float64), 0.1)
    assert out.item() == pytest.approx(800 + math.log(0.1))


def _jsd(teacher: torch.Tensor, student: torch.Tensor, beta: float) -> torch.Tensor:
    mix = beta * teacher + (1 - beta) * student
    return beta * (teacher * (teacher / mix).log()).sum() + (1 - beta) * (student * (student / mix).log()).sum()


@pytest.mark.parametrize("beta", [0.1, 0.5, 0.9])
def test_expectation_over_the_students_tokens_is_the_divergence(beta):
    teacher = torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float64)
    student = torch.tensor([0.4, 0.3, 0.2, 0.1], dtype=torch.float64)
    s, te = student.log()[None], teacher.log()[None]
    jsd = (student * token_divergence(s, te, "jsd", beta)[0]).sum()
    assert jsd.item() == pytest.approx(_jsd(teacher, student, beta).item(), rel=1e-12)
    reverse = (student * token_divergence(s, te, "reverse_kl")[0]).sum()
    assert reverse.item() == pytest.approx((student * (student / teacher).log()).sum().item(), rel=1e-12)


@pytest.mark.parametrize("divergence,beta", [("reverse_kl", 0.5), ("jsd", 0.2), ("jsd", 0.7)])
def test_policy_gradient_of_the_advantage_is_the_divergences_gradient(divergence, beta):
    # The expected score-function gradient -E_S[A grad log S] equals the gradient of the divergence
    # over the whole vocabulary, taken directly.
    teacher = torch.tensor([0.05, 0.25, 0.3, 0.4], dtype=torch.float64)
    logits = torch.tensor([0.3, -0.2, 1.1, 0.0], dtype=torch.float64, requires_grad=True)
    student = torch.softmax(logits, 0)
    exact = _jsd(teacher, student, beta) if divergence == "jsd" else (student * (student / teacher).log()).sum()
    (direct,) = torch.autograd.grad(exact, logits)
    logits2 = logits.detach().clone().requires_grad_(True)
    logp = torch.log_softmax(logits2, 0)
    advantage = token_advantage(logp.detach()[None], teacher.log()[None], divergence, beta)[0]
    surrogate = -(logp.detach().exp() * advantage * logp).sum()
    (estimated,) = torch.autograd.grad(surrogate, logits2)
    torch.testing.assert_close(estimated, direct, rtol=1e-10, atol=1e-12)


def test_discount_sums_the_later_tokens_across_a_hole():
    # per-token advantages (reverse KL) a = log T - log S = [-1, -2, ·, -4] with a hole at index 2
    student = t(0.0, 0.0, 0.0, 0.0)
    teacher = t(-1.0, -2.0, -3.0, -4.0)
    mask = torch.tensor([[1, 1, 0, 1]])
    own = distill_advantages(student, teacher, mask)
    torch.testing.assert_close(own, t(-1.0, -2.0, 0.0, -4.0))
    # discount 0.5: [-1 + 0.5 (-2) + 0.25 (-4), -2 + 0.5 (-4), 0, -4] = [-3, -4, 0, -4]
    torch.testing.assert_close(distill_advantages(student, teacher, mask, discount=0.5), t(-3.0, -4.0, 0.0, -4.0))
    torch.testing.assert_close(distill_advantages(student, teacher, mask, discount=1.0), t(-7.0, -6.0, 0.0, -4.0))


def test_padding_garbage_is_never_read():
    student = torch.tensor([[-0.5, float("nan")]], dtype=torch.float64)
    teacher = torch.tensor([[-1.0, float("inf")]], dtype=torch.float64)
    out = distill_advantages(student, teacher, torch.tensor([[1, 0]]), "jsd", 0.5, discount=1.0)
    assert torch.isfinite(out).all() and out[0, 1] == 0


def test_bad_arguments():
    with pytest.raises(ValueError, match="strictly between 0 and 1"):
        token_advantage(t(0.0), t(0.0), "jsd", 1.0)
    with pytest.raises(ValueError, match="expected one of reverse_kl, jsd"):
        token_divergence(t(0.0), t(0.0), "forward_kl")
