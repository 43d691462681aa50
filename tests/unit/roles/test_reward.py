"""Reward sources: ensemble combination, python callables, and their errors."""

from __future__ import annotations

import pytest
import torch

from tether.common.errors import ConfigError, ModelError
from tether.roles import CallableReward, EnsembleReward, ModelReward, combine_scores
from tether.types import Rollout


def rollout(prompts, responses) -> Rollout:
    b = len(prompts)
    return Rollout(
        prompt_ids=torch.ones(b, 2, dtype=torch.long),
        prompt_mask=torch.ones(b, 2, dtype=torch.long),
        response_ids=torch.ones(b, 3, dtype=torch.long),
        response_mask=torch.ones(b, 3, dtype=torch.long),
        ended=torch.ones(b, dtype=torch.bool),
        prompts=list(prompts),
        responses=list(responses),
    )


SCORES = torch.tensor([[1.0, 2.0, -1.0], [3.0, 6.0, -1.0]])  # (K=2 members, B=3 episodes)


def test_combine_mean():
    torch.testing.assert_close(combine_scores(SCORES, "mean"), torch.tensor([2.0, 4.0, -1.0]))


def test_combine_min():
    torch.testing.assert_close(combine_scores(SCORES, "min"), torch.tensor([1.0, 2.0, -1.0]))


def test_combine_mean_minus_std_uses_population_std():
    # Population std of {1, 3} is 1, of {2, 6} is 2, of {-1, -1} is 0.
    torch.testing.assert_close(combine_scores(SCORES, "mean_minus_std"), torch.tensor([1.0, 2.0, -1.0]))
    torch.testing.assert_close(combine_scores(SCORES, "mean_minus_std", 0.5), torch.tensor([1.5, 3.0, -1.0]))
    torch.testing.assert_close(combine_scores(SCORES, "mean_minus_std", 0.0), torch.tensor([2.0, 4.0, -1.0]))


def test_combine_three_members():
    scores = torch.tensor([[0.0], [3.0], [6.0]])
    assert combine_scores(scores, "mean").item() == pytest.approx(3.0)
    assert combine_scores(scores, "min").item() == pytest.approx(0.0)
    std = (6.0 ** 0.5)  # population std of {0, 3, 6}
    assert combine_scores(scores, "mean_minus_std").item() == pytest.approx(3.0 - std, rel=1e-6)


def test_combine_single_member_is_identity():
    one = torch.tensor([[0.5, -2.0]])
    for how in ("mean", "min", "mean_minus_std"):
        torch.testing.assert_close(combine_scores(one, how), one[0])


def test_combine_unknown_is_config_error():
    with pytest.raises(ConfigError, match="median"):
        combine_scores(SCORES, "median")


class Fixed:
    def __init__(self, values):
        self.values = torch.tensor(values)

    def score(self, ro):
        return self.values


def test_ensemble_reward_combines_members():
    ro = rollout(["a", "b"], ["x", "y"])
    ens = EnsembleReward([Fixed([1.0, 5.0]), Fixed([3.0, 1.0])], "min")
    torch.testing.assert_close(ens.score(ro), torch.tensor([1.0, 1.0]))
    ens = EnsembleReward([Fixed([1.0, 5.0]), Fixed([3.0, 1.0])], "mean")
    torch.testing.assert_close(ens.score(ro), torch.tensor([2.0, 3.0]))


def test_callable_reward_passes_prompts_and_responses():
    seen = {}

    def fn(prompts, responses):
        seen["args"] = (prompts, responses)
        return [float(len(r)) for r in responses]

    ro = rollout(["p1", "p2"], ["ab", "abcd"])
    scores = CallableReward(fn).score(ro)
    assert seen["args"] == (["p1", "p2"], ["ab", "abcd"])
    assert scores.dtype == torch.float32
    torch.testing.assert_close(scores, torch.tensor([2.0, 4.0]))


@pytest.mark.parametrize("out", [[1.0], [1.0, 2.0, 3.0], [], [[1.0], [2.0]]])
def test_callable_reward_wrong_shape_is_model_error(out):
    reward = CallableReward(lambda p, r: out, name="mymod:myfn")
    with pytest.raises(ModelError) as info:
        reward.score(rollout(["a", "b"], ["x", "y"]))
    assert "mymod:myfn" in str(info.value) and "2" in str(info.value)


def test_callable_reward_accepts_tuples_and_tensors():
    ro = rollout(["a", "b"], ["x", "y"])
    torch.testing.assert_close(CallableReward(lambda p, r: (1, 2)).score(ro), torch.tensor([1.0, 2.0]))
    torch.testing.assert_close(CallableReward(lambda p, r: torch.tensor([0.5, 1.5])).score(ro), torch.tensor([0.5, 1.5]))


def test_model_reward_subtracts_the_stored_offset(tiny_task):
    from tether.data import collate_left
    from tether.models import load_scalar_model, load_tokenizer
    from tether.models.forward import last_token_scores

    d = tiny_task["dir"]
    tok = load_tokenizer(str(d / "tokenizer"))
    torch.manual_seed(0)
    model = load_scalar_model(str(d / "base_model"), tok, head_init_std=1.0, new_head=True)
    model.config.score_offset = 0.75
    pid, pm = collate_left([[2, 5, 6], [2, 7]], tok.pad_token_id)
    ro = Rollout(
        prompt_ids=pid, prompt_mask=pm,
        response_ids=torch.tensor([[8, 3, 0], [9, 10, 3]]), response_mask=torch.tensor([[1, 1, 0], [1, 1, 1]]),
        ended=torch.tensor([True, True]), prompts=["a", "b"], responses=["x", "y"],
    )
    reward = ModelReward(model)
    assert not model.training and not any(p.requires_grad for p in model.parameters())
    with torch.no_grad():
        raw = last_token_scores(model, ro.sequences, ro.attention_mask)
    torch.testing.assert_close(reward.score(ro), raw - 0.75)
    # The score is read at the EOS, not at the padding after it.
    with torch.no_grad():
        alone = last_token_scores(model, torch.tensor([[2, 5, 6, 8, 3]]), torch.ones(1, 5, dtype=torch.long))
    torch.testing.assert_close(reward.score(ro)[0], alone[0] - 0.75, atol=1e-5, rtol=0)
