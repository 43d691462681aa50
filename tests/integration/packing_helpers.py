"""What the packed-vs-padded equivalence tests share: tiny random-init models of three shapes,
batches of very different row lengths, and running a stage function padded then packed."""

from __future__ import annotations

import random
from contextlib import contextmanager
from dataclasses import dataclass
from types import SimpleNamespace

import torch
from torch import Tensor

from tether.models.state import state_of
from tether.data import collate_left, collate_right
from tether.models.lora import unwrap
from tether.models.packing import set_padding_free
from tether.roles.critic import ValueHead
from tether.roles.policy import PolicyWithValueHead, causal_lm
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
        assert state_of(unwrap(model)).last_layer is True, f"{where}: the last layer was not trimmed"


# -- an RL experience whose ratios differ from 1 -------------------------------------------------

def rl_config(name: str, *extra: str):
    """Algorithm ``name``'s config at test size: KL as a loss term and an entropy bonus where the
    algorithm reads them, so that every term of the actor loss has a gradient; two responses per
    prompt where the algorithm groups."""
    from tether.algorithms import ALGORITHMS
    from tether.config import RLConfig, load_config

    spec = ALGORITHMS[name]
    group = 1 if spec.needs_critic else max(2, spec.min_group_size)
    def read(key: str) -> bool:  # neither the key nor its block is one the algorithm never reads
        return key not in spec.inert_keys and key.split(".")[0] not in spec.inert_keys

    terms = [t for t in ("kl.placement=loss", "rl.entropy_coef=0.01") if read(t.split("=")[0])]
    source = "reward.models=[r]" if spec.needs_reward else "reference=teacher"  # distill learns from a teacher
    return load_config(RLConfig, None, ["model.name_or_path=m", "prompts=p", source, f"algorithm={name}",
                                         f"group.size={group}", *terms, *extra])


def drifted_experience(name: str, module, ro: Rollout, cfg):
    """Algorithm ``name``'s experience of ``ro`` under ``module``'s current log-probs moved off by
    noise (so ratios differ from 1 and clipping engages); reference, values and scores drawn."""
    from tether.algorithms import ALGORITHMS
    from tether.registry.algorithms import build_algorithm
    from tether.roles.policy import policy_forward

    with torch.no_grad():
        current = policy_forward(module, ro, TEMPERATURE, False, "none").logprobs
    gen = torch.Generator().manual_seed(11)
    mask = ro.response_mask
    old = (current + 0.3 * torch.randn(current.shape, generator=gen)) * mask
    ref = (old - 0.5 * torch.rand(current.shape, generator=gen)) * mask
    values = torch.randn(current.shape, generator=gen) * mask if ALGORITHMS[name].needs_critic else None
    scores = torch.randn(len(ro), generator=gen)
    exp, _ = build_algorithm(name, cfg).experience(ro, old, ref, values, scores, kl_coef=0.05)
    return exp


def as_episodes(ro: Rollout) -> Rollout:
    """``ro`` as multi-turn episodes: in each response of 4 tokens or more, a run of tokens from a
    third of the way in is an observation (action mask 0: context, no loss), so every mask with a
    hole in it meets the packed and the padded passes, the token budgets and the partitions."""
    import dataclasses

    action = ro.response_mask.clone()
    for row, length in enumerate(ro.response_mask.sum(1).tolist()):
        if length >= 4:
            start = length // 3
            action[row, start:start + max(1, length // 4)] = 0
    return dataclasses.replace(ro, action_mask=action)
