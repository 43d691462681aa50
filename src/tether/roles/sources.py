"""Where each RL role's model comes from, checked: the reference reads the policy's token ids,
the critic starts from ``critic.path``, a reward model or the policy, and the reward is a model,
an ensemble, a python callable, a reward server, or the LoRA critic's own base."""

from __future__ import annotations

from tether.config import PPOConfig
from tether.engines import EngineSettings, InferenceEngine
from tether.errors import ModelError
from tether.models import load_scalar_model, load_tokenizer
from tether.roles.reward import CallableReward, EnsembleReward, ModelReward, RewardSource
from tether.targets import import_callable


def same_vocab(tok_a, tok_b, name: str) -> None:
    """A model scoring the policy's token ids must read them as the policy does (the same vocabulary)."""
    if tok_a.get_vocab() != tok_b.get_vocab():
        raise ModelError(
            f"The {name} uses a different tokenizer from the policy; tether scores token ids "
            "directly, so the reference, the reward model and the critic must share the policy's tokenizer."
        )


def check_reference_tokenizer(cfg, tokenizer) -> None:
    """A separate ``reference`` (PPO's, DPO's) must read token ids as the policy does: its log-probs
    are taken of the policy's tokens, so a reference with another vocabulary would score other text."""
    if cfg.reference and cfg.reference not in (cfg.model.name_or_path, cfg.model.tokenizer):
        same_vocab(tokenizer, load_tokenizer(cfg.reference, key="reference"), f"reference '{cfg.reference}'")


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
        same_vocab(tokenizer, load_tokenizer(path, key="reward.models"), f"reward model '{path}'")
        model = load_scalar_model(path, tokenizer, cfg.model.dtype, key="reward.models",
                                  attn_implementation=cfg.model.attn_implementation)
        members.append(ModelReward(InferenceEngine(model, settings.device, settings.precision), path))
    if len(members) == 1:
        return members[0]
    return EnsembleReward(members, rcfg.combine, rcfg.std_coef)


SHARED_WITH_CRITIC = "the critic's base"  # make_roles' reward: the LoRA critic's base, adapters off


def shares_reward_base(cfg: PPOConfig) -> bool:
    """The reward model is the LoRA critic's base with the adapters off: the critic starts from the
    one reward model (critic.init=reward, no critic.path) and trains adapters."""
    return (cfg.needs_critic and cfg.critic.lora.enabled and cfg.critic.init == "reward" and not cfg.critic.path
            and len(cfg.reward.models) == 1 and not cfg.critic.shared_trunk)


def reward_members(reward) -> list[ModelReward]:
    """The reward models inside a reward source (an ensemble's, recursively); none for a callable
    or a server."""
    if isinstance(reward, ModelReward):
        return [reward]
    if isinstance(reward, EnsembleReward):
        return [m for member in reward.members for m in reward_members(member)]
    return []
