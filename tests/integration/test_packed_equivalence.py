"""Packed (padding-free) passes compute what padded passes compute, in every stage.

Every forward pass of every stage goes through :func:`tether.models.forward.hidden_states`; with
:func:`tether.models.packing.set_padding_free` on, a padded batch's rows run as one sequence with
positions restarting per row and no attention across rows. Each test here runs one stage's own
function twice on the same model and batch, padded then packed, and compares its outputs at the
real positions and every parameter's gradient within :data:`ATOL` (fp32): SFT's loss, the reward
model's scores and Bradley-Terry loss, DPO's log-probs and loss, the RL passes (actor and
reference log-probs and entropies, a shared-trunk value head's values, the critic's values, the
reward's scores), each registered algorithm's actor loss and PPO's critic loss.

The models are random-init and tiny, built here (no downloads), of three shapes: GPT-2 (learned
position table, no last-layer trimming), Qwen2 (grouped-query attention, q/k/v bias) and Llama;
SDPA attention, and eager for one shape. Rows have very different lengths: left-padded prompts
before right-padded responses (a rollout, a DPO pair batch) and right-padded rows (SFT, the
reward model). Values at padded positions are not defined the same way in both modes and are
never compared. Also: LoRA-wrapped models, the last layer trimmed and in full (whichever mode
runs first), gradient checkpointing, tether's CPU fp32 attention (and bf16 autocast), and two
models built from one config object whose passes interleave (parallel roles).

Each test checks that its padded pass ran padded rows and its packed pass one packed sequence,
so a model that silently fell back to padding would fail here, not pass trivially. A whole PPO
run packed vs padded is in test_ppo_equivalence.py (``padding_free``).
"""

from __future__ import annotations

import random
from contextlib import contextmanager
from dataclasses import dataclass
from types import SimpleNamespace

import pytest
import torch
from torch import Tensor

from tether.algorithms import ALGORITHMS
from tether.algorithms.registry import build_algorithm
from tether.algos import bradley_terry_loss, masked_mean
from tether.algos.dpo import dpo_loss
from tether.config import PPOConfig, load_config
from tether.data import collate_left, collate_right
from tether.loops.dpo import pair_logprobs
from tether.loops.reward_model import pair_scores
from tether.loops.sft import sft_batch_loss
from tether.models import last_layer
from tether.models.forward import last_token_scores, response_values
from tether.models.loading import enable_gradient_checkpointing
from tether.models.lora import unwrap
from tether.models.packing import set_padding_free
from tether.roles.critic import ValueHead
from tether.roles.policy import PolicyWithValueHead, causal_lm, policy_forward
from tether.types import Rollout

#: fp32: packed and padded passes differ by float summation order only.
ATOL = 1e-5
VOCAB, PAD, HIDDEN = 64, 0, 32
TEMPERATURE = 0.7

#: (architecture, attention implementation): the three shapes tether loads, and eager once.
MODELS = [("gpt2", "sdpa"), ("qwen2", "sdpa"), ("llama", "sdpa"), ("qwen2", "eager")]
MODEL_IDS = [f"{arch}-{attn}" for arch, attn in MODELS]
#: Shapes whose last decoder layer can run at the read positions only (tether.models.last_layer).
TRIMMED = ("qwen2", "llama")

# Rows of very different lengths (token counts; a prompt of 1 is BOS alone).
SFT_ROWS = [(2, 3), (20, 11), (6, 1), (9, 25)]  # (prompt, response): right-padded rows of 5 to 34 tokens
ROLLOUT_ROWS = [(1, 9), (13, 1), (5, 14), (8, 4)]  # (prompt, response): left- and right-padded
PAIR_ROWS = [(3, 10, 1), (15, 2, 12), (7, 6, 4)]  # (prompt, chosen, rejected)


# -- models --------------------------------------------------------------------------------------

def model_config(arch: str, attn: str):
    """A tiny fp32 config of ``arch`` with dropout off and one scalar label."""
    from transformers import GPT2Config, LlamaConfig, Qwen2Config

    common = dict(vocab_size=VOCAB, pad_token_id=PAD, bos_token_id=1, eos_token_id=2, num_labels=1)
    if arch == "gpt2":
        config = GPT2Config(n_embd=HIDDEN, n_layer=2, n_head=4, n_positions=128, resid_pdrop=0.0, embd_pdrop=0.0,
                            attn_pdrop=0.0, summary_first_dropout=0.0, **common)
    elif arch == "qwen2":  # 4 query heads over 2 key/value heads; q/k/v projections with bias
        config = Qwen2Config(hidden_size=HIDDEN, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                             intermediate_size=48, max_position_embeddings=128, tie_word_embeddings=False,
                             use_sliding_window=False, **common)
    else:
        config = LlamaConfig(hidden_size=HIDDEN, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                             intermediate_size=48, max_position_embeddings=128, tie_word_embeddings=False, **common)
    config._attn_implementation = attn
    return config


def build(arch: str, attn: str, scalar: bool = False, seed: int = 0):
    """A fresh random-init causal LM (or ``*ForSequenceClassification``) in eval mode."""
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

    torch.manual_seed(seed)
    cls = AutoModelForSequenceClassification if scalar else AutoModelForCausalLM
    return cls.from_config(model_config(arch, attn), dtype=torch.float32).eval()


def with_value_head(lm, seed: int = 5) -> PolicyWithValueHead:
    """The causal LM with a shared-trunk value head of random (non-zero) weights."""
    head = ValueHead(HIDDEN)
    torch.manual_seed(seed)
    torch.nn.init.normal_(head.score.weight, std=0.1)
    torch.nn.init.normal_(head.score.bias, std=0.1)
    return PolicyWithValueHead(lm, head).eval()


def with_lora(model, scalar: bool = False):
    """``model`` wrapped in peft LoRA adapters with random (non-zero) A and B."""
    from peft import LoraConfig, get_peft_model

    from tether.models.lora import quiet_peft

    gpt2 = model.config.model_type == "gpt2"  # Conv1D layers: weights stored (in, out)
    targets = ["c_attn", "c_proj"] if gpt2 else ["q_proj", "v_proj", "o_proj"]
    config = LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=targets, init_lora_weights=False,
                        task_type="SEQ_CLS" if scalar else "CAUSAL_LM", fan_in_fan_out=gpt2)
    torch.manual_seed(7)
    with quiet_peft():
        return get_peft_model(model, config).eval()


# -- batches -------------------------------------------------------------------------------------

def tokens(rng: random.Random, n: int) -> list[int]:
    return [rng.randrange(4, VOCAB) for _ in range(n)]


def sft_batch(seed: int = 1) -> dict:
    """Right-padded SFT rows with loss on the response tokens only."""
    rng = random.Random(seed)
    rows = [(tokens(rng, p), tokens(rng, r)) for p, r in SFT_ROWS]
    return collate_right([p + r for p, r in rows], PAD, [[0] * len(p) + [1] * len(r) for p, r in rows])


def rollout(seed: int = 2, rows=ROLLOUT_ROWS) -> Rollout:
    """Left-padded prompts and right-padded responses, built as DPO's ``pair_logprobs`` builds them."""
    rng = random.Random(seed)
    prompts, responses = [tokens(rng, p) for p, _ in rows], [tokens(rng, r) for _, r in rows]
    prompt_ids, prompt_mask = collate_left(prompts, PAD)
    resp = collate_right(responses, PAD)
    return Rollout(prompt_ids, prompt_mask, resp["input_ids"], resp["attention_mask"],
                   ended=torch.ones(len(rows), dtype=torch.bool), prompts=[""] * len(rows),
                   responses=[""] * len(rows))


def pairs(seed: int = 3) -> list:
    """Preference pairs with the fields the reward-model and DPO stages read."""
    rng = random.Random(seed)
    return [SimpleNamespace(prompt_ids=tokens(rng, p), chosen_ids=tokens(rng, c), rejected_ids=tokens(rng, r))
            for p, c, r in PAIR_ROWS]


def test_batches_are_padded_on_both_sides():
    """The batches exercise what packing removes: padding on the left, on the right, and lots of it."""
    ro = rollout()
    assert (ro.prompt_mask == 0).any() and (ro.response_mask == 0).any()
    mask = sft_batch()["attention_mask"]
    assert float(1 - mask.float().mean()) > 0.3  # over 30 % padding


# -- running a stage function padded and packed --------------------------------------------------

@dataclass
class Pass:
    """One mode's results: named (output, real-position mask or None) and each parameter's gradient."""

    outputs: dict[str, tuple[Tensor, Tensor | None]]
    grads: dict[str, Tensor]
    trunk_batches: list[int]  # the batch dimension of each decoder-trunk call


@contextmanager
def trunk_calls(module):
    """Records the batch dimension of every call of ``module``'s decoder trunk."""
    lm = causal_lm(module) if isinstance(module, PolicyWithValueHead) else unwrap(module)
    seen: list[int] = []

    def hook(_, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        embeds = kwargs.get("inputs_embeds")
        seen.append((ids if ids is not None else embeds).shape[0])

    handle = lm.base_model.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        yield seen
    finally:
        handle.remove()


def run_mode(module, packed: bool, compute) -> Pass:
    """``compute(module) -> (outputs, loss or None)`` with padding-free passes on or off; the loss's
    backward gives the gradients."""
    set_padding_free(module, packed)
    module.zero_grad(set_to_none=True)
    with trunk_calls(module) as seen:
        outputs, loss = compute(module)
        if loss is not None:
            loss.backward()
    grads = {name: p.grad.detach().clone() for name, p in module.named_parameters() if p.grad is not None}
    return Pass({k: (v.detach(), m) for k, (v, m) in outputs.items()}, grads, list(seen))


def max_diff(got: Tensor, want: Tensor, mask: Tensor | None = None) -> float:
    """The largest |got - want| (at ``mask``'s real positions); inf when shapes differ, NaN when either is."""
    if got.shape != want.shape:
        return float("inf")
    if mask is not None:
        got, want = got[mask.bool()], want[mask.bool()]
    return float((got - want).abs().max()) if got.numel() else 0.0


def assert_modes_agree(module, compute, where: str, rows: int, expect_grads: bool = True,
                       packed_first: bool = False) -> tuple[Pass, Pass]:
    """Run ``compute`` padded then packed (``packed_first``: the other way round); every output and
    gradient agrees within ATOL.

    ``rows``: the batch's row count, to check that the padded pass ran rows and the packed pass
    ran them as one packed sequence. Failures name the tensor, the stage and model (``where``)
    and the largest absolute difference.
    """
    if packed_first:
        packed = run_mode(module, True, compute)
        padded = run_mode(module, False, compute)
    else:
        padded = run_mode(module, False, compute)
        packed = run_mode(module, True, compute)
    assert padded.trunk_batches and all(b > 1 for b in padded.trunk_batches), \
        f"{where}: padding_free=false ran trunk batches {padded.trunk_batches}, expected {rows}-row padded batches"
    assert any(b == 1 for b in packed.trunk_batches), \
        f"{where}: padding_free=true never packed the {rows} rows (trunk batches {packed.trunk_batches})"
    assert padded.outputs.keys() == packed.outputs.keys()
    failures = []
    for name, (want, mask) in padded.outputs.items():
        diff = max_diff(packed.outputs[name][0], want, mask)
        if not diff <= ATOL:
            failures.append(f"{name}: max abs diff {diff:.3e}")
    assert padded.grads.keys() == packed.grads.keys(), \
        f"{where}: parameters with gradients differ: {sorted(set(padded.grads) ^ set(packed.grads))}"
    if expect_grads:
        assert padded.grads, f"{where}: no parameter received a gradient"
    for name, want in padded.grads.items():
        diff = max_diff(packed.grads[name], want)
        if not diff <= ATOL:
            failures.append(f"grad {name}: max abs diff {diff:.3e} (largest |grad| {float(want.abs().max()):.2e})")
    assert not failures, f"{where}: packed vs padded beyond atol {ATOL:g}:\n  " + "\n  ".join(failures)
    return padded, packed


def assert_trimmed_if_supported(model, arch: str, where: str) -> None:
    """The Llama-layout shapes ran their last layer at the read positions only (in both modes)."""
    if arch in TRIMMED:
        assert last_layer._VERIFIED.get(unwrap(model)) is True, f"{where}: the last layer was not trimmed"


# -- SFT -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("arch, attn", MODELS, ids=MODEL_IDS)
def test_sft_loss_and_gradients(arch, attn):
    model, batch = build(arch, attn), sft_batch()
    total = int(batch["loss_mask"][:, 1:].sum())

    def compute(m):
        loss = sft_batch_loss(m, batch, total)
        return {"sft loss": (loss, None)}, loss

    assert_modes_agree(model, compute, f"SFT on {arch}-{attn}", len(batch["input_ids"]))


# -- reward model --------------------------------------------------------------------------------

@pytest.mark.parametrize("arch, attn", MODELS, ids=MODEL_IDS)
def test_reward_model_scores_loss_and_gradients(arch, attn):
    model, batch = build(arch, attn, scalar=True), pairs()

    def compute(m):
        chosen, rejected = pair_scores(m, batch, PAD)
        loss = bradley_terry_loss(chosen, rejected)
        return {"chosen scores": (chosen, None), "rejected scores": (rejected, None), "BT loss": (loss, None)}, loss

    assert_modes_agree(model, compute, f"reward model on {arch}-{attn}", 2 * len(batch))
    assert_trimmed_if_supported(model, arch, f"reward model on {arch}-{attn}")


@pytest.mark.parametrize("arch, attn", MODELS, ids=MODEL_IDS)
def test_last_token_scores_of_a_rollout(arch, attn):
    """The RL reward role scores a rollout (padding on both sides) at each row's last real token."""
    model, ro = build(arch, attn, scalar=True), rollout()

    def compute(m):
        with torch.no_grad():
            return {"scores": (last_token_scores(m, ro.sequences, ro.attention_mask), None)}, None

    assert_modes_agree(model, compute, f"reward scores on {arch}-{attn}", len(ro), expect_grads=False)


# -- DPO -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("arch, attn", MODELS, ids=MODEL_IDS)
def test_dpo_logprobs_loss_and_gradients(arch, attn):
    model, batch = build(arch, attn), pairs()
    ref_chosen, ref_rejected = torch.tensor([-40.0, -9.0, -25.0]), torch.tensor([-5.0, -50.0, -18.0])

    def compute(m):
        chosen, rejected = pair_logprobs(m, batch, PAD)
        loss = dpo_loss(chosen, rejected, ref_chosen, ref_rejected, beta=0.1)
        outputs = {"chosen logprobs": (chosen, None), "rejected logprobs": (rejected, None), "DPO loss": (loss, None)}
        return outputs, loss

    assert_modes_agree(model, compute, f"DPO on {arch}-{attn}", 2 * len(batch))
    assert_trimmed_if_supported(model, arch, f"DPO on {arch}-{attn}")


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

def rl_config(name: str):
    """The algorithm's config at test size: KL as a loss term and an entropy bonus, so that every
    term of the actor loss has a gradient; two responses per prompt where the algorithm groups."""
    spec = ALGORITHMS[name]
    group = max(2, spec.min_group_size) if not spec.needs_critic else 1
    return load_config(PPOConfig, None, ["model.name_or_path=m", "prompts=p", "reward.models=[r]", f"algorithm={name}",
                                         f"group.size={group}", "kl.placement=loss", "ppo.entropy_coef=0.01",
                                         f"rollout.max_new_tokens={max(r for _, r in ROLLOUT_ROWS)}"])


def experience(name: str, module, ro: Rollout):
    """The algorithm's experience of ``ro``: old log-probs from a padded pass, moved off the current
    policy so that ratios differ from 1 and clipping engages; reference, values and scores drawn."""
    set_padding_free(module, False)
    with torch.no_grad():
        current = policy_forward(module, ro, TEMPERATURE, False, "none").logprobs
    gen = torch.Generator().manual_seed(11)
    mask = ro.response_mask
    old = (current + 0.3 * torch.randn(current.shape, generator=gen)) * mask
    ref = (old - 0.5 * torch.rand(current.shape, generator=gen)) * mask
    values = torch.randn(current.shape, generator=gen) * mask if ALGORITHMS[name].needs_critic else None
    scores = torch.randn(len(ro), generator=gen)
    exp, _ = build_algorithm(name, rl_config(name)).experience(ro, old, ref, values, scores, kl_coef=0.05)
    return exp


@pytest.mark.parametrize("name", list(ALGORITHMS))
@pytest.mark.parametrize("arch, attn", MODELS, ids=MODEL_IDS)
def test_actor_loss_of_every_algorithm(name, arch, attn):
    """Each registered algorithm's actor loss on policy_forward's output, as the actor's update
    applies it (PPO's with a shared-trunk value head, so its value term is in the loss too)."""
    lm, ro = build(arch, attn), rollout()
    module = with_value_head(lm) if ALGORITHMS[name].needs_critic else lm
    exp = experience(name, module, ro)
    loss_fn = build_algorithm(name, rl_config(name)).actor_loss(0.05)
    with_entropy = bool(getattr(loss_fn, "needs_entropy", False))

    def compute(m):
        out = policy_forward(m, exp.rollout, TEMPERATURE, with_entropy, "none")
        loss, _ = loss_fn(out, exp)
        return {f"{name} actor loss": (loss, None)}, loss

    assert_modes_agree(module, compute, f"{name} actor loss on {arch}-{attn}", len(ro))


@pytest.mark.parametrize("arch, attn", MODELS, ids=MODEL_IDS)
def test_ppo_critic_loss(arch, attn):
    critic, ro = build(arch, attn, scalar=True), rollout()
    exp = experience("ppo", with_value_head(build(arch, attn)), ro)
    loss_fn = build_algorithm("ppo", rl_config("ppo")).critic_loss()

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
    assert last_layer._VERIFIED.get(module.policy) is trim
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
