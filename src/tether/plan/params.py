"""Parameter counts of a checkpoint from its config alone: the model is built on the meta device
(shapes, no memory, no weights read), so a 70B model is counted in a second."""

from __future__ import annotations

from dataclasses import dataclass

from tether.plan.memory import RoleSize


@dataclass(frozen=True)
class ModelShape:
    """A model's parameter count and its linear layers (name, in, out), head included."""

    architecture: str
    params: int
    linears: tuple[tuple[str, int, int], ...]
    head: str  # the output layer's module name (lm_head, score)
    head_params: int


def model_shape(config, scalar: bool, trust_remote_code: bool = False) -> ModelShape:
    """The causal LM (``scalar=False``) or one-output scalar model (``scalar=True``) of ``config``."""
    import copy

    import torch
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

    config = copy.deepcopy(config)
    if scalar:
        config.num_labels = 1
    auto = AutoModelForSequenceClassification if scalar else AutoModelForCausalLM
    with torch.device("meta"):
        model = auto.from_config(config, trust_remote_code=trust_remote_code)
    linears = tuple((name, m.in_features, m.out_features) for name, m in model.named_modules()
                    if isinstance(m, torch.nn.Linear))
    head = "score" if scalar else "lm_head"
    head_module = dict(model.named_modules()).get(head)
    head_params = sum(p.numel() for p in head_module.parameters()) if head_module is not None else 0
    return ModelShape(type(model).__name__, sum(p.numel() for p in model.parameters()), linears, head, head_params)


def lora_params(shape: ModelShape, lora) -> int:
    """Adapter parameters of a ``lora:`` block on ``shape``: r × (in + out) per adapted linear layer
    (``all-linear`` = every linear layer but the output head, peft's rule)."""
    targets = list(lora.target_modules)

    def adapted(name: str) -> bool:
        if name == shape.head or name.endswith("." + shape.head):
            return False
        if "all-linear" in targets:
            return True
        return any(name == t or name.endswith("." + t) for t in targets)

    return sum(lora.r * (i + o) for name, i, o in shape.linears if adapted(name))


def role_size(shape: ModelShape, trained: bool, lora=None, head_trained: bool = False) -> RoleSize:
    """A role's frozen and trained parameters: frozen whole, trained whole, or a frozen base with
    trained adapters (and, for a scalar model, its head trained in full)."""
    if not trained:
        return RoleSize(frozen=shape.params)
    if lora is None or not lora.enabled:
        return RoleSize(trained=shape.params)
    head = shape.head_params if head_trained else 0
    return RoleSize(frozen=shape.params - head, trained=lora_params(shape, lora) + head)
