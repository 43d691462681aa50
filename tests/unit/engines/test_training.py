"""The training engine: one optimiser step from micro-batches and a loss function, exactly what
a plain loop computes; the device API; fp16's scaler; state round trips."""

from __future__ import annotations

import copy

import pytest
import torch

from tether.engines import InferenceEngine, OptimizerSpec, TrainingEngine
from tether.common.errors import TrainingError


def model_and_data(seed: int = 0):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    x, y = torch.randn(10, 6), torch.randn(10, 1)
    return model, x, y


def mse(model, mb):
    pred = model(mb["x"])
    loss = (pred - mb["y"]).pow(2).mean()
    return loss, {"loss": float(loss.detach())}


SPEC = OptimizerSpec(lr=0.05, weight_decay=0.01, max_grad_norm=0.5, fused=False)


def test_a_step_is_the_plain_loop_step_and_accumulation_is_exact():
    model, x, y = model_and_data()
    plain = copy.deepcopy(model)
    engine = TrainingEngine(model, SPEC)
    # The plain loop: one batch, clip, AdamW step.
    opt = torch.optim.AdamW(plain.parameters(), lr=0.05, weight_decay=0.01)
    loss = (plain(x) - y).pow(2).mean()
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(plain.parameters(), 0.5)
    opt.step()
    # The engine: the same batch as micro-batches of 4, 4 and 2 rows, weighted by their share.
    micros = [{"x": x[i:j], "y": y[i:j]} for i, j in ((0, 4), (4, 8), (8, 10))]
    out = engine.train_step(micros, mse, [0.4, 0.4, 0.2])
    assert out["grad_norm"] == pytest.approx(float(norm), rel=1e-6)
    assert out["stats"]["loss"] == pytest.approx(float(loss.detach()), rel=1e-6)
    for a, b in zip(engine.model.parameters(), plain.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
    assert all(p.grad is None for p in engine.model.parameters())  # zeroed after the step
    assert set(out["timing"]) == {"forward", "backward", "optimizer"}


def test_non_finite_loss_stops_or_skips():
    model, x, y = model_and_data()

    def nan_loss(m, mb):
        return m(mb["x"]).sum() * float("nan"), {}

    engine = TrainingEngine(model, SPEC)
    with pytest.raises(TrainingError, match="Non-finite policy loss at step iteration 3"):
        engine.train_step([{"x": x, "y": y}], nan_loss, name="policy loss", where="iteration 3")
    skipping = TrainingEngine(model_and_data()[0], SPEC, on_nonfinite="skip")
    before = [p.clone() for p in skipping.model.parameters()]
    out = skipping.train_step([{"x": x, "y": y}], nan_loss)
    assert out["grad_norm"] is None and out["skipped_steps"] == 1
    assert all(torch.equal(a, b) for a, b in zip(before, skipping.model.parameters()))


def test_state_round_trip_continues_exactly():
    model, x, y = model_and_data()
    a = TrainingEngine(model, SPEC)
    b = TrainingEngine(copy.deepcopy(model), SPEC)
    batch = [{"x": x, "y": y}]
    a.train_step(batch, mse)
    b.train_step(batch, mse)
    state = copy.deepcopy(a.state_dict())
    c = TrainingEngine(copy.deepcopy(a.model), SPEC)
    c.load_state_dict(state)
    a.train_step(batch, mse)
    c.train_step(batch, mse)
    for p, q in zip(a.model.parameters(), c.model.parameters()):
        assert torch.equal(p, q)
    assert dict(a.named_weights()).keys() == dict(a.model.state_dict()).keys()


def test_fp16_runs_with_a_gradient_scaler():
    model, x, y = model_and_data()
    engine = TrainingEngine(model, SPEC, precision="fp16")
    assert engine.scaler is not None and engine.autocast == "fp16"
    out = engine.train_step([{"x": x, "y": y}], mse)
    assert out["grad_norm"] is not None and "scaler" in engine.state_dict()


def test_param_groups_take_their_own_learning_rate():
    model = torch.nn.Module()
    model.body, model.head = torch.nn.Linear(3, 3), torch.nn.Linear(3, 1)
    engine = TrainingEngine(model, OptimizerSpec(lr=0.1, groups=(("head", 0.5),)))
    lrs = [g["lr"] for g in engine.optimizer.param_groups]
    assert lrs == [0.1, 0.5]
    assert engine.last_lr() == 0.1


def test_models_and_batches_land_on_the_configured_device():
    """Through the engine API, weights and every tensor handed to it go to the engine's device
    ("meta" here: a device other than the CPU the test builds its tensors on)."""
    model, x, y = model_and_data()
    engine = TrainingEngine(model, SPEC, device="meta")
    assert {p.device.type for p in engine.model.parameters()} == {"meta"}
    seen = engine.infer(lambda m, batch: {k: v.device.type for k, v in batch.items()}, {"x": x, "y": y})
    assert seen == {"x": "meta", "y": "meta"}
    frozen = InferenceEngine(model_and_data()[0], device="meta")
    assert {p.device.type for p in frozen.model.parameters()} == {"meta"} and not frozen.model.training
    assert not any(p.requires_grad for p in frozen.model.parameters())
    moved = engine.to_device([{"x": x}, (y, "text")])
    assert moved[0]["x"].device.type == "meta" and moved[1][0].device.type == "meta" and moved[1][1] == "text"


def test_check_stats_are_the_worst_micro_batch():
    """A bound checked on a minibatch (PPO's ratio deviation) must see its worst micro-batch, not a
    token-weighted mean of the micro-batches' values."""
    model, x, y = model_and_data()
    values = iter([2e-3, 0.0])

    def loss(m, mb):
        value, stats = mse(m, mb)
        return value, {**stats, "check/deviation": next(values)}

    out = TrainingEngine(model, SPEC).train_step([{"x": x[:5], "y": y[:5]}, {"x": x[5:], "y": y[5:]}], loss, [0.5, 0.5])
    assert out["stats"]["check/deviation"] == 2e-3
