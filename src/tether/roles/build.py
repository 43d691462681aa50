"""The RL roles of a config: models loaded, put on their device with its speedups, wrapped in
engines, and given to roles. A placement calls this where the roles run (this process, for the
local placement); the loop never does."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import torch

from tether.config import PPOConfig
from tether.engines import (
    AdapterOffEngine,
    EngineSettings,
    InferenceEngine,
    OptimizerSpec,
    TrainingEngine,
    engine_settings,
    prepare_models,
)
from tether.errors import ModelError
from tether.models import context_length, last_layer, load_causal_lm, load_scalar_model, load_tokenizer
from tether.models.lora import trainable, unwrap
from tether.roles.critic import Critic, SharedTrunkCritic, ValueHead
from tether.roles.policy import Actor, PolicyWithValueHead, Reference
from tether.roles.reward import CallableReward, EnsembleReward, ModelReward, RewardSource, import_callable
from tether.rollout import engine_class

log = logging.getLogger(__name__)


@dataclass
class Roles:
    """The roles of an RL run, the policy's tokenizer, and each model's context length (positions,
    or None) by the name the config gives it (for length checks)."""

    actor: Actor | None
    reference: Reference | None
    critic: Critic | SharedTrunkCritic | None
    reward: RewardSource | None
    rollout: object | None  # a GenerationEngine sampling from the actor's weights
    tokenizer: object
    contexts: dict[str, int | None] = field(default_factory=dict)
    linear_backend: str = "aten"

    def placed(self) -> dict[str, object]:
        """The roles by the names a placement serves them under (those built: a worker of a Ray
        placement builds only its own group's)."""
        named = {"actor": self.actor, "reference": self.reference, "reward": self.reward, "rollout": self.rollout,
                 "critic": self.critic}
        return {name: role for name, role in named.items() if role is not None}


ROLE_NAMES = ("actor", "reference", "critic", "reward")


def role_names(cfg: PPOConfig) -> tuple[str, ...]:
    """The roles ``cfg``'s algorithm runs: all four, or no critic (grpo, rloo, reinforce_pp)."""
    return ROLE_NAMES if cfg.needs_critic else tuple(n for n in ROLE_NAMES if n != "critic")


def role_groups(cfg: PPOConfig, colocate: list[list[str]] = ()) -> list[tuple[str, ...]]:
    """The roles that must share a process, plus ``colocate``'s groups: the rollout engine samples
    from the actor's weights; a LoRA actor's base is the reference; a shared-trunk critic is a head
    on the actor; a LoRA critic's base is the reward model. Returns the groups (roles in
    :data:`ROLE_NAMES` order), the actor's group first."""
    names = role_names(cfg)
    parent = {name: name for name in names}

    def find(x):
        while parent[x] != x:
            x = parent[x]
        return x

    def join(a, b):
        parent[find(a)] = find(b)

    if cfg.lora.enabled and not cfg.reference:
        join("reference", "actor")
    if cfg.critic.shared_trunk and "critic" in names:
        join("critic", "actor")
    if shares_reward_base(cfg) and "critic" in names:
        join("reward", "critic")
    for group in colocate:
        group = [name for name in group if name in names]
        for name in group[1:]:
            join(name, group[0])
    groups: dict[str, list[str]] = {}
    for name in names:
        groups.setdefault(find(name), []).append(name)
    return sorted((tuple(g) for g in groups.values()), key=lambda g: ("actor" not in g, g))


def _same_vocab(tok_a, tok_b, name: str) -> None:
    if tok_a.get_vocab() != tok_b.get_vocab():
        raise ModelError(
            f"The {name} uses a different tokenizer from the policy; tether scores token ids "
            "directly, so the reference, the reward model and the critic must share the policy's tokenizer."
        )


def check_reference_tokenizer(cfg, tokenizer) -> None:
    """A separate ``reference`` (PPO's, DPO's) must read token ids as the policy does: its log-probs
    are taken of the policy's tokens, so a reference with another vocabulary would score other text."""
    if cfg.reference and cfg.reference not in (cfg.model.name_or_path, cfg.model.tokenizer):
        _same_vocab(tokenizer, load_tokenizer(cfg.reference, key="reference"), f"reference '{cfg.reference}'")


def critic_source(cfg: PPOConfig) -> tuple[str, str]:
    """The checkpoint a separate critic starts from and the config key that names it:
    critic.path; else, with critic.init=reward, the first reward model (its head already predicts
    the final score: Ouyang et al. 2022, sec. 3.5); else the policy (a fresh value head)."""
    if cfg.critic.path:
        return cfg.critic.path, "critic.path"
    if cfg.critic.init == "reward":
        return cfg.reward.models[0], "reward.models"
    return cfg.model.name_or_path, "model.name_or_path"


def build_reward(cfg: PPOConfig, tokenizer, settings: EngineSettings) -> RewardSource:
    """A reward model, an ensemble of them, a python callable, or a reward server (``reward.url``)."""
    rcfg = cfg.reward
    if rcfg.callable:
        return CallableReward(import_callable(rcfg.callable, "reward.callable"), rcfg.callable)
    if rcfg.url:
        from tether.roles.remote_reward import RemoteReward

        remote = RemoteReward(rcfg.url, rcfg.api_key)
        remote.check()
        return remote
    members = []
    for path in rcfg.models:
        _same_vocab(tokenizer, load_tokenizer(path, key="reward.models"), f"reward model '{path}'")
        model = load_scalar_model(path, tokenizer, cfg.model.dtype, key="reward.models")
        members.append(ModelReward(InferenceEngine(model, settings.device, settings.precision), path))
    if len(members) == 1:
        return members[0]
    return EnsembleReward(members, rcfg.combine, rcfg.std_coef)


def build_roles(cfg: PPOConfig, checkpoint: Path | None = None, needed=ROLE_NAMES) -> Roles:
    """Load the roles' models; with ``checkpoint`` the actor and critic come from it (resume: the
    full models, or the adapters on their bases under LoRA). ``needed``: build only these roles
    (a group of :func:`role_groups`; the rollout engine comes with the actor)."""
    needed = set(needed) & set(role_names(cfg))
    settings = engine_settings(cfg, cfg.ppo.compile_mode if cfg.ppo.compile else False)
    policy_path = cfg.model.name_or_path
    tokenizer = load_tokenizer(cfg.model.tokenizer or policy_path,
                               key="model.tokenizer" if cfg.model.tokenizer else "model.name_or_path")
    load = dict(tokenizer=tokenizer, dtype=cfg.model.dtype, trust_remote_code=cfg.model.trust_remote_code)
    full_actor = checkpoint is not None and not cfg.lora.enabled
    actor_model = load_causal_lm(str(checkpoint / "actor") if full_actor else policy_path, **load,
                                 key=None if full_actor else "model.name_or_path") if "actor" in needed else None
    # With LoRA and no separate reference, the reference is the actor's base (adapters off).
    shared_reference = cfg.lora.enabled and not cfg.reference
    if "reference" in needed:
        check_reference_tokenizer(cfg, tokenizer)
    reference_model = None if shared_reference or "reference" not in needed else load_causal_lm(
        cfg.reference or policy_path, **load, key="reference" if cfg.reference else "model.name_or_path")
    # With LoRA on a critic that starts from the (only) reward model, the reward model is the
    # critic's base with its adapters off: one copy of those weights too.
    if "reward" not in needed:
        reward = None
    elif shares_reward_base(cfg):
        _same_vocab(tokenizer, load_tokenizer(cfg.reward.models[0], key="reward.models"),
                    f"reward model '{cfg.reward.models[0]}'")
        reward = SHARED_WITH_CRITIC
    else:
        reward = build_reward(cfg, tokenizer, settings)
    adapters = {"actor": checkpoint / "actor" if checkpoint and cfg.lora.enabled else None,
                "critic": checkpoint / "critic" if checkpoint and cfg.critic.lora.enabled else None}
    if cfg.critic.shared_trunk or "critic" not in needed:
        # A resumed run's trained head; otherwise make_roles builds a fresh one.
        head = (ValueHead.from_pretrained(checkpoint / "critic", actor_model.config.hidden_size)
                if checkpoint and cfg.critic.shared_trunk else None)
        return make_roles(cfg, actor_model, reference_model, head, reward, tokenizer, settings, adapters, needed)
    # critic.init=reward: a trained head is expected (critic.path or the first reward model);
    # critic.init=policy: a fresh head (std 0.02) on critic.path or the policy is the point.
    critic_path, key = critic_source(cfg)
    if checkpoint is not None and not cfg.critic.lora.enabled:
        critic_path, key = str(checkpoint / "critic"), None
    critic_model = load_scalar_model(critic_path, head_init_std=0.02, new_head=cfg.critic.init == "policy",
                                     key=key, **load)
    return make_roles(cfg, actor_model, reference_model, critic_model, reward, tokenizer, settings, adapters, needed)


SHARED_WITH_CRITIC = "the critic's base"  # make_roles' reward: the LoRA critic's base, adapters off


def shares_reward_base(cfg: PPOConfig) -> bool:
    """The reward model is the LoRA critic's base with the adapters off: the critic starts from the
    one reward model (critic.init=reward, no critic.path) and trains adapters."""
    return (cfg.needs_critic and cfg.critic.lora.enabled and cfg.critic.init == "reward" and not cfg.critic.path
            and len(cfg.reward.models) == 1 and not cfg.critic.shared_trunk)


def _reward_members(reward) -> list[ModelReward]:
    if isinstance(reward, ModelReward):
        return [reward]
    if isinstance(reward, EnsembleReward):
        return [m for member in reward.members for m in _reward_members(member)]
    return []


def optimizer_specs(cfg: PPOConfig) -> tuple[OptimizerSpec, OptimizerSpec]:
    """The actor's and the critic's AdamW and schedule (constant after a linear warm-up)."""
    p = cfg.ppo
    total = p.iterations * p.epochs * (cfg.episodes // p.minibatch_size)
    common = dict(weight_decay=p.weight_decay, fused=p.fused_optimizer, schedule="constant",
                  warmup_steps=p.warmup_steps, total_steps=total, min_lr_ratio=1.0, max_grad_norm=p.max_grad_norm)
    groups = (("value_head", cfg.critic.lr),) if cfg.critic.shared_trunk else ()
    return OptimizerSpec(lr=p.actor_lr, groups=groups, **common), OptimizerSpec(lr=cfg.critic.lr, **common)


def vllm_engine(cfg: PPOConfig, tokenizer, actor, context: int | None):
    """A vLLM engine over the policy's initial checkpoint, its weights then pulled from ``actor``
    (merged, under LoRA) before the first rollout and after every update. The actor recomputes
    the rollout log-probs unless ``rollout.use_engine_logprobs`` (then the engine returns them)."""
    from tether.rollout.vllm_engine import VLLMGenerationEngine, VLLMOptions

    engine = VLLMGenerationEngine(cfg.model.name_or_path, tokenizer, VLLMOptions.from_config(cfg),
                                  capture=cfg.rollout.use_engine_logprobs, context=context)
    engine.weights_source = actor.sync_weights
    return engine


def make_roles(cfg: PPOConfig, actor_model, reference_model, critic_model, reward, tokenizer,
               settings: EngineSettings | None = None, adapters: dict | None = None, needed=ROLE_NAMES) -> Roles:
    """The roles over loaded models; ``reward`` is a :class:`RewardSource` or a scalar-head model.

    With ``critic.shared_trunk`` the critic is a value head on the actor: ``critic_model`` is
    that :class:`ValueHead`, or None or any other model, which is then replaced by a fresh head.
    With ``lora``, ``reference_model`` None means the actor's base with its adapters off;
    ``adapters`` ({"actor", "critic"}: a directory or None) are loaded instead of fresh ones.
    ``needed``: the roles to make (a group of :func:`role_groups`); the others are None.
    """
    needed = set(needed)
    settings = settings or engine_settings(cfg, cfg.ppo.compile_mode if cfg.ppo.compile else False)
    adapters = adapters or {}
    if isinstance(reward, torch.nn.Module):
        reward = ModelReward(InferenceEngine(reward, settings.device, settings.precision))
    if reward == SHARED_WITH_CRITIC and not (cfg.critic.lora.enabled and not cfg.critic.shared_trunk):
        raise ValueError("a reward shared with the critic's base needs LoRA on a separate critic (critic.lora.r > 0)")
    shared = cfg.critic.shared_trunk
    has_actor, has_critic = "actor" in needed, "critic" in needed and not shared
    if shared and has_actor and not isinstance(critic_model, ValueHead):
        critic_model = ValueHead(actor_model.config.hidden_size)
    if "reference" in needed and reference_model is None and not cfg.lora.enabled:
        raise ValueError("reference_model None needs LoRA on the actor (lora.r > 0): the reference is its base")
    trunks = [*([actor_model] if has_actor else []), *([reference_model] if reference_model is not None else []),
              *(m.model for m in _reward_members(reward)), *([critic_model] if has_critic else [])]
    if not cfg.ppo.trim_last_layer:
        for model in trunks:
            last_layer.run_in_full(model)
    prepared = prepare_models(trunks, settings)
    actor_spec, critic_spec = optimizer_specs(cfg)
    engine = dict(device=settings.device, precision=settings.precision, on_nonfinite=settings.on_nonfinite,
                  compile=settings.compile)
    actor = reference = critic = rollout = None
    contexts = {}
    if has_actor:
        actor_model = trainable(actor_model, cfg.lora, adapters.get("actor"), cfg.gradient_checkpointing, False, "lora")
        trained = PolicyWithValueHead(actor_model, critic_model) if shared else actor_model
        actor_engine = TrainingEngine(trained, actor_spec, strategy=cfg.distributed.strategy, **engine)
        captured = cfg.rollout.use_engine_logprobs if cfg.rollout.engine == "vllm" else cfg.rollout.capture_logprobs
        actor = Actor(actor_engine, cfg.rollout.temperature, use_captured=captured)
        critic = SharedTrunkCritic(actor) if shared else None
        contexts[cfg.model.name_or_path] = context_length(unwrap(actor_model))
        if cfg.rollout.engine == "vllm":
            rollout = vllm_engine(cfg, tokenizer, actor, contexts[cfg.model.name_or_path])
        else:
            rollout = engine_class(cfg.rollout.engine)(unwrap(actor_model), tokenizer,
                                                      autocast=settings.precision.autocast,
                                                      capture=cfg.rollout.capture_logprobs,
                                                      decode_context=prepared.decode_context)
    if has_critic:
        critic_model = trainable(critic_model, cfg.critic.lora, adapters.get("critic"),
                                 cfg.critic.gradient_checkpointing, True, "critic.lora")
        critic = Critic(TrainingEngine(critic_model, critic_spec,
                                       strategy=cfg.critic.strategy or cfg.distributed.strategy, **engine))
        contexts[cfg.critic.path or "the critic"] = context_length(unwrap(critic_model))
    if reward == SHARED_WITH_CRITIC:
        name = cfg.reward.models[0] if cfg.reward.models else "reward model"
        reward = ModelReward(AdapterOffEngine(critic.engine, critic_model), name)
    if "reference" in needed:
        if reference_model is None:
            reference_engine = AdapterOffEngine(actor.engine, actor_model)
        else:
            reference_engine = InferenceEngine(reference_model, settings.device, settings.precision)
            contexts[cfg.reference or cfg.model.name_or_path] = context_length(reference_model)
        reference = Reference(reference_engine, cfg.rollout.temperature)
    for member in _reward_members(reward):
        contexts[member.name] = context_length(member.model)
    return Roles(actor, reference, critic, reward, rollout, tokenizer, contexts, prepared.linear_backend)
