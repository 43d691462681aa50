"""Any partition of a batch gives the batch's loss and gradient, for every objective.

``--help`` promises that micro-batches (``optim.grad_accum_steps``, ``optim.micro_batch_tokens``,
``rl.grad_accum_steps``, ``rl.micro_batch_tokens``) and data-parallel ranks change memory, not
maths. That holds only if every count an objective normalises by is the whole batch's: a token
mean computed inside each micro-batch (ORPO's NLL once was) weighs short and long rows differently
in each split. Each objective here runs one optimiser step on rows of long-tailed lengths (1 to
~45 response tokens) four ways, through the stage's own role and loss:

- ``whole``: one micro-batch;
- ``accumulation``: equal slices (gradient accumulation);
- ``token budget``: bins by tokens (a different number of rows in each);
- ``two ranks``: every accumulation slice halved as :func:`tether.common.runtime.rank_slice` halves it
  for 2 ranks, each half weighed by its share of the global batch. This is the sum a 2-rank
  DDP/FSDP step computes (the engine's data-parallel path equals it:
  ``tests/unit/distributed/test_engine_data_parallel.py``; real 2-process stage runs:
  ``test_distributed.py``).

Each must give the whole batch's gradient and stats within 1e-5 relative (fp32: only the float
summation order differs).
"""

from __future__ import annotations

import json

import pytest
import torch

from packing_helpers import drifted_experience, rl_config
from test_token_budget_steps import recorded_step, rollout, tiny_actor
from tether.algorithms import ALGORITHMS
from tether.registry.algorithms import build_algorithm
from tether.config import (DPOConfig, KTOConfig, ORPOConfig, RewardModelConfig, SFTConfig, SimPOConfig,
                           load_config)
from tether.loops.micro_batches import rows_by_token_budget, split_by_token_budget
from tether.loops.supervised import sequence_tokens

pytestmark = pytest.mark.slow

RTOL = 1e-5
STAT_ATOL = 1e-6  # stats that are differences of O(1) means (margins), or 0 up to rounding at the first step
ROWS = 12
#: Extra " ok ." phrases per response: most rows short, a few long (the long tail).
LONG_TAIL = [0, 0, 1, 0, 2, 3, 0, 5, 1, 8, 13, 20]


def relative_diff(got: torch.Tensor, want: torch.Tensor) -> float:
    scale = float(want.abs().max())
    return float((got - want).abs().max()) / scale if scale > 0 else float(got.abs().max())


def assert_same_step(got, want, where: str) -> None:
    """Same gradients (each tensor within RTOL of its largest entry) and same stats."""
    (got_stats, got_grads), (want_stats, want_grads) = got, want
    assert want_grads and got_grads.keys() == want_grads.keys(), f"{where}: parameters with gradients differ"
    assert any(float(g.abs().max()) > 0 for g in want_grads.values()), f"{where}: the step has no gradient"
    for name, grad in want_grads.items():
        diff = relative_diff(got_grads[name], grad)
        assert diff <= RTOL, f"{where}: grad {name} differs by {diff:.2e} relative"
    for key, value in want_stats.items():
        # check/: a maximum over micro-batches, not a sum. An accuracy counts margins' signs, and at
        # the first step (the policy is its reference) every DPO margin is 0 up to rounding: the
        # margins beside it are compared instead (absolutely too: a difference of near-equal means).
        if key.startswith(("timing/", "check/")) or key.endswith("accuracy"):
            continue
        assert got_stats[key] == pytest.approx(value, rel=RTOL, abs=STAT_ATOL), f"{where}: stat {key}"


def halves(chunk: list) -> list[list]:
    """A micro-batch as 2 ranks split it (:func:`tether.common.runtime.rank_slice`: contiguous, rank 0
    takes the larger half)."""
    cut = (len(chunk) + 1) // 2
    return [part for part in (chunk[:cut], chunk[cut:]) if part]


# -- the supervised and preference stages -----------------------------------------------------------

def long_tail_files(task, root) -> dict:
    """The tiny task's first rows with responses stretched to long-tailed lengths: SFT messages,
    preference pairs, and KTO's unpaired rows (alternately desirable and not, 4 prompts)."""
    sft = [json.loads(line) for line in (task / "sft_train.jsonl").read_text().splitlines()][:ROWS]
    prefs = [json.loads(line) for line in (task / "prefs_train.jsonl").read_text().splitlines()][:ROWS]
    files = {"sft": root / "sft.jsonl", "prefs": root / "prefs.jsonl", "kto": root / "kto.jsonl"}
    root.mkdir(parents=True, exist_ok=True)
    with files["sft"].open("w") as f:
        for row, extra in zip(sft, LONG_TAIL):
            row["messages"][-1]["content"] += " ok ." * extra
            f.write(json.dumps(row) + "\n")
    with files["prefs"].open("w") as f:
        for i, (row, extra) in enumerate(zip(prefs, LONG_TAIL)):
            row["chosen"] += " ok ." * extra
            row["rejected"] += " ok ." * LONG_TAIL[-1 - i]
            f.write(json.dumps({k: row[k] for k in ("prompt", "chosen", "rejected")}) + "\n")
    with files["kto"].open("w") as f:
        for i, (row, extra) in enumerate(zip(prefs, LONG_TAIL)):
            f.write(json.dumps({"prompt": prefs[i % 4]["prompt"], "completion": row["chosen"] + " ok ." * extra,
                                "label": i % 2 == 0}) + "\n")
    return files


def stage_role(stage: str, task, tmp_path):
    """(the stage's trained role as its builder makes it, its training rows, the role's weight of
    a row) for one step of one batch of all ``ROWS`` rows; clipping off, no held-out data."""
    from tether.objectives.dpo import build_dpo_roles, dpo_stage_inputs
    from tether.objectives.kto import build_kto_roles, kto_stage_inputs
    from tether.objectives.orpo import build_orpo_roles
    from tether.objectives.reward_model import build_rm_roles, rm_stage_inputs
    from tether.objectives.sft import build_sft_roles, sft_stage_inputs
    from tether.objectives.shared import pair_stage_inputs
    from tether.objectives.simpo import build_simpo_roles

    files = long_tail_files(task, tmp_path / "data")
    data = {"sft": files["sft"], "kto": files["kto"]}.get(stage, files["prefs"])
    overrides = [f"model.name_or_path={task / 'base_model'}", f"data.train={data}", "data.eval=null",
                 "data.eval_size=0", "data.max_length=64", f"optim.batch_size={ROWS}", "optim.max_grad_norm=null",
                 "max_steps=1", f"run.out={tmp_path / 'run'}", "run.progress=false"]
    kinds = {"sft": (SFTConfig, sft_stage_inputs, build_sft_roles, "policy"),
             "rm": (RewardModelConfig, rm_stage_inputs, build_rm_roles, "reward"),
             "dpo": (DPOConfig, dpo_stage_inputs, build_dpo_roles, "policy"),
             "simpo": (SimPOConfig, pair_stage_inputs, build_simpo_roles, "policy"),
             "orpo": (ORPOConfig, pair_stage_inputs, build_orpo_roles, "policy"),
             "kto": (KTOConfig, kto_stage_inputs, build_kto_roles, "policy")}
    config_class, inputs_of, build, role_name = kinds[stage]
    cfg = load_config(config_class, None, overrides)
    inputs = inputs_of(cfg)
    assert len(inputs.train) == ROWS
    torch.manual_seed(0)
    return build(cfg, inputs=inputs, total_steps=1).roles[role_name], inputs.train


def response_tokens(item) -> int:
    """A row's response tokens: a demonstration's loss tokens, a pair's chosen, a KTO completion."""
    for field in ("chosen_ids", "completion_ids"):
        if hasattr(item, field):
            return len(getattr(item, field))
    return int(sum(item.loss_mask))


SUPERVISED = ["sft", "rm", "dpo", "simpo", "orpo", "kto"]


@pytest.mark.parametrize("stage", SUPERVISED)
def test_every_partition_of_a_supervised_batch_is_the_batch(stage, tiny_task, tmp_path):
    role, train = stage_role(stage, tiny_task["dir"], tmp_path)
    lengths = [sequence_tokens(row) for row in train]
    responses = [response_tokens(row) for row in train]
    assert max(responses) >= 8 * min(responses), responses  # the long tail is there
    rows = list(range(ROWS))
    accumulation = [rows[i:i + 3] for i in range(0, ROWS, 3)]
    budget = rows_by_token_budget(rows, lambda r: lengths[r], 2 * max(lengths), False)
    ranks = [half for chunk in accumulation for half in halves(chunk)]
    assert len(budget) >= 3 and len({len(b) for b in budget}) > 1, budget

    def step(micro):
        result, grads = recorded_step(role.engine, lambda: role.update(rows, micro, 1))
        return result["stats"], grads

    whole = step(ROWS)
    for name, micro in (("accumulation", accumulation), ("token budget", budget), ("two ranks", ranks)):
        assert_same_step(step(micro), whole, f"{stage}, {name} ({len(micro)} micro-batches)")


def test_orpo_nll_is_the_token_mean_of_the_whole_batch(tiny_task, tmp_path):
    """ORPO's NLL term is Σ(−log π of chosen tokens) / (chosen tokens of the batch), whatever the split:
    the stat a split step reports is the one-batch value, not a mean of per-micro-batch means."""
    role, train = stage_role("orpo", tiny_task["dir"], tmp_path)
    rows = list(range(ROWS))
    whole, _ = recorded_step(role.engine, lambda: role.update(rows, ROWS, 1))
    per_row, _ = recorded_step(role.engine, lambda: role.update(rows, [[r] for r in rows], 1))
    assert per_row["stats"]["train/nll"] == pytest.approx(whole["stats"]["train/nll"], rel=RTOL)
    # The mean of per-row token means weighs a 1-token response as much as a 40-token one: it differs.
    from tether.objectives.shared import pair_logprobs

    with torch.no_grad():
        pc, _ = pair_logprobs(role.engine.model, [train[r] for r in rows], 0, "none")
    lengths = torch.tensor([float(len(train[r].chosen_ids)) for r in rows])
    assert whole["stats"]["train/nll"] == pytest.approx(float(-pc.sum() / lengths.sum()), rel=RTOL)
    assert abs(float((-pc / lengths).mean()) - float(-pc.sum() / lengths.sum())) > 1e-3


# -- every registered RL algorithm -------------------------------------------------------------------

#: (prompt, response) tokens: a long tail of response lengths, 8 rows (4 groups of 2).
RL_ROWS = [(1, 1), (13, 2), (5, 1), (8, 30), (3, 3), (11, 1), (2, 12), (6, 45)]


def rl_partitions(n: int, group: int, tokens: list[int]) -> dict:
    """Micro-batch index lists of one minibatch of ``n`` rows: accumulation slices, token-budget
    bins and 2 ranks' halves, each keeping groups of ``group`` rows whole (online DPO's pairs)."""
    order = torch.randperm(n // group, generator=torch.Generator().manual_seed(0))
    minibatch = (order[:, None] * group + torch.arange(group)).reshape(-1)
    accumulation = list(minibatch.split(2 * group))
    if group == 1:
        budget = split_by_token_budget(minibatch, tokens, 2 * max(tokens), False)
    else:  # bins of whole groups by their tokens
        group_tokens = [sum(tokens[g * group:(g + 1) * group]) for g in range(n // group)]
        bins = split_by_token_budget(order, group_tokens, max(group_tokens) + min(group_tokens), False)
        budget = [(b[:, None] * group + torch.arange(group)).reshape(-1) for b in bins]
    ranks = [half for chunk in accumulation for half in (chunk[: len(chunk) // 2], chunk[len(chunk) // 2:])]
    return {"whole": [minibatch], "accumulation": accumulation, "token budget": budget, "two ranks": ranks}


def assert_every_partition_steps_as_one(role, exp, parts: dict, loss_fn, name: str) -> None:
    """``role.update`` (the actor or the critic) on each partition of ``parts`` gives the whole
    minibatch's step."""
    def step(micro):
        result, grads = recorded_step(role.engine, lambda: role.update(exp, [micro], loss_fn))
        return result[0], grads

    whole = step(parts["whole"])
    for how, micro in parts.items():
        if how != "whole":
            assert_same_step(step(micro), whole, f"{name}, {how} ({len(micro)} micro-batches)")


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_every_partition_of_an_rl_minibatch_is_the_minibatch(name, monkeypatch):
    import test_token_budget_steps as budget_steps

    monkeypatch.setattr(budget_steps, "ROLLOUT_ROWS", RL_ROWS)
    actor, ro = tiny_actor(), rollout(seed=3)
    cfg = rl_config(name)
    exp = drifted_experience(name, actor.engine.model, ro, cfg)
    if name == "rs":  # winners of every length, and micro-batches without one
        won = torch.tensor([1, 0, 1, 1, 0, 0, 1, 1], dtype=torch.float32)[:, None]
        exp.advantages = exp.returns = exp.rewards = exp.rollout.response_mask.float() * won
    loss_fn = build_algorithm(name, cfg).actor_loss(0.05)
    group = cfg.samples_per_prompt if ALGORITHMS[name].whole_groups else 1
    tokens = exp.rollout.attention_mask.sum(1).tolist()
    parts = rl_partitions(len(exp), group, tokens)
    assert len(parts["token budget"]) >= 2

    assert_every_partition_steps_as_one(actor, exp, parts, loss_fn, name)


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_every_partition_of_a_minibatch_of_episodes_is_the_minibatch(name, monkeypatch):
    """The same on multi-turn episodes: observation tokens (action-mask holes) inside the
    responses, whose long tail the token budget bins."""
    import test_token_budget_steps as budget_steps
    from packing_helpers import as_episodes

    monkeypatch.setattr(budget_steps, "ROLLOUT_ROWS", RL_ROWS)
    actor, ro = tiny_actor(), as_episodes(rollout(seed=3))
    cfg = rl_config(name)
    exp = drifted_experience(name, actor.engine.model, ro, cfg)
    if name == "rs":
        won = torch.tensor([1, 0, 1, 1, 0, 0, 1, 1], dtype=torch.float32)[:, None]
        exp.advantages = exp.returns = exp.rewards = exp.rollout.loss_mask.float() * won
    loss_fn = build_algorithm(name, cfg).actor_loss(0.05)
    group = cfg.samples_per_prompt if ALGORITHMS[name].whole_groups else 1
    parts = rl_partitions(len(exp), group, exp.rollout.attention_mask.sum(1).tolist())
    assert len(parts["token budget"]) >= 2

    assert_every_partition_steps_as_one(actor, exp, parts, loss_fn, f"{name} on episodes")


def test_every_partition_of_a_critic_minibatch_is_the_minibatch(monkeypatch):
    """PPO's value loss on a scalar-head critic, split the same ways."""
    import test_token_budget_steps as budget_steps
    from packing_helpers import build
    from tether.engines import OptimizerSpec, TrainingEngine
    from tether.roles.critic import Critic

    monkeypatch.setattr(budget_steps, "ROLLOUT_ROWS", RL_ROWS)
    critic = Critic(TrainingEngine(build("llama", "sdpa", scalar=True), OptimizerSpec(lr=1e-3, max_grad_norm=None)))
    actor, ro = tiny_actor(), rollout(seed=3)
    cfg = rl_config("ppo")
    exp = drifted_experience("ppo", actor.engine.model, ro, cfg)
    loss_fn = build_algorithm("ppo", cfg).critic_loss()
    parts = rl_partitions(len(exp), 1, exp.rollout.attention_mask.sum(1).tolist())

    assert_every_partition_steps_as_one(critic, exp, parts, loss_fn, "critic")
