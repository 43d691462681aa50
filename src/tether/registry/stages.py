"""The training stages by name: everything tether needs to know about a stage, in one entry.

``tether NAME`` (the commands are registered from this table), ``tether.NAME(...)``,
``tether.run(NAME, ...)``, ``tether.dry_run(NAME, ...)``, ``tether launch``, the model cards, the
memory model and ``tether compare`` read it. An RL stage exists for every registered algorithm
(:mod:`tether.registry.algorithms`), so a plugin algorithm gets its command, its API function and
its dry run without a line here; a supervised stage (a plugin's too) is one :func:`register_stage`
call. Entries name their code as ``"module:attr"``: importing this module loads no torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tether.common.errors import ConfigError
from tether.registry.algorithms import ALGORITHMS
from tether.registry.plugins import claim, load_plugins
from tether.common.targets import import_callable

#: The settings every supervised stage's model card shows (dotted config keys; absent keys are left out).
SUPERVISED_CARD_KEYS = ("optim.lr", "optim.batch_size", "optim.grad_accum_steps", "optim.schedule",
                        "optim.warmup_steps", "epochs", "max_steps", "data.max_length")
#: The settings an RL stage's model card shows.
RL_CARD_KEYS = ("algorithm", "rl.iterations", "rollout.batch_size", "group.size", "rollout.max_prompt_length",
                "rollout.max_new_tokens", "rollout.temperature", "kl.coef", "kl.controller", "kl.estimator",
                "kl.placement", "rl.epochs", "rl.minibatch_size", "rl.clip", "optim.lr", "reward.models",
                "reward.terms")
#: What an update step of a supervised stage does, for the dry run's peak lines.
TRAIN_STEP = "forward + backward + AdamW"


@dataclass(frozen=True)
class Passes:
    """What one micro-batch of a supervised stage runs, for the memory model (:mod:`tether.plan.memory`).

    ``sequences``: sequences per row in the trained pass (1: an SFT example, a KTO row; 2: a pair's
    chosen and rejected). ``head``: what the trained model's head computes: ``"tokens"`` (log-probs
    at every position, the model's own head when the LM head is not chunked), ``"responses"``
    (log-probs at the response positions) or ``"score"`` (a scalar at the last token).
    ``reference``: sequences per row the frozen reference scores before training (0: none)."""

    sequences: int
    head: str
    reference: int = 0

    def __post_init__(self):
        if self.head not in ("tokens", "responses", "score") or self.sequences < 1 or self.reference < 0:
            raise ConfigError(f"Stage passes {self}: expected sequences >= 1, head one of tokens, responses, score, "
                              "and reference >= 0.")


@dataclass(frozen=True)
class StageSpec:
    """One stage.

    ``config``: its config class; ``run``: ``run(cfg, resume=False, **extra) -> dict`` (an RL
    stage's also takes ``on_iteration``); ``plan``: ``plan(cfg, stage, resume) -> Plan``;
    ``summary``: the command's help; ``api``: its Python function's name (``tether.<api>``);
    ``algorithm``: the RL algorithm it runs (None: a supervised stage); ``title``: its name in prose;
    ``compared``: a preference stage ``tether compare`` runs on the demo's pairs beside the RL ones;
    ``rows_per_pair``: the training rows it makes of one preference pair (KTO: a desirable and an
    undesirable one).

    What the generic supervised planner, the model card and the memory model read (supervised
    stages): ``purpose``: what a model trained by it is; ``role``: the trained model's role,
    ``"policy"`` (a causal LM) or ``"reward"`` (a scalar head); ``card_keys``: its own settings
    shown on the card after :data:`SUPERVISED_CARD_KEYS`; ``inputs``: ``"module:fn"``,
    ``fn(cfg) -> (tokenizer, {path: model config}, train rows, held-out rows, counts)``, the
    stage's own input checks as the run makes them; ``unit``: what a row is called in the plan;
    ``passes``: its micro-batch for the memory model; ``phases``: phase -> what it does, for the
    plan's peak lines; ``plan_note``: ``"module:fn"``, ``fn(counts) -> str``, one more data line.
    """

    name: str
    config: str
    run: str
    summary: str
    api: str
    plan: str = "tether.plan.dry_run:plan_supervised"
    algorithm: str | None = None
    title: str | None = None
    compared: bool = False
    rows_per_pair: int = 1
    purpose: str = ""
    role: str = "policy"
    card_keys: tuple[str, ...] = ()
    inputs: str | None = None
    unit: str = "examples"
    passes: Passes | None = None
    phases: dict[str, str] = field(default_factory=lambda: {"update": TRAIN_STEP})
    plan_note: str | None = None

    def config_class(self) -> type:
        return _attr(self.config)

    def run_function(self):
        return _attr(self.run)

    def planner(self):
        return _attr(self.plan)

    def input_check(self):
        return _attr(self.inputs)

    @property
    def has_reference(self) -> bool:
        """A frozen reference model scores the training rows (DPO, KTO)."""
        return bool(self.passes and self.passes.reference)

    @property
    def scalar(self) -> bool:
        """The trained model is a scalar-head model (the reward model)."""
        return self.role == "reward"


def _attr(target: str):
    return import_callable(target, "the stage table")


#: Supervised stage name -> its entry (built-ins below, then plugins'), in the order help lists them.
STAGES: dict[str, StageSpec] = {}
_BUILT_IN: set[str] = set()


def register_stage(spec: StageSpec) -> StageSpec:
    """Add a supervised stage: its command (``tether NAME``), API function (``tether.<api>``), dry
    run, model card and memory model follow from the entry. A built-in stage's name, or another
    module's, is refused; so is an entry without what the planner and the card need."""
    if spec.algorithm is not None:
        raise ConfigError(f"Stage {spec.name!r}: an RL stage comes from its algorithm's entry "
                          "(register_algorithm), not register_stage.")
    if not spec.name.isidentifier() or not spec.api.isidentifier() or spec.name in ALGORITHMS:
        raise ConfigError(f"Stage name {spec.name!r} (api {spec.api!r}): expected Python identifiers that no "
                          f"algorithm has (algorithms: {', '.join(ALGORITHMS)}).")
    missing = [k for k in ("purpose", "inputs", "passes") if not getattr(spec, k)]
    if missing or spec.role not in ("policy", "reward"):
        raise ConfigError(f"Stage {spec.name!r}: expected {', '.join(missing) or 'role'} in its entry (purpose: "
                          "what its model is; inputs: its input check; passes: its micro-batch for the memory "
                          "model; role: policy or reward), so the dry run, the model card and the memory model "
                          "know it.")
    claim(STAGES, _BUILT_IN, "Stage", spec, code="run")
    STAGES[spec.name] = spec
    return spec


def _pairs(name: str, title: str, config: str, run: str, summary: str, purpose: str, card_keys: tuple[str, ...],
           reference: bool, inputs: str) -> StageSpec:
    """A preference stage that trains the policy on (chosen, rejected) pairs."""
    phases = {"update": TRAIN_STEP}
    if reference:
        phases = {"logprobs": "the reference's log-probs, before training", **phases}
    return StageSpec(name, config, run, summary, name, title=title, compared=True, purpose=purpose,
                     card_keys=card_keys, inputs=inputs, unit="preference pairs",
                     passes=Passes(2, "responses", 2 if reference else 0), phases=phases)


register_stage(StageSpec(
    "sft", "tether.config:SFTConfig", "tether.objectives.sft:run_sft",
    "Supervised fine-tuning on demonstrations (loss on response tokens only).", "sft", title="SFT",
    purpose="supervised fine-tuning on demonstrations (loss on response tokens only)",
    inputs="tether.objectives.sft:plan_inputs", unit="examples", passes=Passes(1, "tokens")))
register_stage(StageSpec(
    "rm", "tether.config:RewardModelConfig", "tether.objectives.reward_model:run_reward_model",
    "Train a Bradley-Terry reward model on preference pairs.", "reward_model", title="RM",
    purpose="a Bradley-Terry reward model trained on preference pairs", role="reward", card_keys=("normalize",),
    inputs="tether.objectives.reward_model:plan_inputs", unit="preference pairs", passes=Passes(2, "score")))
register_stage(StageSpec(
    "genrm", "tether.config:GenRMConfig", "tether.objectives.genrm:run_genrm",
    "Train a generative judge: SFT on preference pairs rendered as pairwise judge prompts and verdicts.", "genrm",
    title="GenRM", purpose="a generative judge (a causal LM that writes 'Winner: A' or 'Winner: B' for a pair, "
    "trained on both orders of each preference pair)", card_keys=("rubric",),
    inputs="tether.objectives.genrm:plan_inputs", unit="judge examples", passes=Passes(1, "tokens")))
register_stage(StageSpec(
    "prm", "tether.config:PRMConfig", "tether.objectives.prm:run_prm",
    "Train a process reward model: a scalar head scoring each step of step-labelled solutions.", "prm",
    title="PRM", purpose="a process reward model (a scalar head read at the end of every step of a solution, "
    "trained on step labels)", role="reward", card_keys=("step_separator",),
    inputs="tether.objectives.prm:plan_inputs", unit="solutions", passes=Passes(1, "score")))
register_stage(_pairs(
    "dpo", "DPO", "tether.config:DPOConfig", "tether.objectives.dpo:run_dpo",
    "DPO (or IPO): the policy trained on preference pairs directly; no reward model, no RL loop.",
    "DPO on preference pairs (the policy trained directly, no reward model)",
    ("dpo.beta", "dpo.loss", "dpo.label_smoothing"), True, "tether.objectives.dpo:plan_inputs"))
register_stage(_pairs(
    "simpo", "SimPO", "tether.config:SimPOConfig", "tether.objectives.simpo:run_simpo",
    "SimPO: preference pairs, the length-normalised log-probability as the reward; no reference model.",
    "SimPO on preference pairs (the length-normalised log-probability as the reward, no reference model)",
    ("simpo.beta", "simpo.gamma"), False, "tether.objectives.shared:plan_inputs"))
register_stage(_pairs(
    "orpo", "ORPO", "tether.config:ORPOConfig", "tether.objectives.orpo:run_orpo",
    "ORPO: preference pairs, the chosen responses' NLL plus an odds-ratio term; no reference model, no SFT "
    "stage needed.",
    "ORPO on preference pairs (the chosen responses' NLL plus an odds-ratio term, no reference model)",
    ("orpo.odds_ratio_weight",), False, "tether.objectives.shared:plan_inputs"))
register_stage(StageSpec(
    "kto", "tether.config:KTOConfig", "tether.objectives.kto:run_kto",
    "KTO: responses labelled desirable or undesirable (or preference pairs, split), against a reference; no "
    "reward model, no RL loop.", "kto", title="KTO", compared=True, rows_per_pair=2,
    purpose="KTO on responses labelled desirable or undesirable (the policy trained directly, against a reference)",
    card_keys=("kto.beta", "kto.desirable_weight", "kto.undesirable_weight"), inputs="tether.objectives.kto:plan_inputs",
    unit="rows", passes=Passes(1, "responses", 2),
    phases={"logprobs": "the reference's log-probs, own and mismatched prompts, before training",
            "update": "z0's pass without gradient, then forward + backward + AdamW"},
    plan_note="tether.objectives.kto:ratio_notice"))
_BUILT_IN.update(STAGES)


def compared_preference_stages() -> tuple[str, ...]:
    """The preference stages ``tether compare`` runs beside the RL algorithms (DPO, SimPO, ORPO, KTO)."""
    load_plugins()
    return tuple(name for name, spec in STAGES.items() if spec.compared)


def rl_stage(name: str) -> StageSpec:
    """The stage of the registered algorithm ``name``."""
    spec = ALGORITHMS[name]
    return StageSpec(name, "tether.config:RLConfig", "tether.loops.rl_run:run_rl", spec.summary, name,
                     plan="tether.plan.dry_run:plan_rl", algorithm=name, title=spec.title, purpose=spec.purpose,
                     card_keys=RL_CARD_KEYS,
                     phases={"rollout": "generation", "logprobs": "old and reference log-probs, values, scores",
                             "update": "actor and critic forward + backward + AdamW" if spec.needs_critic
                             else "actor forward + backward + AdamW"})


def stages() -> dict[str, StageSpec]:
    """Every stage: the supervised ones, then one per registered RL algorithm (plugins included)."""
    load_plugins()
    return {**STAGES, **{name: rl_stage(name) for name in ALGORITHMS}}


def stage_spec(name: str, caller: str = "stage") -> StageSpec:
    """The stage ``name``; a :class:`ConfigError` listing the stages otherwise."""
    if isinstance(name, str) and name in STAGES:  # a supervised stage: no plugin needed
        return STAGES[name]
    table = stages()
    if not isinstance(name, str) or name not in table:
        raise ConfigError(f"tether.{caller}: unknown stage {name!r}; expected one of {', '.join(table)}.")
    return table[name]


def is_rl_stage(stage: str) -> bool:
    """Whether ``stage`` is a registered RL algorithm's (a plugin's included)."""
    load_plugins()
    return stage in ALGORITHMS
