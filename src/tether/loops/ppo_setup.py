"""Build the four PPO roles, the prompt set and the score normaliser from a :class:`PPOConfig`;
the seeded order in which iterations draw prompts."""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass
from pathlib import Path

import torch

from tether.algos import AdaptiveKLController, FixedKLController, RunningMoments
from tether.config import PPOConfig
from tether.data import encode_prompt, load_records, prompt_examples, prompt_text
from tether.errors import DataError, ModelError
from tether.loops.common import LengthLimit, fit_to_context, notice
from tether.models import load_causal_lm, load_scalar_model, load_tokenizer
from tether.models import last_layer
from tether.models.forward import bf16_native, use_fp32_attention
from tether.models.linear_backend import resolve_backend, use_onednn_linears
from tether.roles import (
    CallableReward,
    CriticRole,
    EnsembleReward,
    ModelReward,
    PolicyRole,
    RewardSource,
    SharedTrunkCritic,
    ValueHead,
    import_callable,
)
from tether.rollout import HFGenerationEngine, LeanGenerationEngine, SamplingParams

log = logging.getLogger(__name__)


@dataclass
class Roles:
    actor: PolicyRole
    reference: PolicyRole
    critic: CriticRole | SharedTrunkCritic
    reward: RewardSource
    tokenizer: object
    engine: HFGenerationEngine | LeanGenerationEngine


def _same_vocab(tok_a, tok_b, name: str) -> None:
    if tok_a.get_vocab() != tok_b.get_vocab():
        raise ModelError(
            f"The {name} uses a different tokenizer from the policy; tether scores token ids "
            "directly, so the reward model and critic must share the policy's tokenizer."
        )


def build_reward(cfg: PPOConfig, tokenizer) -> RewardSource:
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
        members.append(ModelReward(model, path, cfg.ppo.autocast))
    if len(members) == 1:
        return members[0]
    return EnsembleReward(members, rcfg.combine, rcfg.std_coef)


def build_roles(cfg: PPOConfig, checkpoint: Path | None = None) -> Roles:
    """Load the four roles; with ``checkpoint`` the actor and critic come from it (resume)."""
    policy_path = cfg.model.name_or_path
    tokenizer = load_tokenizer(cfg.model.tokenizer or policy_path,
                               key="model.tokenizer" if cfg.model.tokenizer else "model.name_or_path")
    load = dict(tokenizer=tokenizer, dtype=cfg.model.dtype, trust_remote_code=cfg.model.trust_remote_code)
    actor_model = load_causal_lm(str(checkpoint / "actor") if checkpoint else policy_path, **load,
                                 key=None if checkpoint else "model.name_or_path")
    reference_model = load_causal_lm(cfg.reference or policy_path, **load,
                                     key="reference" if cfg.reference else "model.name_or_path")
    reward = build_reward(cfg, tokenizer)
    if cfg.critic.shared_trunk:
        # A resumed run's trained head; otherwise make_roles builds a fresh one.
        head = ValueHead.from_pretrained(checkpoint / "critic", actor_model.config.hidden_size) if checkpoint else None
        return make_roles(cfg, actor_model, reference_model, head, reward, tokenizer)
    # critic.init=reward: a trained head is expected (critic.path or the first reward model);
    # critic.init=policy: a fresh head (std 0.02) on critic.path or the policy is the point.
    if cfg.critic.path:
        critic_path, key = cfg.critic.path, "critic.path"
    elif cfg.critic.init == "reward":
        # Critic from the RM: its head already predicts the final score (Ouyang et al. 2022, sec. 3.5).
        critic_path, key = cfg.reward.models[0], "reward.models"
    else:
        critic_path, key = policy_path, "model.name_or_path"
    if checkpoint is not None:
        critic_path, key = str(checkpoint / "critic"), None
    critic_model = load_scalar_model(critic_path, head_init_std=0.02, new_head=cfg.critic.init == "policy",
                                     key=key, **load)
    return make_roles(cfg, actor_model, reference_model, critic_model, reward, tokenizer)


def make_roles(cfg: PPOConfig, actor_model, reference_model, critic_model, reward, tokenizer) -> Roles:
    """The four roles over loaded models; ``reward`` is a :class:`RewardSource` or a scalar-head model.

    With ``critic.shared_trunk`` the critic is a value head on the actor: ``critic_model`` is
    that :class:`ValueHead`, or None or any other model, which is then replaced by a fresh head.
    """
    if cfg.critic.shared_trunk and not isinstance(critic_model, ValueHead):
        critic_model = ValueHead(actor_model.config.hidden_size)
    if isinstance(reward, torch.nn.Module):
        reward = ModelReward(reward, autocast=cfg.ppo.autocast)
    temperature, autocast, capture = cfg.rollout.temperature, cfg.ppo.autocast, cfg.rollout.capture_logprobs
    if autocast == "bf16" and next(actor_model.parameters()).device.type == "cpu" and not bf16_native():
        log.warning("ppo.autocast=bf16 on a CPU without native bf16 (AVX512-BF16/AMX): it will be emulated "
                    "and run slower than fp32.")
    engine_cls = LeanGenerationEngine if cfg.rollout.engine == "lean" else HFGenerationEngine
    compile = cfg.ppo.compile_mode if cfg.ppo.compile else False
    trunks = [actor_model, reference_model, *_reward_models(reward)]
    if not cfg.critic.shared_trunk:
        trunks.append(critic_model)
    if autocast == "bf16":
        # bf16 SDPA is slower than fp32 SDPA on CPU (and less exact): attention stays fp32.
        for model in trunks:
            use_fp32_attention(model)
    if not cfg.ppo.trim_last_layer:
        for model in trunks:
            last_layer.run_in_full(model)
    backend = resolve_backend(cfg.ppo.linear_backend, autocast)
    if cfg.ppo.linear_backend == "auto":
        log.info("ppo.linear_backend=auto: %s on this CPU.", backend)
    if backend == "onednn":
        if compile:
            log.info("ppo.compile is on: linear layers stay on aten (ppo.linear_backend=onednn ignored).")
        else:
            for model in trunks:
                use_onednn_linears(model)
    actor = PolicyRole(actor_model, temperature, trainable=True, autocast=autocast, use_captured=capture,
                       compile=compile)
    if cfg.critic.shared_trunk:
        critic = SharedTrunkCritic(actor, critic_model.to(next(actor_model.parameters()).device))
    else:
        critic = CriticRole(critic_model, autocast, compile=compile)
    return Roles(
        actor=actor,
        reference=PolicyRole(reference_model, temperature, trainable=False, autocast=autocast),
        critic=critic,
        reward=reward,
        tokenizer=tokenizer,
        engine=engine_cls(actor_model, tokenizer, autocast=autocast, capture=capture),
    )


def _reward_members(reward) -> list[ModelReward]:
    if isinstance(reward, ModelReward):
        return [reward]
    if isinstance(reward, EnsembleReward):
        return [m for member in reward.members for m in _reward_members(member)]
    return []


def _reward_models(reward) -> list:
    return [member.model for member in _reward_members(reward)]


@dataclass
class PromptSet:
    ids: list[list[int]]  # token ids per prompt, chat template applied
    texts: list[str]  # plain text per prompt, for judges and logs
    dropped_long: int


def load_prompt_set(source: str, split: str, tokenizer, chat_template: str, max_length: int | LengthLimit,
                    limit: int | None = None, key: str = "prompts") -> PromptSet:
    """Encoded prompts of ``source`` (config ``key``); longer than ``max_length`` tokens: dropped, counted."""
    cap = max_length if isinstance(max_length, LengthLimit) else LengthLimit(max_length)
    examples = prompt_examples(load_records(source, split, key=key))
    if limit:
        examples = examples[:limit]
    ids, texts, dropped = [], [], 0
    for ex in examples:
        encoded = encode_prompt(ex.prompt, tokenizer, chat_template)
        if len(encoded) > cap.tokens:
            dropped += 1
            continue
        ids.append(encoded)
        texts.append(prompt_text(ex.prompt))
    why = f" ({cap.capped_by})" if cap.capped_by else ""
    if not ids:
        raise DataError(f"'{source}' ({key}): no prompt is within rollout.max_prompt_length={cap.tokens} tokens{why}.")
    if cap.capped_by and dropped:
        notice(f"{dropped} of {len(examples)} prompts of '{source}' ({key}) dropped as longer than {cap.tokens} "
               f"tokens{why}.")
    return PromptSet(ids, texts, dropped)


def prompt_limit(cfg: PPOConfig, roles: Roles) -> LengthLimit:
    """rollout.max_prompt_length, capped so that a prompt and rollout.max_new_tokens fit every model."""
    models = {cfg.model.name_or_path: roles.actor.model, (cfg.reference or cfg.model.name_or_path): roles.reference.model}
    if not cfg.critic.shared_trunk:
        models[cfg.critic.path or "the critic"] = roles.critic.model
    for member in _reward_members(roles.reward):
        models[member.name] = member.model
    return fit_to_context(cfg.rollout.max_prompt_length, "rollout.max_prompt_length", models,
                          cfg.rollout.max_new_tokens, "rollout.max_new_tokens")


def sampling_params(cfg: PPOConfig) -> SamplingParams:
    r = cfg.rollout
    return SamplingParams(r.max_new_tokens, r.min_new_tokens, r.temperature, r.top_k, r.top_p)


def kl_controller(cfg: PPOConfig):
    k = cfg.kl
    if k.controller == "adaptive":
        return AdaptiveKLController(k.coef, k.target, k.horizon)
    return FixedKLController(k.coef)


class ScoreNormalizer:
    """Scale scores by the first batch's (``first_batch``) or a running (``running``) mean/std."""

    def __init__(self, mode: str):
        self.mode = mode
        self.moments = RunningMoments()
        self.frozen: tuple[float, float] | None = None

    def __call__(self, scores: torch.Tensor) -> torch.Tensor:
        if self.mode == "none":
            return scores
        if self.mode == "first_batch":
            if self.frozen is None:
                std = float(scores.std()) if scores.numel() > 1 else 1.0
                self.frozen = (float(scores.mean()), std if std > 1e-6 else 1.0)
            mean, std = self.frozen
        else:
            self.moments.update(scores)
            mean, std = self.moments.mean, max(self.moments.std, 1e-6)
        return (scores - mean) / std

    def state_dict(self) -> dict:
        return {"mode": self.mode, "frozen": self.frozen, "moments": self.moments.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.frozen = tuple(state["frozen"]) if state["frozen"] is not None else None
        self.moments.load_state_dict(state["moments"])


def build_evaluator(cfg: PPOConfig, roles: Roles, max_length: LengthLimit | None = None):
    """The held-out evaluator of ``cfg.eval`` (None when no prompts are configured)."""
    from tether.eval.held_out import HeldOutEvaluator

    if not cfg.eval.prompts:
        return None
    held = load_prompt_set(cfg.eval.prompts, "test", roles.tokenizer, cfg.model.chat_template,
                           max_length or cfg.rollout.max_prompt_length, limit=cfg.eval.max_prompts, key="eval.prompts")
    judge = import_callable(cfg.eval.judge, "eval.judge") if cfg.eval.judge else None
    return HeldOutEvaluator(held.ids, held.texts, sampling_params(cfg), cfg.run.seed, roles.reward, judge)


def iteration_seed(seed: int, iteration: int) -> int:
    """The torch seed of iteration ``iteration``: every draw of an iteration derives from it."""
    return (seed * 1_000_003 + iteration * 7919) % (2**63 - 1)


def prompt_indices(n: int, batch_size: int, iteration: int, seed: int) -> list[int]:
    """Indices of iteration ``iteration``'s prompts: consecutive slices of per-pass shuffles."""
    orders: dict[int, list[int]] = {}
    out = []
    for k in range(iteration * batch_size, (iteration + 1) * batch_size):
        pass_idx, j = divmod(k, n)
        if pass_idx not in orders:
            orders[pass_idx] = random.Random(seed * 1_000_003 + pass_idx).sample(range(n), n)
        out.append(orders[pass_idx][j])
    return out
