"""The one builder of trained models: device preparation, LoRA, the training engine with its
optimiser, in that order, for the RL roles and the supervised stages alike."""

from __future__ import annotations

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from tether.config.common import LoRAConfig
from tether.engines import EngineSettings, OptimizerSpec, TrainingEngine
from tether.models.lora import is_peft
from tether.roles.builder import build_trained, resume_adapter, resume_source
from tether.common.runtime import Precision

SETTINGS = EngineSettings(device=torch.device("cpu"), precision=Precision("fp32"))
SPEC = OptimizerSpec(lr=1e-3, total_steps=4)


def tiny_lm() -> GPT2LMHeadModel:
    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config(vocab_size=32, n_positions=16, n_embd=16, n_layer=1, n_head=2,
                                      resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0))


def trainable_names(engine: TrainingEngine) -> list[str]:
    return [n for n, p in engine.model.named_parameters() if p.requires_grad]


def test_without_lora_every_weight_trains_in_the_engine():
    model = tiny_lm()
    engine = build_trained(model, SPEC, SETTINGS)
    assert isinstance(engine, TrainingEngine) and engine.model is model
    assert len(trainable_names(engine)) == len(list(model.parameters()))
    assert engine.last_lr() == pytest.approx(1e-3)


def test_lora_trains_only_the_adapters_and_keeps_the_peft_model():
    engine = build_trained(tiny_lm(), SPEC, SETTINGS, lora=LoRAConfig(r=2))
    assert is_peft(engine.model)
    names = trainable_names(engine)
    assert names and all("lora_" in n for n in names)
    # The optimiser holds exactly the trainable parameters.
    held = {id(p) for group in engine.optimizer.param_groups for p in group["params"]}
    assert held == {id(p) for p in engine.model.parameters() if p.requires_grad}


def test_wrap_puts_a_module_around_the_trained_model():
    class WithHead(torch.nn.Module):
        def __init__(self, lm):
            super().__init__()
            self.policy, self.head = lm, torch.nn.Linear(16, 1)

    engine = build_trained(tiny_lm(), SPEC, SETTINGS, lora=LoRAConfig(r=2), wrap=WithHead)
    assert isinstance(engine.model, WithHead) and is_peft(engine.model.policy)
    assert {"head.weight", "head.bias"} <= set(trainable_names(engine))


def test_the_builder_gives_the_same_weights_as_the_steps_it_replaces():
    # load -> prepare -> LoRA -> engine by hand, as each stage did, against the builder: one step
    # of the same loss from the same seed leaves bitwise the same weights.
    from tether.engines import prepare_models
    from tether.models.lora import trainable

    def step(engine):
        ids = torch.arange(8).view(1, 8)
        engine.train_step([ids], lambda m, x: (m(input_ids=x, labels=x).loss, {}), lambda x: 1.0, "loss", 1)
        return {n: p.detach().clone() for n, p in engine.model.named_parameters()}

    torch.manual_seed(1)
    model = tiny_lm()
    prepare_models([model], SETTINGS)
    torch.manual_seed(2)
    by_hand = TrainingEngine(trainable(model, LoRAConfig(r=2)), SPEC, SETTINGS.device, SETTINGS.precision,
                             SETTINGS.on_nonfinite)
    torch.manual_seed(1)
    model = tiny_lm()
    torch.manual_seed(2)
    built = build_trained(model, SPEC, SETTINGS, lora=LoRAConfig(r=2))
    a, b = step(by_hand), step(built)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


class _Cfg:
    class model:
        name_or_path = "base"

    def __init__(self, r: int):
        self.lora = LoRAConfig(r=r)


def test_resume_reads_the_adapters_under_lora_and_the_whole_model_otherwise(tmp_path):
    assert resume_source(_Cfg(0), None) == ("base", "model.name_or_path")
    assert resume_source(_Cfg(0), tmp_path) == (str(tmp_path / "model"), None)
    assert resume_source(_Cfg(4), tmp_path) == ("base", "model.name_or_path")
    assert resume_adapter(_Cfg(4), tmp_path) == tmp_path / "model"
    assert resume_adapter(_Cfg(0), tmp_path) is None and resume_adapter(_Cfg(4), None) is None
