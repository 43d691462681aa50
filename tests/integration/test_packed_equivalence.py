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
so a model that silently fell back to padding would fail here, not pass trivially. The RL passes,
every algorithm's losses, LoRA, trimming, checkpointing and fp32 attention are in
test_packed_equivalence_rl.py (models, batches and the comparison: packing_helpers.py); a whole
PPO run packed vs padded is in test_ppo_equivalence.py (``padding_free``).
"""

from __future__ import annotations

import pytest
import torch
from packing_helpers import (
    MODEL_IDS,
    MODELS,
    PAD,
    assert_modes_agree,
    assert_trimmed_if_supported,
    build,
    pairs,
    rollout,
    sft_batch,
)
from tether.algos import bradley_terry_loss
from tether.algos.dpo import dpo_loss
from tether.objectives.reward_model import pair_scores
from tether.objectives.shared import sft_batch_loss
from tether.objectives.shared import pair_logprobs
from tether.models.forward import last_token_scores

def test_batches_are_padded_on_both_sides():
    """The batches exercise what packing removes: padding on the left, on the right, and lots of it."""
    ro = rollout()
    assert (ro.prompt_mask == 0).any() and (ro.response_mask == 0).any()
    mask = sft_batch()["attention_mask"]
    assert float(1 - mask.float().mean()) > 0.3  # over 30 % padding


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
