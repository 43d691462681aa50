"""`tether bench --stage`: one stage's step padded and packed, interleaved in one run.

Each row is a prompt and a response (a pair's prompt and two responses) of drawn lengths, its
token ids random in the vocabulary (never a special token, so the pad id appears only as
padding). The same batch is put through the stage's real step with the models' passes padded
(``tether.models.packing.set_padding_free(model, False)``) and packed (``True``), alternating
padded, packed, padded, packed ... after one warm-up step of each; the report holds medians.

What a step is, by stage (each one optimiser step of the stage's own loss, through its role):

- ``sft``: :func:`tether.objectives.shared.sft_batch_loss` on prompt + response rows;
- ``rm``: the Bradley-Terry loss of :func:`tether.objectives.reward_model.pair_scores` on pairs;
- ``dpo``: :func:`tether.algos.dpo.dpo_loss` of :func:`tether.objectives.shared.pair_logprobs`, against
  reference log-probs computed once before the first step;
- ``ppo`` / ``grpo``: a synthetic rollout (prompts left-padded, responses right-padded) scored by
  the RL loop's passes (actor and reference log-probs, the critic's values, the reward model's
  scores: ``passes_s``) and one epoch of the algorithm's update over it as one minibatch
  (``step_s``: the actor's and, for PPO, the critic's optimiser step).

``tokens_per_s``: the batch's real tokens (every sequence's prompt and response once; a pair
counts both of its sequences) per second of the step. ``padding_fraction``: the share of the
tokens entering the models' first transformer layer, over the step's passes, that were not real
tokens: counted by a hook on that layer, so it is whatever the model actually computed (a packed
pass's attention may still pad rows of similar length inside its SDPA groups,
:mod:`tether.models.packing`; the layers' linears see the real tokens only).
"""

from __future__ import annotations

import math
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from tether.bench.lengths import (
    LENGTH_RANGE,
    LONGTAIL_MU,
    LONGTAIL_SIGMA,
    MAX_POSITIONS,
    PAIR_STAGES,
    padded_tokens,
    padding_fraction,
    random_rows,
    rl_stages,
    scoring_passes,
    stages,
    step_lengths,
    update_passes,
)
from tether.bench.setup import SIZES, build_models, word_tokenizer

#: Rows per step: sequences (SFT), pairs (RM, DPO) or prompts (PPO, GRPO: times the group).
DEFAULT_ROWS = 16
#: Rows per micro-batch of the RL update (rl.grad_accum_steps follows from it).
RL_MICRO_ROWS = 16

class TrunkTokens:
    """Counts the tokens entering the first transformer layer of each of ``models`` (positions
    of the hidden states it is called on: B x T of a padded pass, N of a packed one)."""

    def __init__(self, models):
        self.tokens = 0
        self.handles = []
        for model in models:
            layer = first_layer(model)
            if layer is None:
                raise ValueError(f"{type(model).__name__}: no transformer layer list (layers / h) to count tokens at")
            self.handles.append(layer.register_forward_pre_hook(self._count, with_kwargs=True))

    def _count(self, module, args, kwargs):
        hidden = args[0] if args else kwargs.get("hidden_states")
        if hidden is not None:
            self.tokens += hidden.numel() // hidden.shape[-1]

    def take(self) -> int:
        """The count since the last take."""
        n, self.tokens = self.tokens, 0
        return n

    def close(self) -> None:
        for h in self.handles:
            h.remove()


def first_layer(model) -> torch.nn.Module | None:
    """The first block of a model's transformer layer list (Llama/Qwen2 ``layers``, GPT-2 ``h``)."""
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.ModuleList) and name.rsplit(".", 1)[-1] in ("layers", "h") and len(module):
            return module[0]
    return None


def packing_core():
    """``tether.models.packing.set_padding_free``, or None where this tether has no packing."""
    try:
        from tether.models.packing import set_padding_free
    except ImportError:
        return None
    return set_padding_free


def set_packed(models, packed: bool) -> None:
    """Every model's passes packed or padded (nothing to set without the packing core)."""
    setter = packing_core()
    if setter is not None:
        for model in models:
            setter(model, packed)


# -- the stages' steps ---------------------------------------------------------------------------

@dataclass
class StageStep:
    """One stage's step over a fixed batch. ``run(packed, count)`` -> {"step": seconds,
    "computed": trunk tokens of the step, "passes": {name: seconds}, "passes_computed": trunk
    tokens of the scoring passes}, ``count()`` giving the trunk tokens since its last call;
    ``models``: every model its passes run (set padded or packed, counted)."""

    run: Callable[[bool, Callable[[], int]], dict]
    models: list
    rows: int
    sequences: int


def stage_config(config_class, rows: int, precision: str, device: str, seed: int, overrides=()):
    """A supervised stage's config for the bench (no data or model is read from it): ``rows`` per
    batch, the run's precision, device and seed, and the command line's ``overrides``."""
    from tether.config import load_config

    return load_config(config_class, None, ["model.name_or_path=bench", "data.train=bench", f"run.seed={seed}",
                                            f"run.precision={precision}", f"run.device={device}",
                                            f"optim.batch_size={rows}", *overrides])


def _micro(cfg, rows: list[int], tokens_of, packed: bool):
    """The supervised loop's micro-batches: optim.micro_batch_tokens bins, or grad_accum_steps slices."""
    if getattr(cfg.optim, "micro_batch_tokens", None) is not None:
        from tether.loops.micro_batches import rows_by_token_budget

        return rows_by_token_budget(rows, tokens_of, cfg.optim.micro_batch_tokens, not packed)
    return len(rows) // cfg.optim.grad_accum_steps


def supervised_step(stage: str, setup_models: dict, tokenizer, data: list, precision: str, device: str,
                    seed: int, overrides=(), total_steps: int = 100) -> StageStep:
    """SFT, RM or DPO: the stage's loss through a :class:`~tether.roles.supervised.SupervisedModel`
    over the trained-model builder's engine, as the stage builds them."""
    from tether.algos import bradley_terry_loss
    from tether.algos.dpo import dpo_loss
    from tether.config import DPOConfig, RewardModelConfig, SFTConfig
    from tether.data import collate_right
    from tether.data.tokenize import TokenizedPreference
    from tether.engines import engine_settings
    from tether.objectives.reward_model import pair_scores
    from tether.objectives.shared import sft_batch_loss
    from tether.objectives.shared import optimizer_spec, pair_logprobs
    from tether.roles.builder import build_trained
    from tether.roles.supervised import SupervisedModel

    config_class = {"sft": SFTConfig, "rm": RewardModelConfig, "dpo": DPOConfig}[stage]
    cfg = stage_config(config_class, len(data), precision, device, seed, overrides)
    model = setup_models["reward"] if stage == "rm" else setup_models["policy"]
    engine = build_trained(model, optimizer_spec(cfg.optim, total_steps), engine_settings(cfg.run, cfg.model, cfg.cpu), scalar=stage == "rm")
    pad, autocast = tokenizer.pad_token_id, engine.autocast
    if stage == "sft":
        items = [(p + r, [0] * len(p) + [1] * len(r)) for p, r in data]

        def loss(module, rows):
            chunk = [items[i] for i in rows]
            batch = engine.to_device(collate_right([ids for ids, _ in chunk], pad, [m for _, m in chunk]))
            value = sft_batch_loss(module, batch, int(batch["loss_mask"][:, 1:].sum()), autocast)
            return value, {"train/loss": float(value.detach())}

        role = SupervisedModel(engine, loss, weight_of=lambda i: float(sum(items[i][1][1:])), name="sft loss")

        def tokens_of(i: int) -> int:
            return len(items[i][0])
    else:
        pairs = [TokenizedPreference(prompt_ids=p, chosen_ids=c, rejected_ids=r) for p, c, r in data]

        def tokens_of(i: int) -> int:  # both sequences of the pair
            return 2 * len(pairs[i].prompt_ids) + len(pairs[i].chosen_ids) + len(pairs[i].rejected_ids)
        if stage == "rm":
            def loss(module, rows):
                c, r = pair_scores(module, [pairs[i] for i in rows], pad, autocast)
                value = bradley_terry_loss(c, r)
                return value, {"train/loss": float(value.detach())}
        else:
            set_packed([engine.model], False)
            ref = torch.stack(engine.infer(pair_logprobs, pairs, pad, autocast), dim=1).detach()  # (N, 2)
            beta, kind, smoothing = cfg.dpo.beta, cfg.dpo.loss, cfg.dpo.label_smoothing

            def loss(module, rows):
                pc, pr = pair_logprobs(module, [pairs[i] for i in rows], pad, autocast)
                r = ref[torch.tensor(rows, device=ref.device)]
                value = dpo_loss(pc, pr, r[:, 0], r[:, 1], beta, kind, smoothing)
                return value, {"train/loss": float(value.detach())}

        role = SupervisedModel(engine, loss, name=f"{stage} loss")
    rows = list(range(len(data)))
    counter = {"step": 0}

    def run(packed: bool, count: Callable[[], int]) -> dict:
        micro = _micro(cfg, rows, tokens_of, packed)
        count()
        t0 = _clock(engine.device)
        role.update(rows, micro, counter["step"])
        counter["step"] += 1
        return {"step": _clock(engine.device) - t0, "computed": count(), "passes": {}, "passes_computed": 0}

    return StageStep(run, [engine.model], len(data), len(data) * (2 if stage in PAIR_STAGES else 1))


def rl_config(stage: str, prompts: int, response_length: int, precision: str, device: str, seed: int,
              overrides=()):
    """The RL stage's config: one epoch, the whole batch one minibatch, micro-batches of
    :data:`RL_MICRO_ROWS` rows (unless the overrides size them), the benchmark's other settings."""
    from tether.bench.runner import bench_overrides
    from tether.config import RLConfig, load_config
    from tether.config.rl_blocks import default_group_size

    episodes = prompts * default_group_size(stage)
    sized = any(o.startswith(("rl.grad_accum_steps=", "rl.micro_batch_tokens=", "rl.minibatch_size="))
                for o in overrides)
    steps = max(1, episodes // RL_MICRO_ROWS)
    accum = [] if sized or episodes % steps else [f"rl.grad_accum_steps={steps}"]
    return load_config(RLConfig, None, bench_overrides(prompts, response_length, 1, 1, precision, minibatches=1,
                                                         seed=seed, algorithm=stage, device=device)
                       + accum + list(overrides))


def rl_rollout(data: list, pad_id: int):
    """A :class:`~tether.types.Rollout` of ``(prompt, response)`` id rows: prompts left-padded,
    responses right-padded, every response ended (as :func:`tether.objectives.shared.pair_logprobs` builds one)."""
    from tether.data import collate_left, collate_right
    from tether.types import Rollout

    prompt_ids, prompt_mask = collate_left([p for p, _ in data], pad_id)
    resp = collate_right([r for _, r in data], pad_id)
    n = len(data)
    return Rollout(prompt_ids, prompt_mask, resp["input_ids"], resp["attention_mask"],
                   ended=torch.ones(n, dtype=torch.bool), prompts=[""] * n, responses=[""] * n)


def rl_step(stage: str, setup_models: dict, tokenizer, data: list, cfg) -> StageStep:
    """PPO or GRPO: the RL loop's passes over a synthetic rollout (``passes``) and its update of
    one epoch (``step``), through the roles :func:`tether.roles.build.make_roles` builds."""
    from dataclasses import replace

    from tether.loops.common import Timer
    from tether.loops.rl_run import rl_trainer
    from tether.loops.rl_setup import PromptSet
    from tether.roles.build import make_roles
    from tether.roles.groups import role_names

    m = setup_models
    roles = make_roles(cfg, m["policy"], m["reference"], m["critic"], m["reward"], tokenizer,
                       needed=role_names(cfg))
    trainer = rl_trainer(cfg, roles, PromptSet(ids=[p for p, _ in data], texts=[""] * len(data), dropped_long=0))
    # rl.micro_batch_tokens bins by padded or packed cost as model.padding_free says: one config per mode.
    cfgs = {packed: replace(cfg, model=replace(cfg.model, padding_free=packed))
            if hasattr(cfg.model, "padding_free") else cfg for packed in (False, True)}
    rollout = rl_rollout(data, tokenizer.pad_token_id)
    device = roles.actor.engine.device
    models = _role_models(roles)

    def run(packed: bool, count: Callable[[], int]) -> dict:
        trainer.cfg = cfgs[packed]
        timer = Timer()
        count()
        exp, _ = trainer.make_experience(rollout, timer)
        scored = count()
        t0 = _clock(device)
        trainer.update(exp)
        step = _clock(device) - t0
        passes = {name: timer.times.get(f"timing/{name}", 0.0) for name in scoring_passes(stage)}
        return {"step": step, "computed": count(), "passes": passes, "passes_computed": scored}

    return StageStep(run, models, len(data), len(data))


def _role_models(roles) -> list:
    """The model each of the RL roles runs (actor, reference, critic, reward), each once."""
    out = []
    for role in (roles.actor, roles.reference, roles.critic, roles.reward):
        engine = getattr(role, "engine", None)
        model = getattr(engine, "model", None)
        if model is not None and all(model is not seen for seen in out):
            out.append(model)
    return out


def _clock(device) -> float:
    """``time.perf_counter()`` once the device's queued work is done (CUDA runs asynchronously)."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


# -- the measurement -----------------------------------------------------------------------------

def _median(xs):
    return statistics.median(xs) if xs else float("nan")


def _stats(xs: list[int]) -> dict:
    return {"min": min(xs), "median": _median(xs), "mean": round(statistics.fmean(xs), 1), "max": max(xs)}


def run_padding_bench(stage: str, lengths: str = "demo", size: str = "small", rows: int | None = None,
                      iterations: int = 5, seed: int = 0, threads: int = 0, precision: str = "fp32",
                      device: str = "cpu", overrides=()) -> dict:
    """Padded vs packed steps of ``stage`` on ``lengths`` rows, interleaved; the report (JSON-able).

    ``rows``: sequences (SFT), pairs (RM, DPO) or prompts (RL; times the algorithm's group), default
    :data:`DEFAULT_ROWS`; ``iterations``: timed steps per mode, after one warm-up step of each.
    """
    from tether.bench.runner import versions
    from tether.config.rl_blocks import default_group_size
    from tether.engines.cpu.describe import cpu_description

    if stage not in stages():
        raise ValueError(f"stage must be one of {stages()}, got {stage!r}")
    if threads:
        torch.set_num_threads(threads)
    rows = rows or DEFAULT_ROWS
    group = default_group_size(stage) if stage in rl_stages() else 1
    lens = step_lengths(lengths, stage, rows, group, seed)
    dims = SIZES[size]
    tokenizer = word_tokenizer(dims.vocab)
    data = random_rows(lens, dims.vocab, seed)
    rl = stage in rl_stages()
    cfg = rl_config(stage, rows, max(lens.responses), precision, device, seed, overrides) if rl else None
    models = build_models(dims, tokenizer, seed, reference=rl, critic=rl and cfg.needs_critic,
                          max_positions=MAX_POSITIONS)
    if rl:
        step = rl_step(stage, models, tokenizer, data, cfg)
    else:
        step = supervised_step(stage, models, tokenizer, data, precision, device, seed, overrides,
                               total_steps=2 * (iterations + 1))
    real, padded = padded_tokens(stage, lens)
    counter = TrunkTokens(step.models)
    runs: dict[bool, list[dict]] = {False: [], True: []}
    try:
        for i in range(iterations + 1):
            for packed in (False, True):
                set_packed(step.models, packed)
                out = step.run(packed, counter.take)
                name = "packed" if packed else "padded"
                label = "warm-up" if i == 0 else f"{i}/{iterations}"
                print(f"[bench {stage} {lengths} {size}] {name} {label}: {out['step']:.3f} s", file=sys.stderr,
                      flush=True)
                if i:  # the first step of each mode is a warm-up
                    runs[packed].append(out)
    finally:
        counter.close()
        set_packed(step.models, True)
    report = {
        "stage": stage,
        "lengths": lengths,
        "padded": mode_entry(runs[False], real, update_passes(stage)),
        "packed": mode_entry(runs[True], real, update_passes(stage)),
    }
    report["speedup"] = report["packed"]["tokens_per_s"] / report["padded"]["tokens_per_s"]
    if rl:
        report["passes_speedup"] = report["packed"]["passes_tokens_per_s"] / report["padded"]["passes_tokens_per_s"]
    report["setup"] = {
        "stage": stage, "lengths": lengths, "size": size, "precision": precision, "device": device,
        "rows": step.rows, "prompts": rows if rl else None, "group": group if rl else None,
        "sequences": step.sequences,
        "real_tokens_per_step": real, "padded_batch_tokens": padded,
        "padded_batch_padding_fraction": padding_fraction(real, padded),
        "prompt_tokens": _stats(lens.prompts), "response_tokens": _stats(lens.responses + (lens.rejected or [])),
        "length_model": ({"distribution": "lognormal", "mu": LONGTAIL_MU, "sigma": LONGTAIL_SIGMA,
                          "median": round(math.exp(LONGTAIL_MU)), "clip": list(LENGTH_RANGE)}
                         if lengths == "longtail" else {"source": "tether.tasks.arith (built in memory)"}),
        "max_position_embeddings": MAX_POSITIONS,
        "iterations": iterations, "warmup_steps_per_mode": 1, "order": "padded, packed, alternating",
        "seed": seed, "threads": threads, "torch_threads": torch.get_num_threads(),
        "overrides": list(overrides),
        "micro_batches": ({"grad_accum_steps": cfg.rl.grad_accum_steps,
                           "micro_batch_tokens": getattr(cfg.rl, "micro_batch_tokens", None)} if rl else None),
        "packing_core": packing_core() is not None,
    }
    report["versions"] = versions()
    report["cpu"] = cpu_description()
    return report


def mode_entry(runs: list[dict], real: int, passes: int) -> dict:
    """One mode's medians over ``runs``: ``step_s``; ``tokens_per_s`` (``real`` tokens over the
    step); ``padding_fraction``: 1 - real tokens x ``passes`` (the step's full passes over the batch)
    over the trunk tokens the step computed; for the RL stages also ``passes_s`` (each scoring pass
    and their total), ``passes_tokens_per_s`` and ``passes_padding_fraction`` (the same counts
    over the scoring passes, one full pass each)."""
    steps = [r["step"] for r in runs]
    computed = _median([r["computed"] for r in runs])
    entry = {"step_s": _median(steps), "tokens_per_s": _median([real / max(s, 1e-9) for s in steps]),
             "padding_fraction": padding_fraction(real * passes, computed),
             "computed_tokens_per_step": computed, "steps_s": steps}
    names = list(runs[0]["passes"]) if runs else []
    if names:
        totals = [sum(r["passes"].values()) for r in runs]
        entry["passes_s"] = {name: _median([r["passes"][name] for r in runs]) for name in names} | {
            "total": _median(totals)}
        entry["passes_tokens_per_s"] = _median([real / max(t, 1e-9) for t in totals])
        entry["passes_padding_fraction"] = padding_fraction(real * len(names),
                                                            _median([r["passes_computed"] for r in runs]))
    return entry
