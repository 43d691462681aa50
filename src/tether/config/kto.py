"""KTO's config: the preference stages' shared tree (:class:`~tether.config.stages.PairStageConfig`)
with DPO's reference and the ``kto`` block. Every field documents itself."""

from __future__ import annotations

from dataclasses import dataclass

from tether.config.base import option, section
from tether.config.common import DataConfig
from tether.config.stages import PairStageConfig
from tether.common.errors import ConfigError


@dataclass(frozen=True)
class KTOLossConfig:
    """The KTO loss (docs/algorithms.md): lambda_D (1 - sigmoid(beta (r - z0))) for a desirable row,
    lambda_U (1 - sigmoid(beta (z0 - r))) for an undesirable one, r = log pi/pi_ref, z0 the reference point."""

    beta: float = option(0.1, "beta: the scale of the log-ratio r = log pi(y|x) - log pi_ref(y|x) inside the "
                              "sigmoid, the strength of the leash to the reference (Ethayarajh et al. 2024).", gt=0)
    desirable_weight: float = option(
        1.0, "lambda_D: the weight of a desirable row's loss. The paper advises lambda_D n_D / (lambda_U n_U) in "
             "[1, 4/3] (n_D, n_U: desirable and undesirable training rows); the run logs that ratio at its start.",
        gt=0)
    undesirable_weight: float = option(1.0, "lambda_U: the weight of an undesirable row's loss (see "
                                            "kto.desirable_weight).", gt=0)


@dataclass(frozen=True)
class KTOConfig(PairStageConfig):
    """KTO: the policy trained on unpaired desirable / undesirable responses (or preference pairs, each split
    into one of each), against a frozen reference; no reward model and no RL loop."""

    data: DataConfig = section(
        DataConfig, "Rows {prompt, completion, label} (label: true desirable, false undesirable), or preference "
                    "pairs as the reward-model stage reads them (each pair: its chosen row desirable, its rejected "
                    "row undesirable); the format of each file is read from its first row. data.max_rows and "
                    "data.eval_size count file rows (a pair is one).")
    reference: str | None = option(
        None, "The reference policy; default: model.name_or_path (with LoRA: the policy's base, adapters off).",
        path=True)
    kto: KTOLossConfig = section(KTOLossConfig, "The loss.")

    def validate(self) -> None:
        if self.lora.enabled and self.lora.dropout:
            raise ConfigError(f"Config key 'lora.dropout' = {self.lora.dropout}: KTO needs 0 (the policy's log-probs "
                              "are compared with the reference's, computed once without dropout).")
        super().validate()
