"""One config tree per stage: SFT, reward model, DPO, the RL stages (their blocks: rl_blocks.py).
Every field documents itself."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

from tether.config.base import option, refuse_inert, section
from tether.config.common import (
    CPUConfig,
    DataConfig,
    DistributedConfig,
    LoRAConfig,
    ModelConfig,
    OptimConfig,
    RunConfig,
    check_common,
    check_supervised,
    refuse_inert_lora,
)
from tether.registry.algorithms import ALGORITHMS, DEFAULT_ALGORITHM, algorithm_spec
from tether.common.errors import ConfigError
from tether.registry.engines import ENGINES, engine_spec
from tether.config.health import HealthConfig
from tether.config.placement import FIELDS as RESOURCE_FIELDS
from tether.config.placement import ROLES as RL_ROLES
from tether.config.placement import PlacementConfig
from tether.config.environment import EnvironmentConfig, check_environment
from tether.config.rollout import RolloutConfig, check_is_correction, check_max_staleness
from tether.config.distill import DistillConfig
from tether.common.targets import import_callable
from tether.config.scalar_stages import (SUPERVISED_MOVED_KEYS, PRMConfig,  # noqa: F401 (re-exported)
                                         RewardModelConfig, ScalarHeadStageConfig)
from tether.config.rl_blocks import (
    BF16_RATIO_TOLERANCE,
    ActorOptimConfig,
    CriticConfig,
    GroupConfig,
    KLConfig,
    PPOAlgoConfig,
    PolicyLossConfig,
    RewardSourceConfig,
    RL_LOOP_KEYS,
    RLCPUConfig,
    RLEvalConfig,
    RLLoopConfig,
    SelectionConfig,
    check_group_counts,
    check_learning_signal,
    default_group_size,
)


@dataclass(frozen=True)
class SFTConfig:
    """Supervised fine-tuning on demonstrations; loss on response tokens only."""

    run: RunConfig = section(RunConfig, "Run directory, seed, threads, logging.")
    model: ModelConfig = section(ModelConfig, "The base causal LM to fine-tune.")
    data: DataConfig = section(DataConfig, "Demonstrations: `messages` or `prompt`/`completion`.")
    optim: OptimConfig = section(OptimConfig, "Optimiser and schedule.")
    epochs: float = option(1.0, "Passes over the training data (fractions allowed).", gt=0)
    max_steps: int | None = option(None, "Stop after this many optimiser steps (overrides epochs).", ge=1)
    eval_every: int = option(200, "Evaluate held-out loss every this many steps.", ge=1)
    keep_dropout: bool = option(False, "Keep the model's dropout (off by default: RLHF practice).")
    lora: LoRAConfig = section(LoRAConfig, "LoRA adapters on the model (r = 0: off).")
    gradient_checkpointing: bool = option(
        False, "Recompute each decoder layer's activations in the backward instead of keeping them: less "
               "memory, ~30% more compute. Same losses and gradients.",
    )
    cpu: CPUConfig = section(CPUConfig, "CPU-only speedups.")
    distributed: DistributedConfig = section(DistributedConfig, "Data parallel under torchrun.")
    placement: PlacementConfig = section(PlacementConfig, "Where the trained model runs: this process, or a Ray "
                                                          "cluster (role policy; the reward model's: reward).")

    MOVED_KEYS = SUPERVISED_MOVED_KEYS

    def validate(self) -> None:
        check_supervised(self)
        self.placement.ray.check_roles(("policy",))  # the model SFT trains


@dataclass(frozen=True)
class GenRMConfig(SFTConfig):
    """A generative judge: SFT on preference pairs rendered as pairwise judge prompts and verdicts
    (both orders), for the judge reward kind and `tether label --judge-path` (docs/judges.md)."""

    data: DataConfig = section(DataConfig, "Preference pairs (prompt, chosen, rejected), as `tether rm` reads them; "
                                           "each becomes two judge examples, one per order.")
    rubric: str | None = option(None, "The pairwise rubric file the judge learns and will be asked with: {prompt}, "
                                      "{response_a}, {response_b}; null = the built-in one.", path=True)
    verdicts: list[str] = option(factory=lambda: ["Winner: A", "Winner: B"],
                                 help="The two verdicts the judge learns to write: A is better, B is better. Its "
                                      "judge.pattern must read them (the built-in one reads 'Winner: A|B|tie'; a "
                                      "group reading 1 or 2 counts as A or B).")

    def validate(self) -> None:
        super().validate()
        if len(self.verdicts) != 2 or len(set(self.verdicts)) != 2 or not all(v.strip() for v in self.verdicts):
            raise ConfigError(f"Config key 'verdicts' = {self.verdicts!r}: expected two different, non-empty "
                              "verdicts (A is better, B is better).")


@dataclass(frozen=True)
class DPOLossConfig:
    """The DPO loss (docs/algorithms.md)."""

    beta: float = option(0.1, "beta: the strength of the implicit KL leash to the reference (Rafailov et al. 2023).",
                         gt=0)
    loss: Literal["sigmoid", "ipo"] = option(
        "sigmoid", "sigmoid = DPO's -log sigmoid(beta * h) (Rafailov et al. 2023, eq. 7); ipo = (h - 1/(2 beta))^2 "
                   "(Azar et al. 2023, eq. 17), h the chosen-minus-rejected log-ratio difference.")
    label_smoothing: float = option(
        0.0, "sigmoid only (refused with ipo): the chance a label is flipped (conservative DPO): "
             "-(1-e) log s(bh) - e log s(-bh).",
        ge=0, lt=0.5)


@dataclass(frozen=True)
class SimPOLossConfig:
    """The SimPO loss (docs/algorithms.md): -log sigmoid(beta * (logp_c/|y_c| - logp_r/|y_r|) - gamma)."""

    beta: float = option(2.0, "beta: the scale of the length-normalised log-probability reward (Meng et al. 2024 "
                              "use 2.0-2.5).", gt=0)
    gamma: float = option(1.0, "gamma: the target reward margin between chosen and rejected (the paper keeps "
                               "gamma/beta near 0.5).", ge=0)


@dataclass(frozen=True)
class ORPOLossConfig:
    """The ORPO loss (docs/algorithms.md): the chosen response's NLL + lambda * the odds-ratio term."""

    odds_ratio_weight: float = option(
        0.1, "lambda: the weight of -log sigmoid(log odds(y_c) - log odds(y_r)) beside the chosen response's "
             "NLL (Hong et al. 2024 use 0.1-0.25).", gt=0)


@dataclass(frozen=True)
class PairStageConfig:
    """What the stages that train the policy on preference pairs share (DPO, SimPO, ORPO): no reward
    model and no RL loop."""

    run: RunConfig = section(RunConfig, "Run directory, seed, threads, logging.")
    model: ModelConfig = section(ModelConfig, "The policy's initial weights, normally the SFT checkpoint (ORPO, "
                                              "which trains the chosen responses' NLL too, may start from a base).")
    data: DataConfig = section(DataConfig, "Pairs, as the reward-model stage reads them.")
    optim: OptimConfig = section(OptimConfig, "Optimiser and schedule.")
    epochs: float = option(1.0, "Passes over the pairs.", gt=0)
    max_steps: int | None = option(None, "Stop after this many optimiser steps (overrides epochs).", ge=1)
    eval_every: int = option(200, "Evaluate the implicit reward's held-out accuracy every this many steps.", ge=1)
    on_identical: Literal["error", "skip"] = option(
        "skip", "Pairs whose chosen equals rejected: skip and count them, or stop."
    )
    lora: LoRAConfig = section(LoRAConfig, "LoRA adapters on the policy (r = 0: off).")
    gradient_checkpointing: bool = option(
        False, "Recompute each decoder layer's activations in the backward instead of keeping them: less "
               "memory, ~30% more compute. Same losses and gradients.",
    )
    cpu: CPUConfig = section(CPUConfig, "CPU-only speedups.")
    distributed: DistributedConfig = section(DistributedConfig, "Data parallel under torchrun.")
    placement: PlacementConfig = section(PlacementConfig, "Where the trained model runs: this process, or a Ray "
                                                          "cluster (role policy).")

    def validate(self) -> None:
        self.placement.ray.check_roles(("policy",))  # DPO's reference is its worker's
        check_supervised(self)


@dataclass(frozen=True)
class DPOConfig(PairStageConfig):
    """DPO: the policy trained on preference pairs directly, no reward model and no RL loop."""

    reference: str | None = option(
        None, "The reference policy; default: model.name_or_path (with LoRA: the policy's base, adapters off).",
        path=True)
    dpo: DPOLossConfig = section(DPOLossConfig, "The loss.")

    def validate(self) -> None:
        if self.lora.enabled and self.lora.dropout:
            raise ConfigError(f"Config key 'lora.dropout' = {self.lora.dropout}: DPO needs 0 (the policy's log-probs "
                              "are compared with the reference's, computed once without dropout).")
        if self.dpo.loss == "ipo" and self.dpo.label_smoothing:
            raise ConfigError(f"Config key 'dpo.label_smoothing' = {self.dpo.label_smoothing} with dpo.loss='ipo': "
                              "label smoothing is a term of the sigmoid (DPO) loss only; IPO's squared loss has none, so "
                              "it would have no effect. Drop it, or use dpo.loss=sigmoid.")
        super().validate()


@dataclass(frozen=True)
class SimPOConfig(PairStageConfig):
    """SimPO: preference pairs, the length-normalised log-probability as the reward, no reference model."""

    simpo: SimPOLossConfig = section(SimPOLossConfig, "The loss.")


@dataclass(frozen=True)
class ORPOConfig(PairStageConfig):
    """ORPO: preference pairs, the chosen responses' NLL plus an odds-ratio term, no reference model."""

    orpo: ORPOLossConfig = section(ORPOLossConfig, "The loss.")


@dataclass(frozen=True)
class RLConfig:
    """An RL stage, any registered algorithm (``algorithm``, PPO by default): the actor, its
    reference, the reward source and, for an algorithm that trains one, the critic."""

    run: RunConfig = section(RunConfig, "Run directory, seed, threads, logging.")
    model: ModelConfig = section(ModelConfig, "The actor's initial weights: the SFT checkpoint.")
    reference: str | None = option(None, "Reference checkpoint; default: model.name_or_path.", path=True)
    prompts: str = option("", "Prompt data: `prompt` (string or messages) or `messages` rows.", path=True)
    prompts_split: str = option("train", "Split of a hub prompt dataset.")
    reward: RewardSourceConfig = section(RewardSourceConfig, "The reward source.")
    critic: CriticConfig = section(CriticConfig, "The value model.")
    algorithm: str = option(
        DEFAULT_ALGORITHM, "The RL algorithm on the same roles, by its registered name (tether.registry.algorithms; "
                           "built in: " + ", ".join(ALGORITHMS) + "). Each has its command (tether NAME); "
                           "docs/algorithms.md.")
    group: GroupConfig = section(GroupConfig, "Responses per prompt (grpo, rloo).")
    policy_loss: PolicyLossConfig = section(PolicyLossConfig, "The critic-free algorithms' actor loss.")
    selection: SelectionConfig = section(SelectionConfig, "Rejection sampling's winners of each group.")
    distill: DistillConfig = section(DistillConfig, "On-policy distillation's divergence and teacher endpoint "
                                                    "(algorithm=distill; its teacher is otherwise `reference`).")
    rollout: RolloutConfig = section(RolloutConfig, "Sampling.")
    environment: EnvironmentConfig = section(EnvironmentConfig, "Multi-turn episodes: an environment answers each "
                                                                "turn (tools, follow-up user turns).")
    optim: ActorOptimConfig = section(ActorOptimConfig, "The actor's optimiser and schedule (the critic's is "
                                                        "critic.optim).")
    kl: KLConfig = section(KLConfig, "The KL penalty to the reference.")
    rl: RLLoopConfig = section(RLLoopConfig, "The RL loop every algorithm runs: iterations, the update's epochs "
                                             "and minibatches, the policy loss's clip and the invariant checks.")
    ppo: PPOAlgoConfig = section(PPOAlgoConfig, "PPO's own settings: GAE and the critic's value loss.")
    eval: RLEvalConfig = section(RLEvalConfig, "Held-out evaluation.")
    health: HealthConfig = section(HealthConfig, "Training-health alarms (reference monitoring tables).")
    cpu: RLCPUConfig = section(RLCPUConfig, "CPU-only speedups.")
    lora: LoRAConfig = section(
        LoRAConfig, "LoRA adapters on the actor (r = 0: off). The reference is then the actor's base with the "
                    "adapters switched off: one copy of the base weights serves both.")
    gradient_checkpointing: bool = option(
        False, "Recompute each decoder layer's activations in the backward instead of keeping them: less "
               "memory, ~30% more compute. Same losses and gradients.",
    )
    distributed: DistributedConfig = section(DistributedConfig, "Data parallel under torchrun.")
    placement: PlacementConfig = section(PlacementConfig, "Where the roles run: this process, or a Ray cluster.")

    MOVED_KEYS = {**SUPERVISED_MOVED_KEYS,
                  "ppo.autocast": ("run.precision", {"none": "fp32", "bf16": "bf16"}),
                  "ppo.linear_backend": ("cpu.linear_backend", None),
                  "ppo.actor_lr": ("optim.lr", None),
                  **{f"placement.ray.{role}.{key}": (f"placement.ray.roles.{role}.{key}", None)
                     for role in RL_ROLES for key in RESOURCE_FIELDS},
                  "critic.lr": ("critic.optim.lr", None),
                  **{f"ppo.{key}": ((f"optim.{key}", f"critic.optim.{key}"), None)  # they set both models'
                     for key in ("warmup_steps", "max_grad_norm", "weight_decay")},
                  "ppo.parallel_roles": ("cpu.parallel_roles", None),
                  **{f"ppo.{key}": (f"rl.{key}", None) for key in RL_LOOP_KEYS},  # the loop's, every algorithm's
                  "ppo.balance_roles": (None, "it shared the update threads' weight-gradient products outside "
                                              "autograd, which torch.distributed cannot wrap, for ~3% at the bench's "
                                              "small size")}

    @staticmethod
    def moved_targets(data: dict, targets: tuple[str, ...]) -> tuple[str, ...]:
        """An old key that set both models' optimiser (e.g. ``ppo.warmup_steps``) sets only the
        actor's under an algorithm without a critic, and with a shared-trunk critic (a head the
        actor's optimiser steps): their ``critic.*`` keys are refused."""
        name = data.get("algorithm", DEFAULT_ALGORITHM)
        critic = data.get("critic") if isinstance(data.get("critic"), dict) else {}
        if (name in ALGORITHMS and not ALGORITHMS[name].needs_critic) or critic.get("shared_trunk") is True:
            return tuple(t for t in targets if not t.startswith("critic.")) or targets
        return targets

    def __post_init__(self) -> None:
        # policy_loss's null keys follow the algorithm, so the saved config names the loss it ran.
        object.__setattr__(self, "policy_loss", self.policy_loss.resolved(self.algorithm))

    @property
    def samples_per_prompt(self) -> int:
        """``group.size``, or the algorithm's default (4 for grpo and rloo, else 1)."""
        return self.group.size if self.group.size is not None else default_group_size(self.algorithm)

    @property
    def episodes(self) -> int:
        """Responses per iteration: rollout.batch_size prompts x samples_per_prompt."""
        return self.rollout.batch_size * self.samples_per_prompt

    @property
    def needs_critic(self) -> bool:
        """Whether ``algorithm`` trains a critic, as the algorithm itself declares (tether.algorithms)."""
        return algorithm_needs_critic(self.algorithm)

    @property
    def ratio_tolerance(self) -> float:
        """``rl.ratio_tolerance``, raised to bf16/fp16 rounding level under autocast."""
        if self.run.precision == "fp32":
            return self.rl.ratio_tolerance
        return max(self.rl.ratio_tolerance, BF16_RATIO_TOLERANCE)

    def validate(self) -> None:
        self.optim.check("optim")
        self.critic.optim.check("critic.optim")
        for key, lora in (("lora.dropout", self.lora), ("critic.lora.dropout", self.critic.lora)):
            if lora.enabled and lora.dropout:
                raise ConfigError(
                    f"Config key '{key}' = {lora.dropout}: PPO needs 0. Its first-minibatch check expects the new and "
                    "the rollout policy to agree exactly before any update, and dropout makes every forward random."
                )
        if self.critic.shared_trunk and self.critic.lora.enabled:
            raise ConfigError("Config block 'critic.lora': a shared-trunk critic (critic.shared_trunk=true) is a value "
                              "head on the actor; put the adapters on the actor (lora.*) instead.")
        spec = algorithm_spec(self.algorithm)
        if spec.needs_reward and not self.reward.has_source:
            raise ConfigError(
                "Config block 'reward' needs 'reward.models' (checkpoints), 'reward.callable', 'reward.url' or "
                "'reward.terms' (a composed reward)."
            )
        if not spec.needs_reward:  # the whole block: its sources, and what shapes their score
            refuse_inert(self, ["reward"], f"with algorithm={self.algorithm}, which is trained without a reward")
        if not self.prompts:
            raise ConfigError("Config key 'prompts' is empty: expected a prompt file or dataset.")
        if self.samples_per_prompt < spec.min_group_size:
            raise ConfigError(
                f"Config key 'group.size' = {self.group.size}: {self.algorithm} compares responses to the same "
                f"prompt, so it needs at least {spec.min_group_size} (4-16 is usual)."
            )
        for i, term in enumerate(self.reward.terms):
            if term.judge.enabled and term.judge.mode != "pointwise" and self.samples_per_prompt < 2:
                raise ConfigError(f"Config key 'reward.terms[{i}].judge.mode' = {term.judge.mode}: the judge compares "
                                  f"a prompt's responses with each other, and algorithm={self.algorithm} samples "
                                  f"{self.samples_per_prompt} per prompt; use a group algorithm (grpo, rloo, "
                                  "online_dpo, rs) with group.size >= 2, or mode=pointwise.")
        refuse_inert(self, spec.inert_keys, f"with algorithm={self.algorithm}, which does not read it")
        if spec.config_check is not None:  # the algorithm's own rules (distill: its teacher)
            import_callable(spec.config_check, f"the algorithm {spec.name!r}'s config check")(self)
        if self.group.advantage != "outcome" and not spec.process_advantages:
            raise ConfigError(f"Config key 'group.advantage' = {self.group.advantage} is set with algorithm="
                              f"{self.algorithm}, which does not read it (process supervision is GRPO's: its "
                              "registry entry's process_advantages); drop the key.")
        dense_terms = self.reward.dense_terms()
        if self.group.advantage == "process" and not self.environment.enabled and not dense_terms:
            raise ConfigError("Config key 'group.advantage' = process: the steps are an environment's turns or a "
                              "process reward model's steps (a reward.terms entry with prm), each with its reward; "
                              "there is neither (one step per response: process supervision would be outcome "
                              "supervision). Set an environment or a prm term, or drop the key.")
        if dense_terms and (spec.dense_rewards or (spec.process_advantages and self.group.advantage == "process")):
            self.reward.check_dense_terms(self.algorithm)
        for other in ALGORITHMS.values():  # a block only one algorithm reads
            if other.config_block and other.name != self.algorithm:
                refuse_inert(self, [other.config_block], f"with algorithm={self.algorithm}; only {other.name} reads it")
        check_group_counts(self, spec)
        check_learning_signal(self)
        if spec.whole_groups and (self.rl.minibatch_size // self.rl.grad_accum_steps) % self.samples_per_prompt:
            raise ConfigError(
                f"Config key 'rl.minibatch_size' = {self.rl.minibatch_size}: {self.algorithm} compares each prompt's "
                f"responses with each other, so every micro-batch (rl.minibatch_size / rl.grad_accum_steps = "
                f"{self.rl.minibatch_size // self.rl.grad_accum_steps}) must hold whole groups of group.size = "
                f"{self.samples_per_prompt}.")
        episodes = self.rollout.batch_size * self.samples_per_prompt
        if episodes % self.rl.minibatch_size:
            raise ConfigError(
                f"Config key 'rl.minibatch_size' = {self.rl.minibatch_size}: must divide the responses per "
                f"iteration, rollout.batch_size x group.size = {self.rollout.batch_size} x "
                f"{self.samples_per_prompt} = {episodes}."
            )
        critic_group = self.placement.ray.roles.get("critic")
        if not self.needs_critic and critic_group is not None:
            leaf = f"critic.{next(iter(critic_group))}" if isinstance(critic_group, dict) and critic_group else "critic"
            raise ConfigError(f"Config key 'placement.ray.roles.{leaf}' is set with algorithm={self.algorithm}, which "
                              "trains no critic, so it would have no effect; drop it.")
        self.placement.ray.check_roles(RL_ROLES)
        if not self.needs_critic:
            refuse_inert(self, CRITIC_KEYS, f"with algorithm={self.algorithm}, which trains no critic")
        elif (self.critic.init == "reward" and not self.critic.path and not self.reward.model_sources()
                and not self.critic.shared_trunk):
            source = ("reward.terms, none of which has models" if self.reward.terms else
                      f"{'reward.callable' if self.reward.callable else 'reward.url'} (reward.models is empty)")
            raise ConfigError(
                "Config key 'critic.init' = 'reward': the critic starts from the reward model's trained head, "
                f"but the reward comes from {source}. Set critic.init=policy (a fresh "
                "value head on the policy) or critic.path to a trained scalar-head checkpoint."
            )
        if self.critic.shared_trunk and self.critic.path:
            raise ConfigError(
                f"Config key 'critic.path' = {self.critic.path!r}: a shared-trunk critic "
                "(critic.shared_trunk=true) is a value head on the actor, it loads no separate model."
            )
        engine = engine_spec(self.rollout.engine)
        if self.rollout.use_engine_logprobs and engine.logprobs_switch != "use_engine_logprobs":
            owners = ", ".join(s.name for s in ENGINES.values() if s.logprobs_switch == "use_engine_logprobs")
            raise ConfigError(
                f"Config key 'rollout.use_engine_logprobs' = true with rollout.engine={self.rollout.engine!r}: it is "
                f"the switch of the engines that return their own log-probs ({owners}); the {engine.name} engine "
                f"keeps its sampling log-probs with rollout.{engine.logprobs_switch}."
            )
        if self.rollout.use_engine_logprobs and (self.rollout.top_k or self.rollout.top_p < 1):
            raise ConfigError(
                f"Config key 'rollout.use_engine_logprobs' = true with rollout.top_k={self.rollout.top_k} / "
                f"rollout.top_p={self.rollout.top_p}: vLLM's log-probs are then of the filtered distribution, "
                "PPO's ratio is of the unfiltered one at the sampling temperature. Turn the filters off or let the "
                "actor recompute the log-probs (rollout.use_engine_logprobs=false)."
            )
        check_is_correction(self.rollout)
        check_max_staleness(self.rollout, self.placement)
        check_environment(self)
        if self.critic.shared_trunk and self.ppo.critic_warmup_iters:
            raise ConfigError(
                f"Config key 'ppo.critic_warmup_iters' = {self.ppo.critic_warmup_iters}: with "
                "critic.shared_trunk=true the value loss moves the actor's trunk, so the critic cannot "
                "train alone; set it to 0."
            )
        for keys, why in inert_rl_settings(self):
            refuse_inert(self, keys, why)
        check_common(self)
        refuse_inert_lora(self, "lora")
        refuse_inert_lora(self, "critic.lora")


#: The keys only a critic-based algorithm reads: the critic, its Ray group, GAE and the value loss.
CRITIC_KEYS = ("critic", "ppo.vf_coef", "ppo.value_clip", "ppo.lam",
               "ppo.whiten_advantages", "ppo.critic_warmup_iters", "health.value_loss_explode_factor",
               "health.value_loss_baseline_iters")


def algorithm_needs_critic(name: str) -> bool:
    """Whether the registered algorithm ``name`` trains a critic, as its registry entry declares."""
    return algorithm_spec(name).needs_critic


def inert_rl_settings(cfg: RLConfig) -> list[tuple[tuple[str, ...], str]]:
    """(keys, the setting under which they do nothing) of an RL config: each of those keys set
    to anything but its default is refused (a setting that silently does nothing is a defect)."""
    rules = []
    if cfg.critic.shared_trunk:
        head_only = tuple(f"critic.optim.{f.name}" for f in dataclasses.fields(cfg.critic.optim) if f.name != "lr")
        rules.append((("critic.init", "critic.gradient_checkpointing", "critic.strategy", *head_only),
                      "with critic.shared_trunk=true (the critic is a value head on the actor's trunk, stepped by "
                      "the actor's optimiser at critic.optim.lr)"))
    if cfg.kl.controller == "fixed":
        rules.append((("kl.target", "kl.horizon"), "with kl.controller=fixed (they steer the adaptive controller)"))
    if cfg.reward.terms:
        rules.append((("reward.combine", "reward.std_coef"), "with reward.terms (a model term has its own combine and "
                                                             "std_coef)"))
    elif len(cfg.reward.models) < 2:
        rules.append((("reward.combine", "reward.std_coef"), "with fewer than two reward.models (they combine an "
                                                             "ensemble's scores)"))
    elif cfg.reward.combine != "mean_minus_std":
        rules.append((("reward.std_coef",), f"with reward.combine={cfg.reward.combine} (it is mean_minus_std's k)"))
    if not cfg.reward.url:
        rules.append((("reward.api_key",), "with no reward.url (it is the reward server's key)"))
    if not cfg.eval.prompts:
        rules.append((("eval.every", "eval.max_prompts", "eval.judge"), "with no eval.prompts (no held-out evaluation)"))
    if not cfg.rl.compile:
        rules.append((("rl.compile_mode",), "with rl.compile=false"))
    if cfg.rollout.is_correction == "none":
        rules.append((("rollout.is_cap", "health.is_clipped_high", "health.is_weight_drift"),
                      "with rollout.is_correction=none (they bound and watch the correction's weights)"))
    if cfg.rollout.max_staleness == 0:
        rules.append((("rollout.worker_threads",), "with rollout.max_staleness=0 (no sampling worker)"))
    elif engine_spec(cfg.rollout.engine).holds_own_weights:
        rules.append((("rollout.worker_threads",), f"with rollout.engine={cfg.rollout.engine} (a thread drives the "
                                                   "engine's own processes; no worker process)"))
    # The registry says which settings block and which log-probs switch belong to which engine.
    engine = engine_spec(cfg.rollout.engine)
    for other in ENGINES.values():
        if other.config_block and other.config_block != engine.config_block:
            rules.append(((other.config_block,), f"with rollout.engine={engine.name} (they set up the "
                                                 f"{other.title} engine)"))
    if engine.logprobs_switch != "capture_logprobs":
        rules.append((("rollout.capture_logprobs",), f"with rollout.engine={engine.name} (its switch is "
                                                     f"rollout.{engine.logprobs_switch})"))
    if cfg.placement.backend != "ray":
        rules.append((("placement.ray",), f"with placement.backend={cfg.placement.backend}"))
    if not cfg.health.enabled:
        rules.append((tuple(f"health.{f.name}" for f in dataclasses.fields(cfg.health) if f.name != "enabled"),
                      "with health.enabled=false"))
    return rules


__all__ = ["SFTConfig", "RewardModelConfig", "RLConfig", "DPOConfig", "SimPOConfig", "ORPOConfig"]

