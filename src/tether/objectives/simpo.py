"""SimPO: the policy trained on preference pairs with no reference model and no reward model
(Meng et al. 2024; the loss in :mod:`tether.algos.preference`). The pairs are the reward-model
stage's files, read as DPO reads them.

A response's implicit reward is β·log π(y|x)/|y|, its length-normalised log-probability; the
loss asks the chosen one's to exceed the rejected one's by the margin γ. Each step scores a
batch's chosen and rejected responses in one forward of the policy
(:func:`tether.objectives.shared.build_pair_roles`); held-out evaluation reports the implicit
reward's pairwise accuracy and margin, as DPO reports its own.
"""

from __future__ import annotations

from tether.algos.preference import simpo_loss
from tether.config import SimPOConfig
from tether.loops.stage import StageBody, StageInputs, run_stage
from tether.objectives.shared import BatchCounts, Objective, build_pair_roles, pair_stage_inputs
from tether.roles.supervised import StageRoles
from tether.runs import guarded_run


def simpo_objective(cfg: SimPOConfig) -> Objective:
    beta, gamma = cfg.simpo.beta, cfg.simpo.gamma

    def objective(pc, pr, lc, lr, batch: BatchCounts):
        loss = simpo_loss(pc, pr, lc, lr, beta, gamma)
        return loss, beta * pc.float() / lc, beta * pr.float() / lr, {}

    return objective


def build_simpo_roles(cfg: SimPOConfig, checkpoint=None, needed=(), inputs: StageInputs | None = None,
                      total_steps: int | None = None) -> StageRoles:
    return build_pair_roles(cfg, simpo_objective(cfg), SIMPO.name, checkpoint, inputs, total_steps)


SIMPO = StageBody(name="simpo", role="policy", inputs=pair_stage_inputs, build=build_simpo_roles,
                  counted=("train_pairs", "eval_pairs"))


@guarded_run
def run_simpo(cfg: SimPOConfig, resume: bool = False) -> dict:
    """Train the policy with SimPO, save ``run.out`` as a Hugging Face checkpoint; return final metrics."""
    return run_stage(cfg, SIMPO, resume)
