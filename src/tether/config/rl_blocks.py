"""The blocks of the RL stages' config: the reward source, the critic and its optimiser, the
actor's optimiser, group sampling, the policy loss, the KL, the loop every algorithm runs (``rl``),
PPO's own settings (``ppo``), the CPU speedups and held-out evaluation.
:class:`tether.config.stages.RLConfig` holds them."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

from tether.registry.algorithms import algorithm_spec
from tether.config.base import FLOAT32_MAX, option, section
from tether.config.common import MICRO_BATCH_TOKENS_HELP, CPUConfig, LoRAConfig, OptimizerConfig, check_micro_batches
from tether.config.reward_terms import RewardTermConfig
from tether.registry.rewards import kind_of
from tether.common.errors import ConfigError


#: The loop's own ``objective/*`` metrics: a term logged as ``objective/<name>`` may not take these names.
OBJECTIVE_STATS = ("score", "score_raw", "score_std", "kl", "kl_k3", "kl_coef", "entropy", "non_score_reward")


@dataclass(frozen=True)
class RewardSourceConfig:
    """Where PPO's sequence score comes from."""

    models: list[str] = option(
        factory=list, help="Reward model checkpoints; several make an ensemble.", path=True
    )
    callable: str | None = option(
        None, "A python reward `module:function(prompts, responses) -> list[float]` instead."
    )
    url: str | None = option(
        None, "A reward server's URL (`tether serve --reward-model ...`): score via its POST /v1/rewards instead."
    )
    api_key: str | None = option(
        None, "API key for reward.url; it is saved in config.yaml, so prefer null and the TETHER_API_KEY variable."
    )
    combine: Literal["mean", "min", "mean_minus_std"] = option(
        "mean", "How an ensemble's scores combine ('trust only the consensus')."
    )
    std_coef: float = option(1.0, "k in mean - k*std for combine=mean_minus_std.", ge=0)
    normalize: Literal["none", "first_batch", "running"] = option(
        "none", "Scale scores by the first rollout's or a running mean/std."
    )
    clip: float | None = option(None, "Clip the (normalised) score to [-clip, clip].", gt=0)
    eos_penalty: float | None = option(
        -1.0, "Score given to responses that never emitted EOS; null = keep the RM score."
    )
    terms: list[RewardTermConfig] = option(
        factory=list,
        help="A composed reward instead of one source: a list of terms, the score sum_i weight_i * term_i, each "
             "term's raw score logged as reward/<name>. A term has a name, a weight (default 1) and exactly one "
             "source: models (+ combine, std_coef), callable, url (+ api_key), length_penalty (+ length_target: "
             "-length_penalty per response token beyond it), regex (1 if it matches the response text, else 0) or "
             "prm (a process reward model's step scores). "
             "Excludes reward.models, reward.callable and reward.url; normalize, clip and eos_penalty apply to the "
             "sum.",
    )

    def validate(self) -> None:
        given = [name for name, set_ in (("reward.models", bool(self.models)), ("reward.callable", bool(self.callable)),
                                         ("reward.url", bool(self.url))) if set_]
        if self.terms:
            self._check_terms(given)
            return
        if len(given) > 1:
            raise ConfigError(f"Config block 'reward': set one of 'reward.models', 'reward.callable' or "
                              f"'reward.url', not {' and '.join(repr(g) for g in given)}.")

    @property
    def has_source(self) -> bool:
        """Whether a source is set (an algorithm that needs a reward refuses the block without one)."""
        return bool(self.models or self.callable or self.url or self.terms)

    def _check_terms(self, given: list[str]) -> None:
        if given:
            raise ConfigError(f"Config block 'reward': 'reward.terms' composes the reward, so "
                              f"{' and '.join(repr(g) for g in given)} would be a second source; make it a term "
                              f"instead (e.g. {{name: rm, models: [...]}}).")
        seen: dict[str, int] = {}
        for i, term in enumerate(self.terms):
            term.check(f"reward.terms[{i}]")
            if term.name in seen:
                raise ConfigError(f"Config key 'reward.terms[{i}].name' = {term.name!r}: reward.terms[{seen[term.name]}] "
                                  "has that name too; each term needs its own (it names the metric reward/<name>).")
            seen[term.name] = i
        if any(term.normalize or term.limit is not None for term in self.terms):
            for i, term in enumerate(self.terms):
                if term.name in OBJECTIVE_STATS:
                    raise ConfigError(f"Config key 'reward.terms[{i}].name' = {term.name!r}: with normalised or "
                                      f"limited terms each term is logged as objective/<name>, and objective/"
                                      f"{term.name} is the loop's own metric; rename the term.")

    def dense_terms(self) -> list[int]:
        """The terms whose kind gives rewards at token positions (its registry entry's ``dense``: a PRM)."""
        return [i for i, term in enumerate(self.terms) if kind_of(term, f"reward.terms[{i}]").dense]

    def check_dense_terms(self, algorithm: str) -> None:
        """Where ``algorithm`` reads rewards per token, the dense terms' rewards go to their tokens
        unweighed by anything that acts on the sequence score: refuse the settings that would then
        scale or clip the other terms only (a dense term's normalize or limit, the score's normalize
        or clip)."""
        dense = self.dense_terms()
        for i in dense:
            term = self.terms[i]
            for leaf, value, default in (("normalize", term.normalize, False), ("limit", term.limit, None)):
                if value != default:
                    raise ConfigError(f"Config key 'reward.terms[{i}].{leaf}' = {value!r}: term {term.name!r} gives "
                                      f"rewards per token, which algorithm={algorithm} takes where they fall; "
                                      f"{leaf} acts on a sequence score, so it would not reach them. Drop it "
                                      "(weight scales the term).")
        for leaf, value, default in (("normalize", self.normalize, "none"), ("clip", self.clip, None)):
            if value != default:
                raise ConfigError(f"Config key 'reward.{leaf}' = {value!r}: reward term(s) "
                                  f"{', '.join(repr(self.terms[i].name) for i in dense)} give rewards per token, "
                                  f"which algorithm={algorithm} takes where they fall; reward.{leaf} acts on the "
                                  "sequence score only, so it would scale the other terms and not these. Drop it.")

    def model_sources(self) -> list[tuple[str, str]]:
        """(checkpoint, config key) of every reward model the reward loads: reward.models, or each
        model term's (``reward.terms[i].models``), in order."""
        if not self.terms:
            return [(path, "reward.models") for path in self.models]
        models = [(path, f"reward.terms[{i}].models") for i, term in enumerate(self.terms) for path in term.models]
        return models + [(term.prm, f"reward.terms[{i}].prm") for i, term in enumerate(self.terms) if term.prm]


@dataclass(frozen=True)
class ActorOptimConfig(OptimizerConfig):
    """The RL actor's optimiser block: constant after the warm-up by default, as PPO-RLHF runs it."""

    schedule: Literal["cosine", "linear", "constant"] = option(
        "constant", "Decay after warm-up over the run's optimiser steps: cosine/linear to min_lr_ratio*lr, or "
                    "constant.")


@dataclass(frozen=True)
class CriticOptimConfig(ActorOptimConfig):
    """The critic's optimiser block: the actor's keys, a larger default learning rate."""

    lr: float = option(2e-4, "Peak learning rate.", gt=0, lt=FLOAT32_MAX)


@dataclass(frozen=True)
class CriticConfig:
    """The value model."""

    init: Literal["reward", "policy"] = option(
        "reward",
        "reward = start from a trained scalar head: critic.path, else the first reward model (a checkpoint "
        "without one is an error); policy = a fresh value head (std 0.02) on critic.path, else the SFT model.",
    )
    path: str | None = option(None, "Explicit checkpoint; default: first reward model or the policy.", path=True)
    optim: CriticOptimConfig = section(CriticOptimConfig, "The critic's optimiser and schedule (the actor's is optim).")
    shared_trunk: bool = option(
        False,
        "A different model: the critic is a value head (zero-initialised) on the actor's own trunk, "
        "as in lm-human-preferences, instead of a separate scalar-head model. The value loss then "
        "trains the actor's trunk too, and one forward/backward pass per minibatch serves both "
        "losses, about half the update's work. critic.init and critic.path do not apply; the "
        "checkpoint's critic/ holds the value head alone (value_head.safetensors). On the demo "
        "task it learned less than the default critic (docs/performance.md).",
    )
    lora: LoRAConfig = section(LoRAConfig, "LoRA adapters on the critic, its value head trained in full (r = 0: off).")
    strategy: Literal["ddp", "fsdp"] | None = option(
        None, "The critic's data-parallel strategy under torchrun; null = distributed.strategy.")
    gradient_checkpointing: bool = option(
        False, "Recompute each decoder layer's activations in the backward instead of keeping them: less "
               "memory, ~30% more compute. Same losses and gradients.",
    )


def default_group_size(algorithm: str) -> int:
    """Responses per prompt when ``group.size`` is null: the algorithm's own default (registry)."""
    return algorithm_spec(algorithm).default_group_size


@dataclass(frozen=True)
class GroupConfig:
    """Responses per prompt: GRPO's group, RLOO's k (docs/algorithms.md)."""

    size: int | None = option(
        None, "Responses sampled per prompt (rows of one prompt are consecutive). null = the algorithm's "
              "default (docs/algorithms.md: 4 for the group baselines, which need at least 2; else 1).", ge=1)
    scale_by_std: bool = option(
        True, "GRPO: divide each group's centred rewards by their std (Shao et al. 2024); false = Dr. GRPO "
              "(Liu et al. 2025), centring only.")
    advantage: Literal["outcome", "process"] = option(
        "outcome", "GRPO: outcome = one advantage per response, from its total reward (Shao et al. 2024, "
                   "outcome supervision); process = per step (process supervision, sec. 4.1.3): each turn of "
                   "an environment's episode is a step with its turn's reward (the score on the last one), the "
                   "rewards normalised over all steps of the group, a token's advantage the sum from its step on "
                   "(docs/algorithms.md).")


@dataclass(frozen=True)
class PolicyLossConfig:
    """The critic-free algorithms' actor loss (grpo, rloo, reinforce_pp; ppo uses rl.clip)."""

    clip_low: float | None = option(None, "Lower ratio clip: r >= 1 - clip_low; null = rl.clip.", gt=0, lt=1)
    clip_high: float | None = option(
        None, "Upper ratio clip: r <= 1 + clip_high; null = rl.clip (DAPO's clip-higher uses 0.28).", gt=0)
    aggregation: Literal["token_mean", "sequence_mean", "fixed_normalizer"] | None = option(
        None, "How per-token losses become one: token_mean (DAPO: every token alike), sequence_mean "
              "(GRPO paper: every response alike), fixed_normalizer (Dr. GRPO: sum / (responses x "
              "rollout.max_new_tokens)). null = the algorithm's own default (its registry entry's; docs/algorithms.md).")
    ratio_level: Literal["token", "sequence", "sequence_product"] | None = option(
        None, "The importance ratio pi/pi_old that is clipped: token (one per token, PPO and GRPO), sequence "
              "(one per response, the geometric mean of its token ratios: GSPO), sequence_product (one per "
              "response, pi(y)/pi_old(y): the RLOO paper's and TRL's RLOOTrainer; its log is capped at 20 so "
              "float32 stays finite). A response's ratio is clipped as one. A sequence ratio sits far closer to 1 "
              "than token ratios, so the clip must be set for it: GSPO's paper clips at clip_low=3e-4, "
              "clip_high=4e-4; the default rl.clip 0.2 almost never binds. null = the algorithm's own default "
              "(its registry entry's; docs/algorithms.md).")

    def resolved(self, algorithm: str) -> "PolicyLossConfig":
        """This block with each null key set to ``algorithm``'s default (its registry entry's
        ``policy_loss``; token ratios and token_mean for an unknown name, which validation refuses)."""
        from tether.registry.algorithms import ALGORITHMS

        level, how = ALGORITHMS[algorithm].policy_loss if algorithm in ALGORITHMS else ("token", "token_mean")
        return dataclasses.replace(self, ratio_level=self.ratio_level or level, aggregation=self.aggregation or how)


@dataclass(frozen=True)
class KLConfig:
    """The KL leash to the reference model: one explicit block."""

    estimator: Literal["k1", "k2", "k3"] | None = option(
        None, "Per-token KL estimator used for training. null = k1 with kl.placement=reward, k3 with "
              "kl.placement=loss (k1 has no gradient as a loss term: docs/algorithms.md).")
    placement: Literal["reward", "loss"] = option(
        "reward", "Subtract beta*KL in the per-token reward, or add it to the policy loss."
    )
    controller: Literal["fixed", "adaptive"] = option("fixed", "Fixed beta or adaptive (target KL).")
    coef: float = option(0.05, "beta; the initial value when adaptive.", ge=0)
    target: float = option(6.0, "Adaptive: target KL per sequence (nats).", gt=0)
    horizon: int = option(10000, "Adaptive: horizon in episodes.", ge=1)

    def __post_init__(self) -> None:
        # The estimator's default follows the placement, so the saved config names the one used.
        if self.estimator is None:
            object.__setattr__(self, "estimator", "k3" if self.placement == "loss" else "k1")

    def validate(self) -> None:
        if self.placement == "loss" and self.estimator == "k1":
            raise ConfigError(
                "Config key 'kl.estimator' = 'k1' with kl.placement=loss: as a loss term k1 = log(pi/pi_ref) has "
                "zero expected gradient on the policy's own samples (E_pi[grad log pi] = 0), so it would pull "
                "nothing towards the reference. Use kl.estimator=k3 (GRPO's, the default with kl.placement=loss) "
                "or k2 (its gradient is the reverse KL's), or keep k1 in the reward (kl.placement=reward)."
            )


# bf16 rounding moves a trained model's logits by a few hundredths. With the LM head inside
# autocast (the HF engine; the lean loop keeps it in fp32) the largest token ratio between
# the captured (decode-time) and a fresh bf16 forward on the demo task was 2-5e-2 every iteration
# (measured, 100 iterations); the lean loop's fp32 head brings it to ~3e-3 (the trunk's rounding
# alone). The tolerance stays wide enough for both engines: the bugs this check catches (wrong
# temperature, positions, dropout) move ratios by O(1).
BF16_RATIO_TOLERANCE = 1e-1


@dataclass(frozen=True)
class RLLoopConfig:
    """The RL loop every algorithm runs: iterations of a rollout and an update, the update's
    minibatches, the actor's policy loss and the invariant checks."""

    iterations: int = option(100, "Iterations (one rollout, then one update each).", ge=1)
    epochs: int = option(4, "Passes over each rollout batch.", ge=1)
    minibatch_size: int = option(64, "Episodes per optimiser step.", ge=1)
    grad_accum_steps: int = option(1, "Micro-batches per minibatch (memory only).", ge=1)
    micro_batch_tokens: int | None = option(None, MICRO_BATCH_TOKENS_HELP, ge=1)
    clip: float = option(0.2, "Policy ratio clip epsilon (policy_loss.clip_low/clip_high may override it).", gt=0)
    entropy_coef: float = option(0.0, "Entropy bonus coefficient.", ge=0)
    gamma: float = option(1.0, "Discount of the per-token rewards (ppo's GAE, reinforce_pp's returns).", ge=0, le=1)
    target_approx_kl: float | None = option(
        None, "Stop an iteration's epochs early when approx-KL to the rollout policy exceeds this.", gt=0
    )
    fused_optimizer: bool = option(
        True, "AdamW's fused kernel: one pass over each parameter instead of ~10 (same update up to rounding)."
    )
    trim_last_layer: bool = option(
        True,
        "Run each model's last decoder layer only at the positions the update reads (response positions "
        "for log-probs and values, the last token for the reward); its keys and values still cover "
        "every position. Same outputs up to float summation order, ~10% fewer FLOPs per pass at "
        "the bench's shapes. Llama-layout models only (checked once per model against the full "
        "forward); others always run in full.",
    )
    compile: bool = option(
        False,
        "torch.compile the actor's and critic's trunk for the update's forward and backward (fused "
        "elementwise kernels). Needs a C++ compiler; the first iteration pays the compilation "
        "(minutes on a laptop CPU, cached on disk for later runs). The actor's and the critic's passes "
        "then run one after the other (cpu.parallel_roles is ignored).",
    )
    compile_mode: Literal["default", "max-autotune"] = option(
        "default",
        "With rl.compile: 'default' fuses the elementwise ops; 'max-autotune' also lets inductor time "
        "its own GEMM kernels against ATen's and keep the faster (longer first compilation; on the "
        "2-core bench CPU it measured no faster than 'default', GPUs may differ).",
    )
    ratio_tolerance: float = option(
        1e-3,
        "Invariant: |ratio - 1| on the first minibatch must stay below this (at least 0.1 under "
        "run.precision=bf16 or fp16, whose rounding alone moves a trained model's ratios by 2-5e-2).",
        gt=0,
    )
    on_invariant: Literal["warn", "error"] = option(
        "warn", "What a broken invariant (ratio, k3 < 0) does: warn or stop."
    )

    def validate(self) -> None:
        if self.minibatch_size % self.grad_accum_steps:
            raise ConfigError(
                f"Config key 'rl.grad_accum_steps' = {self.grad_accum_steps}: must divide "
                f"rl.minibatch_size = {self.minibatch_size}."
            )
        check_micro_batches("rl.micro_batch_tokens", self.micro_batch_tokens, self.grad_accum_steps)


#: The keys of the ``rl`` block (earlier configs named them ``ppo.KEY``: RLConfig.MOVED_KEYS).
RL_LOOP_KEYS = tuple(f.name for f in dataclasses.fields(RLLoopConfig))


@dataclass(frozen=True)
class PPOAlgoConfig:
    """PPO's own settings: GAE and the critic's value loss (the loop's are in the rl block)."""

    value_clip: float | None = option(0.2, "Value clip range around old values; null = off.", gt=0)
    vf_coef: float = option(0.1, "Value-loss coefficient.", gt=0)
    lam: float = option(0.95, "GAE lambda.", ge=0, le=1)
    whiten_advantages: bool = option(True, "Whiten advantages over the batch.")
    critic_warmup_iters: int = option(0, "First K iterations train only the critic.", ge=0)


@dataclass(frozen=True)
class RLCPUConfig(CPUConfig):
    """CPU-only speedups of the RL roles' models (docs/performance.md). No effect on other devices."""

    linear_backend: Literal["auto", "onednn", "aten"] = option(
        "auto",
        "Where the models' fp32 linear layers run on CPU: 'onednn' = oneDNN's matmul for the forward "
        "and input-gradient products of 4M+ multiply-accumulates (in the decode loop with each "
        "weight packed once per rollout), aten for the rest; 'aten' = PyTorch's default BLAS (MKL on "
        "x86) throughout; 'auto' = whichever measured faster on this CPU vendor: onednn on AMD "
        "(5-30% faster products on an EPYC Zen 4); on Intel aten in fp32 (MKL as fast or faster on "
        "a Xeon with AMX) and onednn under bf16 autocast (its packed bf16 decode); aten on CPUs never "
        "measured. Same products up to summation order. Under bf16 autocast the decode loop packs bf16 "
        "copies of the same weights; the update's bf16 products and rl.compile use aten.",
    )
    parallel_roles: bool = option(
        True,
        "With 2+ torch threads, run the actor's and the critic's update passes side by side in two "
        "threads, each with half the torch threads. Same maths (separate models, losses and "
        "optimisers); faster because one stream of small-batch ops leaves cores idle between "
        "kernels (~15% per iteration at the bench's small size). Not with rl.compile (compiling in "
        "two threads at once can deadlock).",
    )


@dataclass(frozen=True)
class RLEvalConfig:
    """Held-out evaluation during and after an RL run."""

    prompts: str | None = option(None, "Held-out prompts file; null = no evaluation.", path=True)
    every: int = option(0, "Evaluate every this many iterations (0 = only at the end).", ge=0)
    max_prompts: int = option(128, "Use at most this many held-out prompts.", ge=1)
    judge: str | None = option(None, "Gold judge `module:function(prompt, response, ended)`.")


@dataclass(frozen=True)
class SelectionConfig:
    """Rejection sampling's winners: which of each prompt's ``group.size`` samples it fine-tunes on."""

    keep: int = option(1, "Winners per prompt: the best `keep` of its group.size samples by score (1 = best-of-N); "
                          "at most group.size.", ge=1)
    min_score: float | None = option(
        None, "Keep a winner only if its score (after reward.normalize and the KL shaping) is at least this; "
              "null = no floor.")


def _group_size(cfg) -> str:
    """``group.size = N`` as the run resolves it, saying when N is the algorithm's default."""
    default = "" if cfg.group.size is not None else f" ({cfg.algorithm}'s default)"
    return f"group.size = {cfg.samples_per_prompt}{default}"


def check_group_counts(cfg, spec) -> None:
    """What must fit a prompt's group of ``group.size`` responses, checked with the config: without
    it, found only when the first group is ranked or updated, after every model is loaded and a
    rollout sampled. ``cfg``: the RL config; ``spec``: its algorithm's registry entry.

    - the winners of a group (``selection.keep``, the algorithm reading the selection block) are
      at most the group;
    - an algorithm whose loss compares a group's responses (``whole_groups``) takes row-count
      micro-batches: ``rl.micro_batch_tokens`` bins rows by length, splitting groups (online_dpo
      lists the key among those it does not read; this covers a plugin's such algorithm)."""
    keep = cfg.selection.keep
    if spec.config_block == "selection" and keep > cfg.samples_per_prompt:
        raise ConfigError(
            f"Config key 'selection.keep' = {keep}: {cfg.algorithm} keeps the best selection.keep of each prompt's "
            f"group.size samples, and {_group_size(cfg)}; expected at most {cfg.samples_per_prompt}. Lower "
            f"selection.keep, or raise group.size to at least {keep}.")
    tokens = cfg.rl.micro_batch_tokens
    if spec.whole_groups and tokens is not None:
        raise ConfigError(
            f"Config key 'rl.micro_batch_tokens' = {tokens} with algorithm={cfg.algorithm}: its loss compares each "
            f"prompt's responses ({_group_size(cfg)}) inside one micro-batch, and a token budget bins rows by "
            "length, splitting the groups. Drop rl.micro_batch_tokens and size micro-batches by rows "
            "(rl.grad_accum_steps, keeping rl.minibatch_size / rl.grad_accum_steps a multiple of group.size).")


def check_learning_signal(cfg) -> None:
    """Settings under which no update can ever move the policy, refused with the config (the
    ``nothing_to_learn`` health alarm catches what only the data can cause):

    - online DPO with a fixed ``kl.coef`` of 0: its loss −log σ(β·h) is log 2 for every pair, its
      gradient 0 (β is DPO's β);
    - ``reward.terms`` whose weights are all 0: every score is 0 (a weight of 0 logs its term only).
    """
    if cfg.algorithm == "online_dpo" and cfg.kl.coef == 0 and cfg.kl.controller == "fixed":
        raise ConfigError("Config key 'kl.coef' = 0 with algorithm=online_dpo and kl.controller=fixed: kl.coef is "
                          "DPO's beta, and at 0 every pair's loss is log 2 with a zero gradient, so no update would "
                          "train; expected a kl.coef above 0 (e.g. 0.1).")
    terms = cfg.reward.terms
    if terms and all(term.limit is not None for term in terms):
        raise ConfigError("Config key 'reward.terms': every term is a cost constraint (limit set), so there is no "
                          "objective to maximise; expected at least one term without a limit.")
    terms = [term for term in terms if term.limit is None]
    if terms and all(term.weight == 0 for term in terms):
        names = ", ".join(term.name for term in terms)
        raise ConfigError(f"Config key 'reward.terms': every term's weight is 0 ({names}), so every score would be 0 "
                          "and no update would train; expected at least one non-zero weight (a weight of 0 only logs "
                          "its term as reward/<name>).")
