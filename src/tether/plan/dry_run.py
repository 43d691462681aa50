"""``tether STAGE --dry-run``: what a run would do, without doing it.

The dry run resolves the config, checks the run directory, the device, the tokenizer, every
model (loaded as the run loads it, on the meta device: :mod:`tether.plan.meta_models`), the LoRA
set-up and the data with the same functions, in the same order, as the run itself (so it stops
on the same bad input with the same message), then prints the plan: roles, devices, placement,
batch arithmetic, steps and the memory model's estimate per role. No weights are read and
nothing is written.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from tether.plan.memory import (PHASES, SPLIT, Shape, Workload, default_logprob_chunk, human_bytes, per_rank_bytes,
                                predict_peak, sampling_peak_bytes)
from tether.plan import meta_models
from tether.rollout import captured_logprobs, engine_class
from tether.common.targets import import_callable
from tether.config.environment import episode_budget


@dataclass
class Plan:
    """Sections of text lines, in print order; ``memory``: the weights, gradients and AdamW state
    per role (bytes per rank); ``peak``: :func:`tether.plan.memory.predict_peak`'s prediction
    (``total``, the peak's ``phase``, its ``split`` and every phase's), empty where the model's
    shape is unknown."""

    stage: str
    sections: dict[str, list[str]] = field(default_factory=dict)
    memory: dict[str, int] = field(default_factory=dict)
    peak: dict = field(default_factory=dict)

    def add(self, section: str, line: str) -> None:
        self.sections.setdefault(section, []).append(line)

    def render(self) -> str:
        width = max(len(s) for s in self.sections)
        lines = [f"tether {self.stage} --dry-run: the plan (no weights loaded, nothing written)."]
        for section, rows in self.sections.items():
            for i, row in enumerate(rows):
                lines.append(f"  {section if i == 0 else '':<{width}}  {row}")
        return "\n".join(lines)


def _world() -> int:
    from tether.common.runtime import world_size

    return world_size()


def _common(plan: Plan, cfg, stage: str, resume: bool) -> None:
    """The checks a run makes first (data parallel batch sizes, the run directory, the device)."""
    from tether.engines import engine_settings
    from tether.loops.common import check_data_parallel
    from tether.runs import check_run_dir
    from tether.trackers import check_installed, check_servers

    check_installed(cfg.run.report_to)
    check_data_parallel(cfg, stage)
    out = check_run_dir(cfg.run.out, cfg, stage, cfg.run.overwrite, resume)
    check_servers(cfg.run.report_to)  # as begin_run: the trackers' servers answer in time
    settings = engine_settings(cfg.run, cfg.model, getattr(cfg, "cpu", None))
    exists = "continues the run there" if resume else ("replaces the run there" if out.exists() else "a new directory")
    plan.add("run", f"run.out = {out} ({exists}); seed {cfg.run.seed}")
    world = _world()
    where = f"{world} processes (torchrun), distributed.strategy = {cfg.distributed.strategy}" if world > 1 \
        else "one process"
    plan.add("device", f"{settings.device} ({cfg.run.device} requested), run.precision = {cfg.run.precision}, "
                       f"model.dtype = {cfg.model.dtype}; {where}")
    if cfg.run.report_to:
        plan.add("trackers", ", ".join(cfg.run.report_to) + f" (project {cfg.run.project!r})")


def _tokenizer(plan: Plan, tokenizer, source: str) -> None:
    template = "yes" if getattr(tokenizer, "chat_template", None) else "no"
    plan.add("tokenizer", f"{source}: {len(tokenizer)} tokens, eos {tokenizer.eos_token!r}, pad {tokenizer.pad_token!r}, "
                          f"chat template: {template}")


def _counts(counts: dict, prefix: str = "") -> str:
    dropped, truncated = counts.get(f"{prefix}dropped_long", 0), counts.get(f"{prefix}truncated_long", 0)
    return f"{truncated} truncated, {dropped} dropped as too long"


def _supervised_batches(plan: Plan, cfg, n_train: int, n_eval: int) -> None:
    from tether.loops.common import steps_for

    o, world = cfg.optim, _world()
    steps = steps_for(n_train, o.batch_size, cfg.epochs, cfg.max_steps)
    micro = o.batch_size // o.grad_accum_steps // world
    if o.micro_batch_tokens is not None:
        plan.add("batches", f"optim.batch_size {o.batch_size} = {world} rank(s) x micro-batches of at most "
                            f"{o.micro_batch_tokens} tokens each ({_budget_cost(cfg)}; rows binned by length)")
    else:
        plan.add("batches", f"optim.batch_size {o.batch_size} = {world} rank(s) x {o.grad_accum_steps} "
                            f"micro-batch(es) x {micro} examples")
    plan.add("batches", _padding_line(cfg))
    how = f"max_steps = {cfg.max_steps}" if cfg.max_steps else \
        f"{cfg.epochs:g} epochs x {n_train} examples / {o.batch_size} per step"
    plan.add("steps", f"{steps} optimiser steps ({how}); {steps * o.batch_size / max(n_train, 1):.2f} epochs; "
                      f"lr {o.lr:g}, {o.schedule} after {o.warmup_steps} warm-up steps")
    if n_eval:
        plan.add("steps", f"held-out evaluation every {cfg.eval_every} steps and at the end ({n_eval} examples)")
    if cfg.run.save_every:
        plan.add("steps", f"a resumable checkpoint every {cfg.run.save_every} steps (keeping {cfg.run.keep_checkpoints})")


def _budget_cost(cfg) -> str:
    return "real tokens counted" if cfg.model.padding_free else "padding counted: rows x longest row"


def _padding_line(cfg) -> str:
    """How the stage's models see their batches (model.padding_free, model.attn_implementation)."""
    m = cfg.model
    how = ("padding-free: each batch's rows packed into one sequence where the model supports it "
           "(checked on its first batch; padded otherwise, with a notice)") if m.padding_free else "padded"
    return f"{how}; attention {m.attn_implementation}"


def _memory(plan: Plan, roles: dict, strategies: dict[str, str], dtype: str, actor_params: int | None = None):
    world = _world()
    per_rank = per_rank_bytes(roles, dtype, world, strategies)
    plan.memory = per_rank
    for name, size in roles.items():
        what = "frozen" if not size.trained else (
            "trained" if not size.frozen else f"frozen base + {size.trained:,} trained (LoRA)")
        if not size.frozen and not size.trained:
            plan.add("memory", f"{name:<10} {'0 B':>9}  (shares a model above: no copy)")
            continue
        plan.add("memory", f"{name:<10} {human_bytes(per_rank[name]):>9}  ({size.frozen + size.trained:,} parameters, "
                           f"{what})")
    total = sum(per_rank.values())
    note = f" per rank on {world} ranks" if world > 1 else ""
    plan.add("memory", f"{'total':<10} {human_bytes(total):>9}{note}: weights + gradients + AdamW state "
                       "(each phase's transients in 'peak' below)")
    if actor_params and world > 1 and "fsdp" in strategies.values():
        peak = sampling_peak_bytes(actor_params, dtype, world)
        plan.add("memory", f"FSDP sampling gathers the actor: +{human_bytes(peak)} while generating")


PHASE_NAMES = {"rollout": "rollout", "logprobs": "log-probs", "update": "update"}
SPLIT_NAMES = {"weights": "weights", "gradients": "gradients", "optimizer": "AdamW", "optimizer_step": "AdamW step",
               "weight_copies": "weight copies",
               "activations": "activations", "logits": "logits", "kv_cache": "KV cache", "baseline": "process",
               "retained": "freed by the main thread, kept"}


def _peak(plan: Plan, config, roles: dict, run: Workload) -> None:
    """The predicted peak per phase (:func:`tether.plan.memory.predict_peak`) as plan lines."""
    if config is None:
        return
    try:
        shape = Shape.of(config)
    except (TypeError, AttributeError):  # not a decoder config this model knows: no prediction
        plan.add("peak", "no prediction: the model's config lacks a decoder's sizes")
        return
    if not all((shape.hidden, shape.layers, shape.heads, shape.vocab)):
        plan.add("peak", "no prediction: the model's config lacks a decoder's sizes")
        return
    run = dataclasses.replace(run, logprob_chunk=default_logprob_chunk(shape.vocab))  # the LM head runs in chunks
    peak = predict_peak(shape, roles, run)
    plan.peak = peak
    from tether.registry.stages import stage_spec

    what = stage_spec(run.stage, "dry_run").phases
    for phase in PHASES:
        if phase not in peak["phases"]:
            continue
        split = peak["phases"][phase]
        parts = ", ".join(f"{SPLIT_NAMES[k]} {human_bytes(split[k])}" for k in SPLIT
                          if split[k] and k not in ("baseline", "weights", "optimizer"))
        plan.add("peak", f"{PHASE_NAMES[phase]:<10} {human_bytes(split['total']):>9}  ({what[phase]}: "
                         f"{parts or 'nothing besides the resident'})")
    split = peak["split"]
    resident = ", ".join(f"{SPLIT_NAMES[k]} {human_bytes(split[k])}" for k in ("weights", "optimizer", "baseline"))
    tokens = (f"{run.micro_batch} x {run.seq} tokens per micro-batch" if run.passes else
              f"{run.batch} episodes of {run.prompt} + {run.response} tokens, micro-batches of {run.micro_batch}")
    sharded = " (whole roles: fsdp's shards are in 'memory')" if _world() > 1 else ""
    at = PHASE_NAMES[peak["phase"]]
    plan.add("peak", f"{'predicted':<10} {human_bytes(peak['total']):>9}  at the peak ({at}); "
                     f"resident in every phase: {resident}{sharded}; {tokens}")


def _longest(rows) -> tuple[int, int]:
    """(tokens, response tokens) of the longest sequence a batch of ``rows`` pads to: SFT examples,
    or preference pairs (the prompt and the longer response)."""
    seq = resp = 0
    for row in rows:
        if hasattr(row, "input_ids"):
            seq = max(seq, len(row.input_ids))
            resp = max(resp, sum(getattr(row, "loss_mask", row.input_ids)))
        elif hasattr(row, "response_ids"):  # a PRM's step-labelled solution
            seq, resp = max(seq, len(row.prompt_ids) + len(row.response_ids)), max(resp, len(row.response_ids))
        elif hasattr(row, "completion_ids"):  # a KTO row
            seq, resp = max(seq, len(row.prompt_ids) + len(row.completion_ids)), max(resp, len(row.completion_ids))
        else:
            longer = max(len(row.chosen_ids), len(row.rejected_ids))
            seq, resp = max(seq, len(row.prompt_ids) + longer), max(resp, longer)
    return seq, resp


def _supervised_workload(cfg, stage: str, train: list, limit: int) -> Workload:
    o = cfg.optim
    seq, resp = _longest(train)
    return Workload(stage, micro_batch=max(1, o.batch_size // o.grad_accum_steps // _world()), seq=seq or limit,
                    response=resp or limit, precision=cfg.run.precision, dtype=cfg.model.dtype,
                    grad_ckpt=cfg.gradient_checkpointing,
                    retained_heap=bool(getattr(cfg.cpu, "retain_memory", False)) and settings_device(cfg) == "cpu",
                    device=_allocator(cfg))


def plan_supervised(cfg, stage: str, resume: bool = False) -> Plan:
    """The plan of a supervised stage, from its registry entry: its input check (``inputs``, giving
    the tokenizer, the models' configs by path, train and held-out rows, counts), what a row is
    called, its trained role, its reference, its memory passes. Checked in the run's order: the run
    directory and the device first, then the inputs."""
    from tether.loops.common import data_limit
    from tether.registry.stages import stage_spec

    spec = stage_spec(stage, "dry_run")
    plan, unit, role = Plan(stage), spec.unit, spec.role
    _common(plan, cfg, stage, resume)
    tokenizer, configs, train, evals, counts = spec.input_check()(cfg)
    _tokenizer(plan, tokenizer, cfg.model.tokenizer or cfg.model.name_or_path)
    plan.add("data", f"data.train {cfg.data.train}: {len(train)} {unit} ({_counts(counts)})")
    plan.add("data", f"held out: {len(evals)} {unit.split()[-1]}" + (f" from {cfg.data.eval}" if cfg.data.eval else
                                                                   " (a slice of data.train)"))
    if spec.plan_note:
        plan.add("data", import_callable(spec.plan_note, "the stage table")(counts))
    limit = data_limit(cfg, configs)
    if limit.capped_by:  # what the run will tokenize to, as its config.yaml and model card say
        plan.add("data", f"data.max_length {limit.tokens} tokens ({limit.capped_by})")
    shape, size = meta_models.supervised(cfg, tokenizer, spec.scalar, spec.has_reference)  # no weights read
    lora = f"the LoRA adapter {cfg.lora.adapter}" if cfg.lora.adapter else f"LoRA r={cfg.lora.r}"
    training = (lora + (" + the score head" if spec.scalar else "")) if cfg.lora.enabled else "every weight trained"
    plan.add("roles", f"{role:<10} {cfg.model.name_or_path}: {shape.architecture}, {shape.params:,} parameters, "
                      f"{training}")
    if spec.has_reference:
        plan.add("roles", _reference_line(cfg, len(train), len(evals), unit))
    _supervised_batches(plan, cfg, len(train), len(evals))
    _placement(plan, cfg, [(role,)])
    _memory(plan, {role: size}, {role: cfg.distributed.strategy}, cfg.model.dtype)
    _peak(plan, configs.get(cfg.model.name_or_path), {role: size},
          _supervised_workload(cfg, stage, train, limit.tokens))
    return plan


def _reference_line(cfg, n_train: int, n_eval: int, unit: str) -> str:
    """What the reference scores (DPO's, KTO's): the training rows the run's steps draw, and the held-out ones."""
    from tether.loops.common import steps_for
    from tether.objectives.shared import rows_used

    used = rows_used(n_train, cfg.optim.batch_size, steps_for(n_train, cfg.optim.batch_size, cfg.epochs,
                                                              cfg.max_steps), cfg.run.seed)
    what = unit.split()[-1]
    mismatched = " (each after its own and after another row's prompt)" if what == "rows" else ""
    return (f"reference  log-probs of the {len(used)} of {n_train} training {what} the steps draw and of {n_eval} "
            f"held-out {what}{mismatched}, computed once before training, then dropped"
            + (" (the adapters off)" if cfg.lora.enabled and not cfg.reference else ""))


def plan_rl(cfg, stage: str, resume: bool = False) -> Plan:
    from tether.plan.rl_inputs import rl_inputs

    plan = Plan(stage)
    _common(plan, cfg, stage, resume)
    inputs = rl_inputs(cfg)
    _tokenizer(plan, inputs.tokenizer, cfg.model.tokenizer or cfg.model.name_or_path)
    prompts = inputs.prompts
    capped = f", {inputs.prompt_limit_capped_by}" if inputs.prompt_limit_capped_by else ""
    plan.add("data", f"prompts {cfg.prompts}: {len(prompts.ids)} prompts ({prompts.dropped_long} dropped as too "
                     f"long; prompt limit {inputs.prompt_limit} tokens{capped})")
    if inputs.eval_prompts is not None:
        plan.add("data", f"eval.prompts {cfg.eval.prompts}: {inputs.eval_prompts} prompts, judge "
                         f"{cfg.eval.judge or '(none: proxy score and KL only)'}, every {cfg.eval.every} iterations")
    for line in inputs.role_lines:
        plan.add("roles", line)
    _placement(plan, cfg)
    p, world = cfg.rl, _world()
    episodes = cfg.episodes
    per_prompt = f" x {cfg.samples_per_prompt} responses" if cfg.samples_per_prompt > 1 else ""
    response = episode_budget(cfg) if cfg.environment.enabled else cfg.rollout.max_new_tokens
    each = (f"up to {response} response tokens each ({cfg.environment.kind} environment: up to "
            f"{cfg.environment.max_turns} turns of {cfg.rollout.max_new_tokens} new tokens, observations included)"
            if cfg.environment.enabled else f"up to {response} new tokens each")
    plan.add("batches", f"rollout: {cfg.rollout.batch_size} prompts{per_prompt} = {episodes} episodes per iteration, "
                        f"{each}")
    minibatches = math.ceil(episodes / p.minibatch_size)
    micro = p.minibatch_size // p.grad_accum_steps // world
    split = (f"micro-batches of at most {p.micro_batch_tokens} tokens, {_budget_cost(cfg)}"
             if p.micro_batch_tokens is not None else f"{p.grad_accum_steps} micro-batch(es) x {micro}")
    plan.add("batches", f"update: {p.epochs} epochs x {minibatches} minibatches of {p.minibatch_size} "
                        f"({world} rank(s) x {split}) = "
                        f"{p.epochs * minibatches} optimiser steps per iteration per trained role")
    plan.add("batches", _padding_line(cfg))
    plan.add("steps", f"{p.iterations} iterations = {p.iterations * episodes:,} episodes, "
                      f"{p.iterations * p.epochs * minibatches:,} actor optimiser steps")
    strategies = {"actor": cfg.distributed.strategy, "critic": cfg.critic.strategy or cfg.distributed.strategy}
    _memory(plan, inputs.role_sizes, strategies, cfg.model.dtype, inputs.actor_params)
    prompt = max((len(ids) for ids in prompts.ids), default=inputs.prompt_limit)
    _peak(plan, inputs.actor_config, inputs.role_sizes, Workload(
        stage, micro_batch=max(1, micro), batch=max(1, episodes // world), prompt=prompt,
        response=response, precision=cfg.run.precision, dtype=cfg.model.dtype,
        grad_ckpt=cfg.gradient_checkpointing, entropy=cfg.rl.entropy_coef > 0,
        parallel_roles=bool(getattr(cfg.cpu, "parallel_roles", False)) and settings_device(cfg) == "cpu",
        retained_heap=bool(getattr(cfg.cpu, "retain_memory", False)) and settings_device(cfg) == "cpu",
        captured_logprobs=captured_logprobs(cfg.rollout), decode_copy=_decode_copy(cfg), device=_allocator(cfg)))
    for line in engine_class(cfg.rollout.engine).memory_lines(inputs.actor_params, human_bytes):
        plan.add("memory", line)  # what the generation engine adds (its own copy of the weights, a KV cache)
    if cfg.rollout.max_staleness:
        itemsize = {"float32": 4, "bfloat16": 2, "float16": 2}.get(str(cfg.model.dtype), 4)
        plan.add("memory", f"sampling worker (rollout.max_staleness={cfg.rollout.max_staleness}): a process of its "
                           f"own with another copy of the policy ({human_bytes(inputs.actor_params * itemsize)}), its "
                           f"KV cache and up to {cfg.rollout.max_staleness} rollouts sampled ahead; not in the peak "
                           "above, which is this process's")
    return plan


def _decode_copy(cfg) -> int:
    """Bytes per weight of the lean decode loop's packed copy of the actor's linears: oneDNN packs
    them once per rollout on CPU (cpu.linear_backend): 4 (fp32, or bf16 and its cast); 0 elsewhere."""
    if cfg.rollout.engine != "lean" or settings_device(cfg) != "cpu":
        return 0
    from tether.engines.cpu.onednn import resolve_backend

    autocast = {"bf16": "bf16", "fp16": "fp16"}.get(cfg.run.precision, "none")
    if resolve_backend(cfg.cpu.linear_backend, autocast) != "onednn" or autocast == "fp16":
        return 0
    return 4


def _allocator(cfg) -> str:
    """How the memory model counts the run's peak: "cuda" (the caching allocator's live tensors) on a
    CUDA device, else "cpu" (peak RSS)."""
    return "cuda" if settings_device(cfg) == "cuda" else "cpu"


def settings_device(cfg) -> str:
    """The device type the run's engines use (cpu, cuda, ...)."""
    from tether.engines import engine_settings

    return str(engine_settings(cfg.run, cfg.model, getattr(cfg, "cpu", None)).device).split(":")[0]


def _placement(plan: Plan, cfg, groups: list[tuple[str, ...]] | None = None) -> None:
    """Where the roles run: this process, or Ray worker groups with what each reserves.
    ``groups``: a supervised stage's (its one trained role); None: the RL roles' groups."""
    from tether.roles.groups import role_groups

    engine = f"; rollouts on {cfg.rollout.engine}" if groups is None else ""
    if cfg.placement.backend != "ray":
        plan.add("placement", f"local: every role in this process{' (each rank)' if _world() > 1 else ''}{engine}")
        return
    import importlib.util

    from tether.placement.ray_placement import import_ray, primary_role

    if importlib.util.find_spec("ray") is None:  # the run's error, without importing Ray when it is there
        import_ray()
    ray = cfg.placement.ray
    plan.add("placement", f"ray: {ray.address or 'a local Ray cluster started on this machine'}{engine}")
    for group in role_groups(cfg, ray.colocate) if groups is None else groups:
        primary = primary_role(group, ray.colocate)  # whose resources the run reserves for the group
        res = ray.resources(primary)
        extra = f", {res.resources}" if res.resources else ""
        plan.add("placement", f"  group {' + '.join(group)}: {res.num_workers} worker(s) x "
                              f"{res.num_cpus:g} CPU, {res.num_gpus:g} GPU{extra} (placement.ray.roles.{primary})")


def dry_run(stage: str, cfg, resume: bool = False) -> Plan:
    """The plan of ``tether STAGE`` with ``cfg``; raises the run's own errors on bad input. Under
    torchrun it joins the process group as the run would, so batch splits and the per-rank memory
    are those of that many ranks."""
    from tether.distributed import init_distributed
    from tether.registry.stages import stage_spec

    spec = stage_spec(stage, "dry_run")
    with init_distributed(cfg.run.device, getattr(cfg, "distributed", None)):
        return spec.planner()(cfg, stage, resume)

