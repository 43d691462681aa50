"""Packed (padding-free) passes compute what padded passes compute in the RL stages: the actor's
and reference's log-probs and entropies, a shared-trunk value head's and the critic's values, each
registered algorithm's actor loss and PPO's critic loss; and across stages, LoRA models, the last
layer trimmed and in full, gradient checkpointing, tether's CPU fp32 attention, and models sharing
a config. How the comparison works: test_packed_equivalence.py."""

from __future__ import annotations

import pytest
import torch
from packing_helpers import (
    drifted_experience,
    rl_config,
    ATOL,
    MODEL_IDS,
    MODELS,
    PAD,
    ROLLOUT_ROWS,
    TEMPERATURE,
    TRIMMED,
    assert_modes_agree,
    as_episodes,
    assert_trimmed_if_supported,
    build,
    max_diff,
    model_config,
    pairs,
    rollout,
    run_mode,
    sft_batch,
    with_lora,
    with_value_head,
)
from tether.models.state import state_of
from tether.algorithms import ALGORITHMS
from tether.registry.algorithms import build_algorithm
from tether.algos import bradley_terry_loss, masked_mean
from tether.objectives.reward_model import pair_scores
from tether.objectives.shared import sft_batch_loss
from tether.models import last_layer
from tether.models.forward import response_values
from tether.models.loading import enable_gradient_checkpointing
from tether.models.packing import set_padding_free
from tether.roles.policy import policy_forward
from tether.types import Rollout

# -- RL passes -----------------------------------------------------------------------------------

@pytest.mark.parametrize("arch, attn", MODELS, ids=MODEL_IDS)
def test_policy_logprobs_entropies_and_shared_trunk_values(arch, attn):
    module, ro = with_value_head(build(arch, attn)), rollout()
    mask = ro.response_mask

    def compute(m):
        out = policy_forward(m, ro, TEMPERATURE, True, "none")
        loss = masked_mean(out.logprobs + out.entropy + out.values, mask)  # every output's gradient at once
        return {"logprobs": (out.logprobs, mask), "entropy": (out.entropy, mask), "values": (out.values, mask)}, loss

    assert_modes_agree(module, compute, f"policy_forward on {arch}-{attn}", len(ro))
    assert_trimmed_if_supported(module.policy, arch, f"policy_forward on {arch}-{attn}")


@pytest.mark.parametrize("arch, attn", MODELS, ids=MODEL_IDS)
def test_critic_values(arch, attn):
    model, ro = build(arch, attn, scalar=True), rollout()
    mask = ro.response_mask

    def compute(m):
        values = response_values(m, ro.sequences, ro.attention_mask, ro.num_prompt_tokens)
        return {"values": (values, mask)}, masked_mean(values.square(), mask)

    assert_modes_agree(model, compute, f"critic values on {arch}-{attn}", len(ro))


# -- each algorithm's actor loss, PPO's critic loss ---------------------------------------------

def config(name: str):
    return rl_config(name, f"rollout.max_new_tokens={max(r for _, r in ROLLOUT_ROWS)}")


def experience(name: str, module, ro: Rollout):
    """The algorithm's experience of ``ro``, its old log-probs from a padded pass."""
    set_padding_free(module, False)
    return drifted_experience(name, module, ro, config(name))


def assert_actor_loss_agrees(name: str, lm, ro: Rollout, where: str) -> None:
    """Algorithm ``name``'s actor loss on policy_forward's output, as the actor's update applies it
    (PPO's with a shared-trunk value head, so its value term is in the loss too), packed and padded."""
    module = with_value_head(lm) if ALGORITHMS[name].needs_critic else lm
    exp = experience(name, module, ro)
    loss_fn = build_algorithm(name, config(name)).actor_loss(0.05)
    with_entropy = bool(getattr(loss_fn, "needs_entropy", False))

    def compute(m):
        out = policy_forward(m, exp.rollout, TEMPERATURE, with_entropy, "none")
        loss, _ = loss_fn(out, exp)
        return {where: (loss, None)}, loss

    assert_modes_agree(module, compute, where, len(ro))


@pytest.mark.parametrize("name", list(ALGORITHMS))
@pytest.mark.parametrize("arch, attn", MODELS, ids=MODEL_IDS)
def test_actor_loss_of_every_algorithm(name, arch, attn):
    assert_actor_loss_agrees(name, build(arch, attn), rollout(), f"{name} actor loss on {arch}-{attn}")


@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_actor_loss_of_every_algorithm_on_episodes(name):
    """The same on multi-turn episodes (observation tokens inside the responses: action-mask holes)."""
    ro = as_episodes(rollout())
    assert (ro.loss_mask != ro.response_mask).any()
    assert_actor_loss_agrees(name, build("llama", "sdpa"), ro, f"{name} actor loss on episodes")


@pytest.mark.parametrize("arch, attn", MODELS, ids=MODEL_IDS)
def test_ppo_critic_loss(arch, attn):
    critic, ro = build(arch, attn, scalar=True), rollout()
    exp = experience("ppo", with_value_head(build(arch, attn)), ro)
    loss_fn = build_algorithm("ppo", config("ppo")).critic_loss()

    def compute(m):
        values = response_values(m, exp.rollout.sequences, exp.rollout.attention_mask, exp.rollout.num_prompt_tokens)
        loss, _ = loss_fn(values * exp.rollout.response_mask, exp)
        return {"PPO critic loss": (loss, None)}, loss

    assert_modes_agree(critic, compute, f"PPO critic loss on {arch}-{attn}", len(ro))


# -- LoRA and the last-layer trimming path --------------------------------------------------------

@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_lora_policy_and_sft(arch):
    """A LoRA-wrapped model (peft): log-probs, entropies and the adapters' gradients, and SFT's."""
    model, ro, batch = with_lora(build(arch, "sdpa")), rollout(), sft_batch()
    mask = ro.response_mask
    total = int(batch["loss_mask"][:, 1:].sum())

    def compute(m):
        out = policy_forward(m, ro, TEMPERATURE, True, "none")
        sft = sft_batch_loss(m, batch, total)
        loss = masked_mean(out.logprobs + out.entropy, mask) + sft
        return {"logprobs": (out.logprobs, mask), "entropy": (out.entropy, mask), "sft loss": (sft, None)}, loss

    _, packed = assert_modes_agree(model, compute, f"LoRA on {arch}-sdpa", len(ro))
    assert packed.grads and all("lora_" in name for name in packed.grads)


def test_lora_reward_model():
    model, batch = with_lora(build("qwen2", "sdpa", scalar=True), scalar=True), pairs()

    def compute(m):
        chosen, rejected = pair_scores(m, batch, PAD)
        loss = bradley_terry_loss(chosen, rejected)
        return {"chosen scores": (chosen, None), "rejected scores": (rejected, None)}, loss

    assert_modes_agree(model, compute, "LoRA reward model on qwen2-sdpa", 2 * len(batch))


@pytest.mark.parametrize("packed_first", [False, True], ids=["padded-first", "packed-first"])
@pytest.mark.parametrize("trim", [True, False], ids=["trimmed", "full"])
@pytest.mark.parametrize("arch", TRIMMED)
def test_last_layer_trimmed_and_full(arch, trim, packed_first):
    """Packed and padded agree whether the last layer runs at the read positions or in full, and
    whichever mode runs first (the one whose batch decides whether the model trims)."""
    module, ro = with_value_head(build(arch, "sdpa")), rollout()
    if not trim:
        last_layer.run_in_full(module.policy)
    mask = ro.response_mask

    def compute(m):
        out = policy_forward(m, ro, TEMPERATURE, False, "none")
        loss = masked_mean(out.logprobs + out.values, mask)
        return {"logprobs": (out.logprobs, mask), "values": (out.values, mask)}, loss

    where = f"last layer {'trimmed' if trim else 'full'} on {arch}, {'packed' if packed_first else 'padded'} first"
    mlp_tokens = []  # the token count the last layer's MLP runs on, per call
    last_layer.decoder_layers(module.policy)[-1].mlp.register_forward_hook(
        lambda _, args, out: mlp_tokens.append(args[0].shape[0] * args[0].shape[1]))
    assert_modes_agree(module, compute, where, len(ro), packed_first=packed_first)
    assert state_of(module.policy).last_layer is trim
    # Trimmed and packed, the last layer runs only at the read positions (P - 1 .. T - 2) that are real.
    read = int(ro.attention_mask[:, ro.num_prompt_tokens - 1:-1].sum())
    assert (read in mlp_tokens) is trim, (where, read, mlp_tokens)


# -- gradient checkpointing, tether's CPU attention under bf16 -----------------------------------

@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_gradient_checkpointing(arch):
    """With gradient checkpointing (training mode: the layers recompute in the backward, packed
    layout and all), SFT's and the policy's losses and gradients agree too."""
    model, ro, batch = build(arch, "sdpa"), rollout(), sft_batch()
    enable_gradient_checkpointing(model)  # as gradient_checkpointing=true does
    model.train()  # checkpointing runs in training mode; dropout is 0 in these configs
    mask, total = ro.response_mask, int(batch["loss_mask"][:, 1:].sum())

    def compute(m):
        out = policy_forward(m, ro, TEMPERATURE, True, "none")
        sft = sft_batch_loss(m, batch, total)
        loss = masked_mean(out.logprobs + out.entropy, mask) + sft
        return {"logprobs": (out.logprobs, mask), "entropy": (out.entropy, mask), "sft loss": (sft, None)}, loss

    assert_modes_agree(model, compute, f"gradient checkpointing on {arch}-sdpa", len(ro))


#: bf16 autocast rounds each matmul's output (8 bits of mantissa): packed and padded passes agree to
#: bf16 precision, not fp32's.
BF16_ATOL = 1e-2


@pytest.mark.parametrize("autocast", ["none", "bf16"])
def test_cpu_fp32_attention(autocast):
    """tether's CPU attention for bf16 autocast (:mod:`tether.engines.cpu.attention`) packs through
    its fp32 twin: the same results in fp32, and within bf16 precision under bf16 autocast."""
    from tether.engines.cpu.attention import use_fp32_attention

    module, ro = with_value_head(build("llama", "sdpa")), rollout()
    assert use_fp32_attention(module.policy)
    mask = ro.response_mask

    def compute(m):
        out = policy_forward(m, ro, TEMPERATURE, True, autocast)
        return {"logprobs": (out.logprobs, mask), "entropy": (out.entropy, mask), "values": (out.values, mask)}, None

    with torch.no_grad():
        padded = run_mode(module, False, compute)
        packed = run_mode(module, True, compute)
    assert any(b == 1 for b in packed.trunk_batches), packed.trunk_batches
    tolerance = ATOL if autocast == "none" else BF16_ATOL
    for name, (want, real) in padded.outputs.items():
        diff = max_diff(packed.outputs[name][0], want, real)
        assert diff <= tolerance, f"{name} under autocast={autocast}: max abs diff {diff:.3e} (atol {tolerance:g})"


# -- models that share one config object ---------------------------------------------------------

def test_models_sharing_a_config_pack_independently():
    """The benchmark builds its policy, critic and reward model from one config object; on parallel
    roles their passes interleave. Here the critic's first pass runs between two layers of the
    policy's packed pass (what a thread switch can do): both give what they give alone."""
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

    config = model_config("llama", "sdpa")
    torch.manual_seed(0)
    policy = AutoModelForCausalLM.from_config(config).eval()
    critic = AutoModelForSequenceClassification.from_config(config).eval()
    twin = AutoModelForSequenceClassification.from_config(model_config("llama", "sdpa")).eval()
    twin.load_state_dict(critic.state_dict())  # the critic's weights, its own config
    assert policy.config is critic.config and twin.config is not critic.config
    ro = rollout()
    mask = ro.response_mask

    def values(model):
        return response_values(model, ro.sequences, ro.attention_mask, ro.num_prompt_tokens)

    with torch.no_grad():
        policy_alone, critic_alone = policy_forward(policy, ro, TEMPERATURE, False, "none").logprobs, values(twin)
        seen = []
        policy.model.layers[0].register_forward_hook(lambda *_: seen.append(values(critic)) if not seen else None)
        policy_interleaved = policy_forward(policy, ro, TEMPERATURE, False, "none").logprobs
    assert seen, "the critic's pass did not run inside the policy's"
    failures = [f"{name}: max abs diff {diff:.3e}" for name, diff in
                (("policy log-probs", max_diff(policy_interleaved, policy_alone, mask)),
                 ("critic values", max_diff(seen[0], critic_alone, mask))) if not diff <= ATOL]
    assert not failures, "interleaved passes of two models sharing a config: " + "; ".join(failures)
