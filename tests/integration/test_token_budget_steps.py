"""Micro-batches by token budget (``optim.micro_batch_tokens``, ``rl.micro_batch_tokens``) change
the step's memory, not its maths: a batch split into token-budget bins gives the loss, stats and
gradients of the same batch in one micro-batch (fp32, up to float summation order), through each
stage's own loss and weighting; and ``tether sft`` runs with a budget.

SFT and the reward model run their stage's own role (built from the tiny task's random-init
model); the RL update runs the actor role's update with PPO's and GRPO's actor losses on a tiny
random Llama-shaped model with a shared-trunk value head; and the fixed-seed PPO run of
``test_ppo_equivalence.py`` with its minibatches binned by tokens is the same run.
"""

from __future__ import annotations

import random

import pytest
import torch

from bad_input_helpers import cli
from packing_helpers import drifted_experience, rl_config
from stage_helpers import rm_overrides, sft_overrides
from tether.registry.algorithms import build_algorithm
from tether.config import RewardModelConfig, SFTConfig, load_config
from tether.data import collate_left, collate_right
from tether.engines import OptimizerSpec, TrainingEngine
from tether.loops.micro_batches import rows_by_token_budget, split_by_token_budget
from tether.objectives.reward_model import build_rm_roles, rm_stage_inputs
from tether.objectives.sft import build_sft_roles, sft_stage_inputs
from tether.loops.supervised import padded_tokens, sequence_tokens
from tether.metrics.logger import read_metrics
from tether.roles.critic import ValueHead
from tether.roles.policy import Actor, PolicyWithValueHead
from tether.types import Rollout

pytestmark = pytest.mark.slow

#: fp32: a partition changes the float summation order only.
ATOL = 1e-6
ROWS = 16


def recorded_step(engine, step):
    """``step()`` (one optimiser step) with the gradients the optimiser saw, by parameter name;
    the model's weights are put back afterwards, so the next step starts from the same ones."""
    weights = {k: v.detach().clone() for k, v in engine.model.state_dict().items()}
    seen: dict[str, torch.Tensor] = {}
    names = {id(p): n for n, p in engine.model.named_parameters()}

    def hook(optimizer, args, kwargs):
        for group in optimizer.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    seen[names[id(p)]] = p.grad.detach().clone()

    handle = engine.optimizer.register_step_pre_hook(hook)
    try:
        result = step()
    finally:
        handle.remove()
        engine.model.load_state_dict(weights)
    return result, seen


def assert_same_grads(got: dict, want: dict, where: str) -> None:
    assert want and got.keys() == want.keys(), f"{where}: parameters with gradients differ"
    for name, grad in want.items():
        diff = float((got[name] - grad).abs().max())
        largest = float(grad.abs().max())
        assert diff <= ATOL, f"{where}: grad {name} differs by {diff:.2e} (largest |grad| {largest:.2e})"


# -- the supervised stages -------------------------------------------------------------------------

def supervised_role(stage: str, task, tmp_path):
    """(the stage's trained role as the stage builds it, its training rows) on the tiny task, clipping off."""
    extra = ["optim.max_grad_norm=null"]
    if stage == "sft":
        cfg = load_config(SFTConfig, None, sft_overrides(task, tmp_path / "sft", *extra))
        inputs = sft_stage_inputs(cfg)
        return build_sft_roles(cfg, inputs=inputs, total_steps=2).roles["policy"], inputs.train
    cfg = load_config(RewardModelConfig, None, rm_overrides(task, task / "base_model", tmp_path / "rm", *extra))
    inputs = rm_stage_inputs(cfg)
    torch.manual_seed(0)
    return build_rm_roles(cfg, inputs=inputs, total_steps=2).roles["reward"], inputs.train


@pytest.mark.parametrize("padded", [False, True], ids=["padding-free", "padded"])
@pytest.mark.parametrize("stage", ["sft", "rm"])
def test_a_supervised_batch_binned_by_tokens_steps_as_one_micro_batch(tiny_task, tmp_path, stage, padded):
    role, train = supervised_role(stage, tiny_task["dir"], tmp_path)
    rows = list(range(3, 3 + ROWS))
    length = padded_tokens if padded else sequence_tokens  # as the stage's loop bins them
    budget = 3 * max(length(train[r]) for r in rows)  # a few rows per micro-batch, a different number in each
    bins = rows_by_token_budget(rows, lambda r: length(train[r]), budget, padded)
    assert len(bins) >= 3 and sorted(r for b in bins for r in b) == rows

    whole, whole_grads = recorded_step(role.engine, lambda: role.update(rows, len(rows), 1))
    split, split_grads = recorded_step(role.engine, lambda: role.update(rows, bins, 1))
    where = f"{stage} in {len(bins)} micro-batches of {budget} tokens ({'padded' if padded else 'padding-free'})"
    assert_same_grads(split_grads, whole_grads, where)
    for key, value in whole["stats"].items():
        assert split["stats"][key] == pytest.approx(value, abs=ATOL), f"{where}: stat {key}"
    assert split["grad_norm"] == pytest.approx(whole["grad_norm"], abs=ATOL)


# -- the RL update -----------------------------------------------------------------------------------

VOCAB, PAD, HIDDEN, TEMPERATURE = 64, 0, 32, 0.7
ROLLOUT_ROWS = [(1, 9), (13, 1), (5, 14), (8, 4), (3, 3), (11, 7), (2, 12), (6, 2)]  # (prompt, response) tokens


def tiny_actor() -> Actor:
    """A random-init Llama-shaped policy with a shared-trunk value head, as the actor trains it."""
    from transformers import AutoModelForCausalLM, LlamaConfig

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=VOCAB, pad_token_id=PAD, hidden_size=HIDDEN, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=4, intermediate_size=48,
                         max_position_embeddings=128, tie_word_embeddings=False)
    lm = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    head = ValueHead(HIDDEN)
    torch.nn.init.normal_(head.score.weight, std=0.5)
    engine = TrainingEngine(PolicyWithValueHead(lm, head), OptimizerSpec(lr=1e-3, max_grad_norm=None))
    return Actor(engine, TEMPERATURE)


def rollout(seed: int = 2) -> Rollout:
    """Left-padded prompts before right-padded responses of very different lengths."""
    rng = random.Random(seed)
    prompts = [[rng.randrange(4, VOCAB) for _ in range(p)] for p, _ in ROLLOUT_ROWS]
    responses = [[rng.randrange(4, VOCAB) for _ in range(r)] for _, r in ROLLOUT_ROWS]
    prompt_ids, prompt_mask = collate_left(prompts, PAD)
    resp = collate_right(responses, PAD)
    n = len(ROLLOUT_ROWS)
    return Rollout(prompt_ids, prompt_mask, resp["input_ids"], resp["attention_mask"],
                   ended=torch.ones(n, dtype=torch.bool), prompts=[""] * n, responses=[""] * n)


def experience(name: str, actor: Actor, ro: Rollout):
    """The algorithm's experience of ``ro`` with old log-probs moved off the current policy (ratios
    differ from 1, clipping engages)."""
    return drifted_experience(name, actor.engine.model, ro, rl_config(name))


@pytest.mark.parametrize("padded", [False, True], ids=["padding-free", "padded"])
@pytest.mark.parametrize("name", ["ppo", "grpo"])
def test_an_rl_minibatch_binned_by_tokens_steps_as_one_micro_batch(name, padded):
    actor, ro = tiny_actor(), rollout()
    exp = experience(name, actor, ro)
    loss_fn = build_algorithm(name, rl_config(name)).actor_loss(0.05)
    minibatch = torch.randperm(len(exp), generator=torch.Generator().manual_seed(0))
    tokens = exp.rollout.attention_mask.sum(1).tolist()
    budget = 2 * max(tokens)
    bins = split_by_token_budget(minibatch, tokens, budget, padded)
    assert len(bins) >= 3 and sorted(torch.cat(bins).tolist()) == list(range(len(exp)))

    whole, whole_grads = recorded_step(actor.engine, lambda: actor.update(exp, [[minibatch]], loss_fn))
    split, split_grads = recorded_step(actor.engine, lambda: actor.update(exp, [bins], loss_fn))
    where = f"{name} actor loss in {len(bins)} micro-batches of {budget} tokens"
    assert_same_grads(split_grads, whole_grads, where)
    for key, value in whole[0].items():
        if not key.startswith(("timing/", "check/")):  # check/: a maximum over micro-batches
            assert split[0][key] == pytest.approx(value, abs=ATOL), f"{where}: stat {key}"


# -- end to end --------------------------------------------------------------------------------------

def test_sft_runs_with_a_token_budget(tiny_task, tmp_path, capsys):
    task, out = tiny_task["dir"], tmp_path / "sft"
    args = sft_overrides(task, out, "max_steps=3", "optim.micro_batch_tokens=96", "data.eval=null",
                         "data.eval_size=0")
    code, err = cli(capsys, ["sft", *args])
    assert code == 0, err
    rows = read_metrics(out / "metrics.jsonl")
    losses = [r["train/loss"] for r in rows if "train/loss" in r]
    assert len(losses) == 3 and all(torch.isfinite(torch.tensor(losses)))


def test_a_ppo_run_binned_by_tokens_is_the_same_run(monkeypatch):
    """The fixed-seed PPO run of the equivalence tests, its minibatches binned by tokens (padded
    cost: the straightforward path pads), gives the same run as whole minibatches."""
    import tether.loops.rl as rl
    from test_ppo_equivalence import STRAIGHTFORWARD, assert_same_run, run

    want = run(STRAIGHTFORWARD)
    sizes: list[int] = []

    def spy(minibatch, tokens, budget, padded):
        bins = split_by_token_budget(minibatch, tokens, budget, padded)
        sizes.append(len(bins))
        assert padded  # model.padding_free=false
        return bins

    monkeypatch.setattr(rl, "split_by_token_budget", spy)
    got = run(STRAIGHTFORWARD, "rl.micro_batch_tokens=100")
    assert sizes and max(sizes) > 1, f"the budget never split a minibatch: {sizes}"
    assert_same_run(got, want)
