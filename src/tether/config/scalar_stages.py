"""The stages that train a scalar head on the SFT backbone: the Bradley-Terry reward model and the
process reward model, and the settings they share."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tether.common.errors import ConfigError
from tether.config.base import option, section
from tether.config.common import (CPUConfig, DataConfig, DistributedConfig, LoRAConfig, ModelConfig, OptimConfig,
                                  RunConfig, check_supervised)
from tether.config.placement import PlacementConfig

#: Keys that moved or were removed: old dotted key -> (new key or None, value map / why removed).
#: Earlier presets, overrides and saved run configs keep working (a notice names the new key).
#: Every supervised stage's config reads this table.
SUPERVISED_MOVED_KEYS = {"run.retain_memory": ("cpu.retain_memory", None)}


@dataclass(frozen=True)
class ScalarHeadStageConfig:
    """What the stages that train a scalar head on the SFT backbone share (the reward model, the PRM)."""

    run: RunConfig = section(RunConfig, "Run directory, seed, threads, logging.")
    model: ModelConfig = section(ModelConfig, "Initial weights, normally the SFT checkpoint.")
    data: DataConfig = section(DataConfig, "Training and held-out rows.")
    optim: OptimConfig = section(OptimConfig, "Optimiser and schedule.")
    epochs: float = option(1.0, "Passes over the training rows; one is the norm for real models.", gt=0)
    max_steps: int | None = option(None, "Stop after this many optimiser steps (overrides epochs).", ge=1)
    eval_every: int = option(200, "Evaluate on the held-out rows every this many steps.", ge=1)
    head_init_std: float = option(0.02, "Std of the fresh scalar head's weights.", gt=0)
    head_seed: int | None = option(None, "Seed of the fresh head's initialisation; null = drawn after run.seed. "
                                         "Reward models to average with `tether warm` share one head_seed (one "
                                         "initialisation) and differ in run.seed (their data order).")
    keep_dropout: bool = option(False, "Keep the model's dropout (off by default).")
    lora: LoRAConfig = section(LoRAConfig, "LoRA adapters on the model, its scalar head trained in full (r = 0: off).")
    gradient_checkpointing: bool = option(
        False, "Recompute each decoder layer's activations in the backward instead of keeping them: less "
               "memory, ~30% more compute. Same losses and gradients.",
    )
    cpu: CPUConfig = section(CPUConfig, "CPU-only speedups.")
    distributed: DistributedConfig = section(DistributedConfig, "Data parallel under torchrun.")
    placement: PlacementConfig = section(PlacementConfig, "Where the trained model runs: this process, or a Ray "
                                                          "cluster (role reward).")

    MOVED_KEYS = SUPERVISED_MOVED_KEYS

    def validate(self) -> None:
        check_supervised(self)
        self.placement.ray.check_roles(("reward",))  # the scalar-head model being trained


@dataclass(frozen=True)
class RewardModelConfig(ScalarHeadStageConfig):
    """Bradley-Terry reward model: a scalar head on the SFT backbone."""

    data: DataConfig = section(
        DataConfig, "Pairs: prompt/chosen/rejected, or HH-RLHF chosen/rejected conversations."
    )
    margin_field: str | None = option(
        None, "Row field holding a margin m: loss -log sigmoid(r_c - r_r - m) (Llama 2)."
    )
    on_identical: Literal["error", "skip"] = option(
        "skip", "Pairs whose chosen equals rejected: skip and count them, or stop."
    )
    normalize: bool = option(
        True, "Store an offset so held-out responses score 0 on average (fixes the gauge)."
    )
    teacher: str | None = option(
        None, "Reward-model distillation: a trained reward model (the policy's tokenizer) that scores both "
              "responses of every pair; each pair is oriented by it and the model learns its preference "
              "probability sigmoid(t_a - t_b) (soft Bradley-Terry). The rows may then be unlabeled "
              "(tether pairs' prompt/response_a/response_b). eval/accuracy is agreement with the teacher.",
        path=True)

    def validate(self) -> None:
        super().validate()
        if self.teacher and self.margin_field:
            raise ConfigError(f"Config key 'margin_field' = {self.margin_field!r} is set with teacher, whose score "
                              "margins are the labels, so it would have no effect; drop it.")
        if self.teacher and self.teacher == self.model.name_or_path:
            raise ConfigError(f"Config key 'teacher' = {self.teacher!r} is model.name_or_path: a reward model "
                              "distilled into a copy of itself; expected the larger reward model to learn from.")


@dataclass(frozen=True)
class PRMConfig(ScalarHeadStageConfig):
    """A process reward model: a scalar head on the SFT backbone scoring each step of a solution."""

    data: DataConfig = section(DataConfig, "Step-labelled solutions: {prompt, completions: [step, ...], labels: "
                                           "[bool, ...]} (PRM800K / Math-Shepherd's shape; 'steps' for "
                                           "'completions').")
    step_separator: str = option("\n", "The one token that ends a step (the solution's steps are joined by it, "
                                        "the last ends at EOS); the PRM scores each step there, in training and "
                                        "when it rewards a policy's responses.")

    def validate(self) -> None:
        super().validate()
        if not self.step_separator:
            raise ConfigError("Config key 'step_separator' is empty: expected the token that ends each step.")
