"""The RL algorithms by name: the one place an algorithm's name and its metadata are known.

Config validation, role building, the commands (one per entry), their help, model cards,
``tether compare``, the Python API (``tether.grpo``, ``tether.run``) and the tests read this
table. It imports no torch: ``tether --help`` lists the commands from it without loading an
algorithm's maths. An entry names its class as ``"module:Class"`` (imported when a run builds
it) or holds the class itself.

A third-party algorithm is one file that defines a class with the
:class:`~tether.algorithms.base.Algorithm` protocol and calls :func:`register_algorithm`; the
``TETHER_PLUGINS`` environment variable (comma-separated module names or ``.py`` paths) or an
installed package's ``tether.plugins`` entry point makes the CLI import it before it builds its
commands (:func:`tether.registry.plugins.load_plugins`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tether.common.errors import ConfigError
from tether.registry.plugins import PLUGINS_ENV, claim, load_plugins
from tether.common.targets import import_callable


@dataclass(frozen=True)
class AlgorithmSpec:
    """One RL algorithm on the shared roles.

    ``target``: the class (``"module:Class"`` or the class); its constructor takes the resolved
    :class:`~tether.config.RLConfig`. ``title``: its name in prose and charts. ``summary``: the
    command's one-line help. ``purpose``: what a model trained with it is, for its model card.
    ``needs_critic``: whether it trains a value model (the critic role and its keys exist only
    then). ``default_group_size`` / ``min_group_size``: responses sampled per prompt when
    ``group.size`` is unset, and the fewest it can learn from. ``trains_on``: the data key it
    reads. ``inert_keys``: config keys (or blocks) it never reads — set to anything but their
    default, the config is refused rather than silently ignored. ``config_block``: a block of the
    RL config only this algorithm reads (refused under the others). ``whole_groups``: its loss
    compares a prompt's responses with each other, so minibatches and micro-batches hold whole
    groups (the update shuffles groups, not rows). ``policy_loss``: the (ratio level, aggregation)
    that ``policy_loss.ratio_level`` and ``policy_loss.aggregation`` take when left null.
    ``dense_rewards``: its ``experience`` reads ``rollout.token_rewards`` (an environment's per-turn
    rewards) where they fall; an algorithm without it gets their episode total added to the score.
    ``process_advantages``: it reads ``group.advantage`` (process supervision: with ``process`` it
    reads the per-turn rewards where they fall, as with ``dense_rewards``); refused under the others.
    ``needs_reward``: it learns from a reward source (without one, as on-policy distillation, which
    learns from the reference role, its teacher, the run builds no reward role, every score is 0 and
    the ``reward`` block is refused). ``config_check``: ``"module:function"`` called with the
    resolved config after the shared checks (the algorithm's own rules), or None.
    """

    name: str
    target: object
    title: str
    summary: str
    purpose: str
    needs_critic: bool
    default_group_size: int = 1
    min_group_size: int = 1
    trains_on: str = "prompts"
    inert_keys: tuple[str, ...] = field(default_factory=tuple)
    config_block: str | None = None
    whole_groups: bool = False
    dense_rewards: bool = False
    process_advantages: bool = False
    policy_loss: tuple[str, str] = ("token", "token_mean")
    needs_reward: bool = True
    config_check: str | None = None

    def load(self) -> type:
        """The algorithm's class (its module imported on first use)."""
        if not isinstance(self.target, str):
            return self.target
        return import_callable(self.target, f"the algorithm {self.name!r}")


ALGORITHMS: dict[str, AlgorithmSpec] = {}
_BUILT_IN: set[str] = set()  # the names registered below, in this module: no plugin may take one

#: The algorithm of the demo pipeline, the preset and ``tether.ppo``'s default config.
DEFAULT_ALGORITHM = "ppo"

#: The commands and API functions that are not stages: no algorithm (whose name becomes both) may take one.
COMMANDS = frozenset({"demo", "eval", "compare", "pairs", "label", "iterate", "sweep", "report", "serve", "bench",
                      "launch", "run", "dry_run"})


def reserved_names() -> frozenset[str]:
    """Names an algorithm cannot take: the other commands, and every other stage's command and API name."""
    from tether.registry.stages import STAGES

    return COMMANDS | {n for spec in STAGES.values() for n in (spec.name, spec.api)}


def register_algorithm(spec: AlgorithmSpec) -> AlgorithmSpec:
    """Add ``spec`` to :data:`ALGORITHMS`. Its name becomes a command (``tether NAME``), an API
    function, a stage and a value of the config key ``algorithm``.

    A name is owned by the module that first registered it: the same module registering it again
    replaces its entry (a reloaded plugin), but a built-in algorithm's name, or another plugin's,
    is refused, so a plugin can never silently change what ``tether ppo`` runs."""
    reserved = reserved_names()
    if not spec.name.isidentifier() or spec.name in reserved:
        raise ConfigError(f"Algorithm name {spec.name!r}: expected a Python identifier that is not one of tether's "
                          f"commands ({', '.join(sorted(reserved))}).")
    if spec.min_group_size < 1 or spec.default_group_size < spec.min_group_size:
        raise ConfigError(f"Algorithm {spec.name!r}: default_group_size {spec.default_group_size} must be at least "
                          f"min_group_size {spec.min_group_size} (>= 1).")
    claim(ALGORITHMS, _BUILT_IN, "Algorithm", spec)
    ALGORITHMS[spec.name] = spec
    return spec


def algorithm_spec(name: str) -> AlgorithmSpec:
    """The registered entry of ``name``; a :class:`ConfigError` listing the choices otherwise."""
    load_plugins()
    if name not in ALGORITHMS:
        raise ConfigError(f"Config key 'algorithm' = {name!r}: expected one of {', '.join(ALGORITHMS)} (a plugin "
                          f"algorithm registers itself: see {PLUGINS_ENV} in docs/algorithms.md).")
    return ALGORITHMS[name]


def build_algorithm(name: str, cfg):
    """An instance of algorithm ``name`` for the resolved config ``cfg``."""
    return algorithm_spec(name).load()(cfg)


register_algorithm(AlgorithmSpec(
    "ppo", "tether.algorithms.ppo:PPO", "PPO",
    summary="PPO-RLHF: actor, reference, reward model and critic.",
    purpose="PPO-RLHF against a reward model, with a KL penalty to the starting policy",
    needs_critic=True, inert_keys=("policy_loss", "group.scale_by_std"), dense_rewards=True))
register_algorithm(AlgorithmSpec(
    "grpo", "tether.algorithms.grpo:GRPO", "GRPO",
    summary="GRPO: a group of responses per prompt, the group's mean reward as baseline; no critic.",
    purpose="GRPO against a reward model (group-mean baseline, no critic)",
    needs_critic=False, default_group_size=4, min_group_size=2, inert_keys=("rl.gamma",), process_advantages=True))
register_algorithm(AlgorithmSpec(
    "rloo", "tether.algorithms.rloo:RLOO", "RLOO",
    summary="RLOO: k responses per prompt, each one's baseline the others' mean reward; no critic.",
    purpose="RLOO against a reward model (leave-one-out baseline, no critic)",
    needs_critic=False, default_group_size=4, min_group_size=2, inert_keys=("rl.gamma", "group.scale_by_std"),
    policy_loss=("sequence_product", "sequence_mean")))  # the paper's estimator: one ratio and one loss per response
register_algorithm(AlgorithmSpec(
    "reinforce_pp", "tether.algorithms.reinforce_pp:ReinforcePP", "REINFORCE++",
    summary="REINFORCE++: PPO's per-token reward, returns normalised over the batch; no critic.",
    purpose="REINFORCE++ against a reward model (batch-normalised returns, no critic)",
    needs_critic=False, inert_keys=("group.scale_by_std",)))
register_algorithm(AlgorithmSpec(
    "online_dpo", "tether.algorithms.online_dpo:OnlineDPO", "Online DPO",
    summary="Online DPO: the best and worst of k samples per prompt, ranked by the reward, as a DPO pair.",
    purpose="online (iterative) DPO on its own samples ranked by a reward, against the reference (beta = kl.coef)",
    needs_critic=False, default_group_size=2, min_group_size=2, whole_groups=True,
    inert_keys=("rl.gamma", "group.scale_by_std", "policy_loss", "kl.placement", "kl.estimator", "rl.clip",
                "rl.entropy_coef", "rl.micro_batch_tokens", "rollout.is_correction",
                # A pair with a masked member would compare a response with nothing.
                "environment.mask_truncated")))
register_algorithm(AlgorithmSpec(
    "rs", "tether.algorithms.rejection_sampling:RejectionSampling", "Rejection sampling",
    summary="Rejection sampling: fine-tune on the best of N samples per prompt, scored by the reward.",
    purpose="rejection-sampling fine-tuning (best-of-N samples of the policy, scored by a reward, as SFT targets)",
    needs_critic=False, default_group_size=4, min_group_size=2, config_block="selection",
    inert_keys=("rl.gamma", "group.scale_by_std", "policy_loss", "rl.clip", "rl.entropy_coef",
                "rollout.is_correction")))
register_algorithm(AlgorithmSpec(
    "distill", "tether.algorithms.distill:OnPolicyDistillation", "On-policy distillation",
    summary="On-policy distillation: the student samples, a frozen teacher (reference) scores every token; "
            "per-token reverse KL or generalised JSD; no reward.",
    purpose="on-policy distillation of a teacher policy (the reference) into this one, on its own samples",
    needs_critic=False, needs_reward=False, config_block="distill",
    config_check="tether.config.distill:check_distill",
    # The KL to the reference is the objective itself (the reference is the teacher), not a leash.
    inert_keys=("rl.gamma", "group.scale_by_std", "kl")))
_BUILT_IN.update(ALGORITHMS)
