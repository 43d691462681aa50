"""A third-party supervised stage, as a user would write it outside tether's source: one file with
its config, its loss, its stage body and its registry entry. SLiC's calibration loss (Zhao et al.
2023) on preference pairs: max(0, delta - log pi(y_c|x) + log pi(y_r|x)) per pair, no reference
model; the pairs are read, scored and evaluated by the pair stages' shared pieces."""

from dataclasses import dataclass

import torch

from tether.config.base import option, section
from tether.config.stages import PairStageConfig
from tether.loops.stage import StageBody, run_stage
from tether.objectives.shared import build_pair_roles, pair_stage_inputs
from tether.registry.stages import Passes, StageSpec, register_stage
from tether.runs import guarded_run


@dataclass(frozen=True)
class SlicLoss:
    """The hinge on the sequence log-probabilities' margin."""

    delta: float = option(1.0, "delta: the margin the chosen response's log-probability must clear.", gt=0)


@dataclass(frozen=True)
class SlicConfig(PairStageConfig):
    """SLiC: preference pairs, a hinge on the log-probability margin, no reference model."""

    slic: SlicLoss = section(SlicLoss, "The loss.")


def slic_objective(cfg):
    delta = cfg.slic.delta

    def objective(pc, pr, lc, lr, batch):
        loss = torch.relu(delta - pc.float() + pr.float()).mean()
        return loss, pc.float(), pr.float(), {}

    return objective


def build_slic_roles(cfg, checkpoint=None, needed=(), inputs=None, total_steps=None):
    return build_pair_roles(cfg, slic_objective(cfg), SLIC.name, checkpoint, inputs, total_steps)


SLIC = StageBody(name="slic", role="policy", inputs=pair_stage_inputs, build=build_slic_roles,
                 counted=("train_pairs", "eval_pairs"))


@guarded_run
def run_slic(cfg, resume=False):
    return run_stage(cfg, SLIC, resume)


register_stage(StageSpec(
    "slic", f"{__name__}:SlicConfig", f"{__name__}:run_slic",
    "SLiC: a hinge on the chosen-minus-rejected log-probability of preference pairs; no reference model.", "slic",
    title="SLiC", purpose="SLiC on preference pairs (a hinge on the log-probability margin, a plugin stage)",
    card_keys=("slic.delta",), inputs="tether.objectives.shared:plan_inputs", unit="preference pairs",
    passes=Passes(sequences=2, head="responses")))
