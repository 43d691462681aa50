"""Records carry data only; selecting rows and moving devices follow from their fields."""

from __future__ import annotations

import torch

from tether.rollout.base import concat_rollouts
from tether.types import Experience, Rollout, select_rows, to_device, trim_padding


def rollout(b=3, p=2, a=3) -> Rollout:
    ids = torch.arange(b * p).view(b, p)
    resp = torch.arange(b * a).view(b, a) + 100
    return Rollout(ids, torch.ones(b, p, dtype=torch.long), resp, torch.ones(b, a, dtype=torch.long),
                   torch.tensor([True, False, True][:b]), [f"p{i}" for i in range(b)], [f"r{i}" for i in range(b)],
                   sampled_logprobs=torch.randn(b, a))


def test_select_rows_follows_every_field():
    ro = rollout()
    exp = Experience(ro, torch.randn(3, 3), torch.randn(3, 3), None, torch.tensor([1.0, 2.0, 3.0]),
                     torch.randn(3, 3), torch.randn(3, 3), torch.randn(3, 3))
    sub = exp.select(torch.tensor([2, 0]))
    assert sub.rollout.prompts == ["p2", "p0"] and sub.rollout.responses == ["r2", "r0"]
    assert torch.equal(sub.rollout.response_ids, ro.response_ids[[2, 0]])
    assert torch.equal(sub.rollout.sampled_logprobs, ro.sampled_logprobs[[2, 0]])
    assert sub.rollout.sampled_entropy is None and sub.values is None
    assert torch.equal(sub.scores, torch.tensor([3.0, 1.0])) and len(sub) == 2
    assert not any(isinstance(v, torch.nn.Module) for v in vars(ro).values())  # data only


def test_to_device_walks_records_and_containers():
    ro = to_device(rollout(), "meta")
    assert ro.prompt_ids.device.type == "meta" and ro.prompts == ["p0", "p1", "p2"]
    nested = to_device({"a": [torch.ones(1), "x"], "b": 3}, "meta")
    assert nested["a"][0].device.type == "meta" and nested["a"][1] == "x" and nested["b"] == 3


def test_concat_pads_to_the_widest_and_trim_gives_the_rows_back():
    a, b = rollout(b=2, p=2, a=3), rollout(b=1, p=4, a=1)
    both = concat_rollouts([a, b], pad_id=0)
    assert both.prompt_ids.shape == (3, 4) and both.response_ids.shape == (3, 3)
    assert both.prompt_mask[:2, :2].sum() == 0 and both.response_mask[2, 1:].sum() == 0  # left / right padding
    first = trim_padding(select_rows(both, torch.tensor([0, 1])))
    for name in ("prompt_ids", "prompt_mask", "response_ids", "response_mask", "sampled_logprobs"):
        assert torch.equal(getattr(first, name), getattr(a, name)), name
    last = trim_padding(select_rows(both, torch.tensor([2])))
    assert torch.equal(last.response_ids, b.response_ids) and torch.equal(last.prompt_ids, b.prompt_ids)
