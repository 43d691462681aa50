"""model.attn_implementation and model.padding_free reach every model an RL run loads: the
actor, the reference, the critic and the reward model."""

from __future__ import annotations

from tether.config import RLConfig, load_config
from tether.models.lora import unwrap
from tether.models.packing import padding_free
from tether.roles.build import build_roles


def test_every_role_runs_the_attention_and_packing_asked_for(policy_and_fresh_rm, tmp_path):
    paths = policy_and_fresh_rm
    cfg = load_config(RLConfig, None, [
        f"run.out={tmp_path / 'run'}", "run.device=cpu", "run.threads=1", f"model.name_or_path={paths['policy']}",
        f"prompts={paths['task'] / 'ppo_prompts.jsonl'}", f"reward.models=[{paths['rm']}]", "critic.init=reward",
        "rollout.batch_size=2", "rl.minibatch_size=2",
        "model.attn_implementation=eager", "model.padding_free=false",
    ])
    roles = build_roles(cfg)
    models = {"actor": roles.actor.engine.model, "reference": roles.reference.engine.model,
              "critic": roles.critic.engine.model, "reward": roles.reward.engine.model}
    for name, model in models.items():
        assert unwrap(model).config._attn_implementation == "eager", name
        assert padding_free(model) is False, name
