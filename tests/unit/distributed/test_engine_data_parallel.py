"""A data-parallel training step is the one-process step: two real gloo processes (DDP, then
FSDP2) each train on their slice of every micro-batch, weighted by the slice's share of the
global batch's tokens, and end with the weights, stats and gradient norms of one process
training on the whole micro-batches. The state rank 0 saves (optimiser, schedule) continues
exactly, in one process and in two.

One spawn runs both strategies (one after the other, in one process group) to pay the start-up
of two Python processes once. A failing strategy stops the spawn (the other rank would wait in
a collective otherwise); it leaves ``<strategy>.rank<R>.error``, which its tests report.
"""

from __future__ import annotations

import copy
import traceback
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

from tether.distributed.collectives import broadcast_object
from tether.engines import OptimizerSpec, TrainingEngine

WORLD = 2
STEPS = 3
TOL = 1e-5
STRATEGIES = ("ddp", "fsdp")
# Warm-up then linear decay, so that the scheduler's state matters when it is carried over;
# a gradient-norm bound low enough to clip, so that the global norm matters too.
SPEC = OptimizerSpec(lr=3e-3, weight_decay=0.01, eps=1e-6, schedule="linear", warmup_steps=2, total_steps=10,
                     max_grad_norm=0.5)
# Rows' lengths per micro-batch: unequal token counts inside each micro-batch and between them,
# so that a slice's weight (its tokens over the global batch's) differs from an equal share.
LENGTHS = [[12, 3, 7, 5], [4, 12, 9, 3]]


@dataclass
class Batch:
    ids: Tensor  # (B, T) token ids
    mask: Tensor  # (B, T) 1 on the row's real tokens (a prefix)

    def __len__(self) -> int:
        return self.ids.shape[0]


def tokens(mb: Batch) -> float:
    """Predicted tokens of a micro-batch (every real token after the first)."""
    return float(mb.mask[:, 1:].sum())


def batches(step: int, vocab: int) -> list[Batch]:
    """The global micro-batches of ``step``: two of four rows, a pure function of ``step``."""
    gen = torch.Generator().manual_seed(1000 + step)
    out = []
    for lengths in LENGTHS:
        ids = torch.randint(3, vocab, (4, 12), generator=gen)
        mask = (torch.arange(12)[None, :] < torch.tensor(lengths)[:, None]).long()
        out.append(Batch(ids, mask))
    return out


def lm_loss(model, mb: Batch):
    """The token mean of the next-token NLL, and (a check/ stat) the worst row's mean."""
    logits = model(input_ids=mb.ids).logits[:, :-1].float()
    target, m = mb.ids[:, 1:], mb.mask[:, 1:].float()
    nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1), reduction="none").view_as(m)
    loss = (nll * m).sum() / m.sum()
    worst = ((nll * m).sum(1) / m.sum(1)).max()
    return loss, {"loss": float(loss.detach()), "check/worst_row": float(worst.detach())}


def build_model():
    from tether.tasks.arith.model import build_base_model
    from tether.tasks.arith.tokenizer import build_tokenizer

    return build_base_model(build_tokenizer(), 0)


def summary(result: dict) -> dict:
    return {"stats": result["stats"], "grad_norm": result["grad_norm"]}


def _worker(rank: int, init_file: str, out_dir: str) -> None:
    torch.set_num_threads(1)
    dist = torch.distributed
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=WORLD,
                            timeout=timedelta(seconds=60))
    try:
        for strategy in STRATEGIES:
            try:
                engine = TrainingEngine(build_model(), SPEC, strategy=strategy)
                vocab = engine.model.config.vocab_size
                steps = [summary(engine.train_step(batches(s, vocab), lm_loss, tokens)) for s in range(STEPS)]
                state = engine.state_dict()  # every rank: a collective under FSDP
                weights = {k: v.detach().cpu().clone() for k, v in engine.wrapped.full_state_dict().items()}
                del engine
                # Resume in two processes from rank 0's state, as every rank reads it from a checkpoint.
                state, weights = broadcast_object((state, weights) if rank == 0 else None)
                model = build_model()
                model.load_state_dict(weights)
                resumed = TrainingEngine(model, SPEC, strategy=strategy)
                resumed.load_state_dict(copy.deepcopy(state))  # the loaded optimiser may share its tensors
                extra = summary(resumed.train_step(batches(STEPS, vocab), lm_loss, tokens))
                after = resumed.wrapped.full_state_dict()
                if rank == 0:
                    torch.save({"strategy": strategy, "steps": steps, "state": state, "weights": weights,
                                "resumed_strategy": resumed.strategy, "extra": extra,
                                "after": {k: v.detach().cpu().clone() for k, v in after.items()}},
                               Path(out_dir) / f"{strategy}.pt")
                dist.barrier()
            except Exception:
                Path(out_dir, f"{strategy}.rank{rank}.error").write_text(traceback.format_exc())
                raise
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def parallel(tmp_path_factory) -> Path:
    """The directory of the two-process runs' results (rank 0's), one file per strategy."""
    import torch.multiprocessing as mp

    out = tmp_path_factory.mktemp("data_parallel")
    try:
        mp.spawn(_worker, args=(str(out / "pg"), str(out)), nprocs=WORLD, join=True)
    except Exception:  # each strategy's test reports its own error file
        traceback.print_exc()
    return out


@pytest.fixture(scope="module")
def reference() -> dict:
    """One process, the same micro-batches, ``STEPS`` steps then one more; the state after STEPS."""
    assert not torch.distributed.is_initialized()
    engine = TrainingEngine(build_model(), SPEC)
    assert engine.strategy is None
    vocab = engine.model.config.vocab_size
    steps = [summary(engine.train_step(batches(s, vocab), lm_loss, tokens)) for s in range(STEPS)]
    weights = {k: v.clone() for k, v in engine.model.state_dict().items()}
    extra = summary(engine.train_step(batches(STEPS, vocab), lm_loss, tokens))
    after = {k: v.clone() for k, v in engine.model.state_dict().items()}
    return {"steps": steps, "weights": weights, "extra": extra, "after": after}


def load(parallel: Path, strategy: str) -> dict:
    path = parallel / f"{strategy}.pt"
    if not path.exists():
        errors = "\n".join(p.read_text() for p in sorted(parallel.glob(f"{strategy}.rank*.error")))
        pytest.fail(f"the two-process {strategy} run wrote no results:\n{errors or '(no error file: see stderr)'}")
    return torch.load(path, weights_only=False)


def max_diff(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k].float() - b[k].float()).abs().max()) for k in a)


def assert_same_steps(got: list[dict], want: list[dict]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g["stats"].keys() == w["stats"].keys() == {"loss", "check/worst_row"}
        for key in w["stats"]:
            assert abs(g["stats"][key] - w["stats"][key]) < TOL, (key, g["stats"][key], w["stats"][key])
        assert abs(g["grad_norm"] - w["grad_norm"]) < TOL, (g["grad_norm"], w["grad_norm"])


def test_reference_steps_clip_and_learn(reference):
    # The setting exercises what data parallel must reproduce: the norm is clipped and the loss falls.
    norms = [s["grad_norm"] for s in reference["steps"]]
    assert all(n > SPEC.max_grad_norm for n in norms), norms
    assert reference["extra"]["stats"]["loss"] < reference["steps"][0]["stats"]["loss"]
    assert all(s["stats"]["check/worst_row"] > s["stats"]["loss"] for s in reference["steps"])


@pytest.mark.slow  # two spawned processes
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_data_parallel_steps_are_the_one_process_steps(parallel, reference, strategy):
    got = load(parallel, strategy)
    assert got["strategy"] == strategy
    assert_same_steps(got["steps"], reference["steps"])
    assert max_diff(got["weights"], reference["weights"]) < TOL


@pytest.mark.slow  # two spawned processes
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_rank_zeros_state_continues_in_two_processes(parallel, reference, strategy):
    got = load(parallel, strategy)
    assert got["resumed_strategy"] == strategy
    assert_same_steps([got["extra"]], [reference["extra"]])
    assert max_diff(got["after"], reference["after"]) < TOL


@pytest.mark.slow  # two spawned processes
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_rank_zeros_optimizer_state_continues_in_one_process(parallel, reference, strategy):
    got = load(parallel, strategy)
    model = build_model()
    model.load_state_dict(got["weights"])
    engine = TrainingEngine(model, SPEC)
    engine.load_state_dict(got["state"])
    assert engine.last_lr() == pytest.approx(SPEC.lr * (10 - STEPS) / (10 - 2), rel=1e-9)  # the schedule, too
    assert len(engine.optimizer.state) == len(list(model.parameters()))
    assert all(int(s["step"]) == STEPS for s in engine.optimizer.state.values())
    vocab = model.config.vocab_size
    extra = summary(engine.train_step(batches(STEPS, vocab), lm_loss, tokens))
    assert_same_steps([extra], [reference["extra"]])
    assert max_diff(engine.model.state_dict(), reference["after"]) < TOL


# -- each rank's share, in this process (the rank helpers patched) -------------------------------------


class _Pretend:
    """An engine's ``_shares`` as rank ``r`` of two under a strategy (no process group needed)."""

    def __init__(self, monkeypatch, r: int):
        from tether.distributed import shard

        monkeypatch.setattr(shard, "rank", lambda: r)
        monkeypatch.setattr(shard, "world_size", lambda: WORLD)
        self.engine = TrainingEngine(torch.nn.Linear(2, 1), OptimizerSpec(lr=0.1))
        self.engine.wrapped.strategy = "ddp"


@pytest.mark.parametrize("r, rows, shares", [
    # predicted tokens per row: [11, 2, 6, 4] (23) and [3, 11, 8, 2] (24): 47 in the global batch.
    (0, [[0, 1], [0, 1]], [13 / 47, 14 / 47]),
    (1, [[2, 3], [2, 3]], [10 / 47, 10 / 47]),
])
def test_each_rank_weighs_its_slice_by_the_global_batch(monkeypatch, r, rows, shares):
    engine = _Pretend(monkeypatch, r).engine
    mbs = batches(0, 50)
    parts, got = engine._shares(mbs, tokens)
    assert got == pytest.approx(shares, rel=1e-12)
    for part, mb, picked in zip(parts, mbs, rows):
        assert torch.equal(part.ids, mb.ids[picked]) and torch.equal(part.mask, mb.mask[picked])


def test_shares_of_both_ranks_sum_to_one(monkeypatch):
    total = 0.0
    for r in range(WORLD):
        total += sum(_Pretend(monkeypatch, r).engine._shares(batches(1, 50), tokens)[1])
    assert total == pytest.approx(1.0, rel=1e-12)


def test_shares_without_weights_count_rows(monkeypatch):
    engine = _Pretend(monkeypatch, 1).engine
    parts, got = engine._shares([list(range(4)), list(range(10, 14))], None)
    assert parts == [[2, 3], [12, 13]] and got == [0.25, 0.25]


def test_data_parallel_needs_weights_as_a_function(monkeypatch):
    engine = _Pretend(monkeypatch, 0).engine
    with pytest.raises(ValueError, match="needs weights as a function"):
        engine._shares(batches(0, 50), [0.5, 0.5])


def test_one_process_shares_of_a_callable():
    engine = TrainingEngine(torch.nn.Linear(2, 1), OptimizerSpec(lr=0.1))
    parts, got = engine._shares(batches(0, 50), tokens)
    assert len(parts) == 2 and [len(p) for p in parts] == [4, 4]
    assert got == pytest.approx([23 / 47, 24 / 47], rel=1e-12)



def test_a_ragged_micro_batch_is_trained_whole(monkeypatch):
    # Three rows of weight 1 over two ranks: one process trains all three with a total share of 1.
    seen, total = [], 0.0
    for r in range(WORLD):
        parts, shares = _Pretend(monkeypatch, r).engine._shares([["a", "b", "c"]], len)
        seen += parts[0]
        total += sum(shares)
    assert sorted(seen) == ["a", "b", "c"] and total == pytest.approx(1.0)


def test_fewer_rows_than_ranks_give_a_stand_in_row_that_weighs_nothing(monkeypatch):
    # One row over two ranks: rank 0 trains it whole, rank 1 runs the same row at weight 0
    # (DDP and FSDP need every rank's backward).
    parts0, shares0 = _Pretend(monkeypatch, 0).engine._shares([["a"]], len)
    parts1, shares1 = _Pretend(monkeypatch, 1).engine._shares([["a"]], len)
    assert (parts0, shares0) == ([["a"]], [1.0])
    assert (parts1, shares1) == ([["a"]], [0.0])
