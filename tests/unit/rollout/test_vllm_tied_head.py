"""A tied output head vLLM's model has no ``lm_head`` for (Gemma-2's, whose head is its embedding)
is not loaded by name: that name failed the whole weight sync ("no module or parameter named
'lm_head'"). A model with an ``lm_head`` of its own (vLLM's Llama, tied or not) still gets it: only
loading it refreshes the head's packed CPU copy. Runs without vLLM (the worker's name filter and
its reload on a stand-in runner); tests/on_vllm/test_vllm_tied_head.py syncs a Gemma-2 for real."""

from __future__ import annotations

import torch
from torch import nn

from tether.rollout.vllm_worker import HEAD, WeightSync, loadable

STAGED = [("model.embed_tokens.weight", torch.zeros(4, 2)), ("model.norm.weight", torch.ones(2)),
          (HEAD, torch.zeros(4, 2))]


def test_a_model_without_an_lm_head_is_not_sent_the_heads_name():
    kept = loadable(STAGED, {"", "model", "model.embed_tokens", "model.norm"})
    assert [name for name, _ in kept] == ["model.embed_tokens.weight", "model.norm.weight"]


def test_a_model_with_an_lm_head_gets_every_weight():
    assert loadable(STAGED, {"", "model", "model.embed_tokens", "model.norm", "lm_head"}) == STAGED


class Gemma2Like(nn.Module):
    """Logits from the embedding itself: no lm_head module (as vLLM builds Gemma-2)."""

    def __init__(self):
        super().__init__()
        self.model = nn.Module()
        self.model.embed_tokens = nn.Embedding(4, 2)
        self.model.norm = nn.LayerNorm(2)


class QwenLike(Gemma2Like):
    """A head tied by assignment: ``lm_head`` is an alias of the embedding module."""

    def __init__(self):
        super().__init__()
        self.lm_head = self.model.embed_tokens


class Runner:
    def __init__(self, model):
        self.model, self.loaded = model, []

    def get_model(self):
        return self.model

    def reload_weights(self, weights_iterator):
        self.loaded = [name for name, _ in weights_iterator]


def reload(model) -> list[str]:
    worker = WeightSync()
    worker.model_runner = Runner(model)
    from safetensors.torch import save

    worker.tether_stage(save(dict(STAGED)), first=True)
    assert worker.tether_reload() == len(worker.model_runner.loaded)
    return worker.model_runner.loaded


def test_the_worker_reloads_what_its_model_can_take():
    assert HEAD not in reload(Gemma2Like())
    assert HEAD in reload(QwenLike())  # its own loader skips the tied name, as vLLM's Qwen2 does
