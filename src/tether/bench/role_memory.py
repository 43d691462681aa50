"""The bench's memory columns: what the memory model predicts for the run's roles as built
(:func:`predicted_memory`) and what the roles hold (:func:`role_memory`)."""

from __future__ import annotations

import torch

PREDICTED_COUNTS = ("weights, gradients and AdamW state of every role (tether.plan.memory.role_bytes; storage two "
                    "roles share counted once); not activations, logits, the KV cache or the process itself")
PEAK_COUNTS = ("tether.plan.memory.predict_peak at its peak phase ('phase'), MB by kind: what stays resident (the "
               "process baseline, every role's weights with storage two roles share counted once, AdamW state) "
               "plus that phase's transients")


def _mb(n: float) -> float:
    return round(n / 2**20, 1)


def predicted_memory(roles, cfg, model_config, prompt_len: int, parallel: bool) -> dict:
    """The memory model's peak for this run, with the roles' parameters as built:
    ``predicted_peak_mb``, ``predicted_peak_split`` (MB by kind, and what it counts) and
    ``predicted_phases_mb`` (the total of each phase). Where tether.plan.memory has no
    ``predict_peak``, the weights + gradients + AdamW state per role (:func:`role_bytes`)."""
    from tether.plan import memory

    sizes = role_sizes(roles)
    params = {"role_params": {name: {"frozen": r.frozen, "trained": r.trained} for name, r in sizes.items()}}
    if not hasattr(memory, "predict_peak"):
        split = {name: _mb(memory.role_bytes(size, str(_dtype(roles)))) for name, size in sizes.items()}
        return {"predicted_peak_mb": round(sum(split.values()), 1),
                "predicted_peak_split": split | {"counts": PREDICTED_COUNTS}} | params
    shape = memory.Shape.of(model_config)
    on_cpu = next(next(_role_models(roles))[1].parameters()).device.type == "cpu"
    run = memory.Workload(
        cfg.algorithm, micro_batch=max(1, cfg.rl.minibatch_size // cfg.rl.grad_accum_steps), batch=cfg.episodes,
        prompt=prompt_len, response=cfg.rollout.max_new_tokens, precision=cfg.run.precision, dtype=_dtype(roles),
        grad_ckpt=cfg.gradient_checkpointing, entropy=cfg.rl.entropy_coef > 0, parallel_roles=parallel,
        captured_logprobs=cfg.rollout.capture_logprobs, logprob_chunk=memory.default_logprob_chunk(shape.vocab),
        retained_heap=on_cpu and parallel and cfg.cpu.retain_memory,
        decode_copy=4 if on_cpu and getattr(roles, "linear_backend", "aten") == "onednn" else 0,
        device="cpu" if on_cpu else "cuda")
    peak = memory.predict_peak(shape, sizes, run)
    split = {k: _mb(v) for k, v in peak["split"].items() if k != "total"}
    return {"predicted_peak_mb": _mb(peak["total"]),
            "predicted_peak_split": split | {"phase": peak["phase"], "counts": PEAK_COUNTS},
            "predicted_phases_mb": {name: _mb(p["total"]) for name, p in peak["phases"].items()}} | params


def _dtype(roles) -> str:
    """The actor's weight dtype as tether.plan.memory names it (float32, bfloat16)."""
    _, model, _ = next(_role_models(roles))
    return str(next(model.parameters()).dtype).removeprefix("torch.")


def role_sizes(roles) -> dict:
    """Each role's frozen and trained parameters as built (:class:`tether.plan.memory.RoleSize`);
    storage another role already holds is counted once, with the first role (a LoRA actor's base
    serves as the reference, a LoRA critic's as the reward model: those then count 0)."""
    from tether.plan.memory import RoleSize

    seen: set = set()
    sizes = {}
    for name, model, optimizer in _role_models(roles):
        frozen = trained = 0
        for p in model.parameters():
            if p.data_ptr() in seen:
                continue
            seen.add(p.data_ptr())
            if optimizer is not None and p.requires_grad:
                trained += p.numel()
            else:
                frozen += p.numel()
        sizes[name] = RoleSize(frozen=frozen, trained=trained)
    return sizes


def _role_models(roles):
    """(name, model, optimizer or None) of each role that holds a model."""
    for name, role in (("actor", roles.actor), ("reference", roles.reference), ("critic", roles.critic),
                       ("reward", roles.reward)):
        engine = getattr(role, "engine", None)
        model = getattr(engine, "model", None) if engine is not None else getattr(role, "model", None)
        if model is not None:
            yield name, model, getattr(engine, "optimizer", None)


def role_memory(roles) -> dict:
    """Bytes per role: its weights (storage another role already holds counted once, with the role
    that owns it), the trainable weights (their gradients take as much at the peak of a backward),
    and the optimiser's state; and their sum."""
    from tether.models.lora import parameter_bytes

    seen: set = set()
    table = {}
    for name, model, optimizer in _role_models(roles):
        state = 0 if optimizer is None else sum(t.numel() * t.element_size() for s in optimizer.state.values()
                                                 for t in s.values() if torch.is_tensor(t))
        trainable = parameter_bytes(model, trainable_only=True) if optimizer is not None else 0
        table[name] = {"weights": parameter_bytes(model, seen=seen), "trainable_weights": trainable,
                       "gradients_peak": trainable, "optimizer_state": state}
    table["total"] = {k: sum(row[k] for row in table.values()) for k in next(iter(table.values()))}
    return table
