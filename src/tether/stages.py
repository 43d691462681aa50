"""The training stages by name: config class, run function, dry-run planner and help, in one table.

``tether NAME`` (the commands are registered from this table), ``tether.run(NAME, ...)`` and
``tether.dry_run(NAME, ...)`` read it; an RL stage exists for every registered algorithm
(:mod:`tether.algorithms.registry`), so a plugin algorithm gets its command, its API function and
its dry run without a line here. Entries name their code as ``"module:attr"``: importing this
module loads no torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from tether.algorithms.registry import ALGORITHMS, load_plugins
from tether.errors import ConfigError
from tether.targets import import_callable


@dataclass(frozen=True)
class StageSpec:
    """One stage. ``config``: its config class; ``run``: ``run(cfg, resume=False, **extra) -> dict``
    (an RL stage's also takes ``on_iteration``); ``plan``: ``plan(cfg, stage, resume) -> Plan``;
    ``summary``: the command's help; ``api``: its Python function's name (``tether.<api>``);
    ``algorithm``: the RL algorithm it runs (None: a supervised stage); ``title``: its name in prose;
    ``compared``: a preference stage ``tether compare`` runs on the demo's pairs beside the RL ones;
    ``rows_per_pair``: the training rows it makes of one preference pair (KTO: a desirable and an
    undesirable one)."""

    name: str
    config: str
    run: str
    plan: str
    summary: str
    api: str
    algorithm: str | None = None
    title: str | None = None
    compared: bool = False
    rows_per_pair: int = 1

    def config_class(self) -> type:
        return _attr(self.config)

    def run_function(self):
        return _attr(self.run)

    def planner(self):
        return _attr(self.plan)


def _attr(target: str):
    return import_callable(target, "the stage table")


SUPERVISED = {
    "sft": StageSpec("sft", "tether.config:SFTConfig", "tether.loops.sft:run_sft", "tether.plan.dry_run:plan_sft",
                     "Supervised fine-tuning on demonstrations (loss on response tokens only).", "sft"),
    "rm": StageSpec("rm", "tether.config:RewardModelConfig", "tether.loops.reward_model:run_reward_model",
                    "tether.plan.dry_run:plan_rm", "Train a Bradley-Terry reward model on preference pairs.",
                    "reward_model"),
    "dpo": StageSpec("dpo", "tether.config:DPOConfig", "tether.loops.dpo:run_dpo", "tether.plan.dry_run:plan_dpo",
                     "DPO (or IPO): the policy trained on preference pairs directly; no reward model, no RL loop.",
                     "dpo", title="DPO", compared=True),
    "simpo": StageSpec("simpo", "tether.config:SimPOConfig", "tether.loops.reference_free:run_simpo",
                       "tether.plan.dry_run:plan_simpo",
                       "SimPO: preference pairs, the length-normalised log-probability as the reward; no reference "
                       "model.", "simpo", title="SimPO", compared=True),
    "orpo": StageSpec("orpo", "tether.config:ORPOConfig", "tether.loops.reference_free:run_orpo",
                      "tether.plan.dry_run:plan_orpo",
                      "ORPO: preference pairs, the chosen responses' NLL plus an odds-ratio term; no reference "
                      "model, no SFT stage needed.", "orpo", title="ORPO", compared=True),
    "kto": StageSpec("kto", "tether.config:KTOConfig", "tether.loops.kto:run_kto", "tether.plan.dry_run:plan_kto",
                     "KTO: responses labelled desirable or undesirable (or preference pairs, split), against a "
                     "reference; no reward model, no RL loop.", "kto", title="KTO", compared=True, rows_per_pair=2),
}


def compared_preference_stages() -> tuple[str, ...]:
    """The preference stages ``tether compare`` runs beside the RL algorithms (DPO, SimPO, ORPO, KTO)."""
    return tuple(name for name, spec in SUPERVISED.items() if spec.compared)


def stages() -> dict[str, StageSpec]:
    """Every stage: the supervised ones, then one per registered RL algorithm (plugins included)."""
    load_plugins()
    rl = {name: StageSpec(name, "tether.config:RLConfig", "tether.loops.rl_run:run_rl", "tether.plan.dry_run:plan_rl",
                          spec.summary, name, algorithm=name) for name, spec in ALGORITHMS.items()}
    return {**SUPERVISED, **rl}


def stage_spec(name: str, caller: str = "stage") -> StageSpec:
    """The stage ``name``; a :class:`ConfigError` listing the stages otherwise."""
    table = stages()
    if not isinstance(name, str) or name not in table:
        raise ConfigError(f"tether.{caller}: unknown stage {name!r}; expected one of {', '.join(table)}.")
    return table[name]
