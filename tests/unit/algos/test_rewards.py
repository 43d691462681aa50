import pytest
import torch

from tether.algos.kl import kl_k1
from tether.algos.rewards import last_token_index, shape_rewards


def test_last_token_index_right_padded():
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1]])
    torch.testing.assert_close(last_token_index(mask), torch.tensor([2, 0, 3]))
    torch.testing.assert_close(last_token_index(mask.bool()), torch.tensor([2, 0, 3]))
    assert last_token_index(mask).dtype == torch.long


def test_last_token_index_any_mask():
    mask = torch.tensor([[0, 1, 0, 1, 0], [0, 0, 1, 1, 1]], dtype=torch.float32)
    torch.testing.assert_close(last_token_index(mask), torch.tensor([3, 4]))


def test_last_token_index_empty_row_raises():
    with pytest.raises(ValueError, match=r"\[1\]"):
        last_token_index(torch.tensor([[1, 0], [0, 0]]))


def test_reference_worked_penalty():
    # 004: log pi = -1.2, log pi_ref = -1.6 -> k1 = 0.4; beta = 0.05 -> -0.05 * 0.4 = -0.02 per token;
    # RM score 1.3 on the final token -> 1.3 - 0.02 = 1.28
    logp = torch.full((1, 3), -1.2)
    ref = torch.full((1, 3), -1.6)
    rewards, non_score = shape_rewards(torch.tensor([1.3]), kl_k1(logp, ref), 0.05, torch.ones(1, 3))
    torch.testing.assert_close(non_score, torch.tensor([[-0.02, -0.02, -0.02]]))
    torch.testing.assert_close(rewards, torch.tensor([[-0.02, -0.02, 1.28]]))


def test_layout_score_on_last_real_token_padding_zero():
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])
    kl = torch.full((2, 4), 0.4)
    kl[0, 3] = float("nan")  # garbage in padding must not leak
    kl[1, 2:] = 1e6
    rewards, non_score = shape_rewards(torch.tensor([1.3, -0.5]), kl, 0.05, mask)
    # row 0: [-0.02, -0.02, 1.3 - 0.02, 0]; row 1: [-0.02, -0.5 - 0.02, 0, 0]
    torch.testing.assert_close(rewards, torch.tensor([[-0.02, -0.02, 1.28, 0.0], [-0.02, -0.52, 0.0, 0.0]]))
    torch.testing.assert_close(non_score, torch.tensor([[-0.02, -0.02, -0.02, 0.0], [-0.02, -0.02, 0.0, 0.0]]))
    assert rewards[0, 3].item() == 0.0 and rewards[1, 2:].eq(0).all()
    # total reward per row = score - beta * sum(kl over real tokens)
    torch.testing.assert_close(rewards.sum(1), torch.tensor([1.3 - 0.06, -0.5 - 0.04]))
