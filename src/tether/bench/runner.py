"""Run PPO iterations of the benchmark configuration and report time, FLOPs and MFU.

The configuration (docs/performance.md): 16 prompts of 16-24 words (+BOS) per iteration, 32 new tokens
always generated (EOS forbidden until the cap), temperature 0.7, no top-k/top-p; 4 epochs x
2 minibatches = 8 optimiser steps for actor and critic; k1 KL in the reward, beta 0.05
fixed, clip 0.2, value clip 0.2, vf coef 0.1, gamma 1, lambda 0.95, AdamW. The first
iteration is a warm-up: medians are over iterations 2..N.
"""

from __future__ import annotations

import logging
import platform
import resource
import statistics
import sys
import time

import torch

from tether.registry.algorithms import DEFAULT_ALGORITHM
from tether.common.runtime import world_size
from tether.bench.flops import iteration_flops
from tether.bench.peak import bf16_supported, machine_peak_gflops
from tether.bench.role_memory import predicted_memory, role_memory
from tether.bench.profile import profiled_update, summarize_ops
from tether.bench.setup import PROMPT_WORDS, SIZES, build_setup, build_source_setup
from tether.rollout import captured_logprobs, engine_spec
from tether.engines.cpu.describe import cpu_description

log = logging.getLogger(__name__)

PHASES = ("generate", "logprobs", "ref_logprobs", "values", "reward", "advantages",
          "update_forward", "update_backward", "update_optimizer")
# Timer keys of RLTrainer.step -> bench phase names.
TIMER_KEYS = {
    "timing/rollout": "generate",
    "timing/logprobs": "logprobs",
    "timing/ref_logprobs": "ref_logprobs",
    "timing/values": "values",
    "timing/reward": "reward",
    "timing/advantages": "advantages",
    "timing/update/forward": "update_forward",
    "timing/update/backward": "update_backward",
    "timing/update/optimizer": "update_optimizer",
}
PRECISIONS = ("fp32", "bf16")
ASYNC_TIMINGS = ("engine_generate", "rollout_wait", "engine_wait")  # timing/<key> of an asynchronous iteration
PHASES_NOTE = ("Wall seconds per phase (medians). update = update_forward + update_backward + "
               "update_optimizer + update_other.")
PHASES_NOTE_PARALLEL = (
    "Wall seconds per phase (medians). The actor's and the critic's update passes run side by side "
    "(cpu.parallel_roles): update_forward, update_backward and update_optimizer are seconds summed "
    "over both threads (the optimiser's share also has the main thread's), so they can add up to more "
    "than update, and update_other is not defined.")


def bench_overrides(batch: int, response_length: int, epochs: int, iterations: int, precision: str,
                    minibatches: int = 2, seed: int = 0, algorithm: str = DEFAULT_ALGORITHM, device: str = "cpu") -> list[str]:
    """The benchmark's PPO config; a critic-free ``algorithm`` (grpo, ...) drops the critic's keys
    and samples its default group per prompt (``batch`` stays the prompts per iteration)."""
    from tether.config.rl_blocks import default_group_size
    from tether.config.stages import algorithm_needs_critic

    episodes = batch * default_group_size(algorithm)
    if episodes % minibatches:
        raise ValueError(f"batch {batch} is not divisible into {minibatches} minibatches")
    critic = algorithm_needs_critic(algorithm)
    value_keys = ["ppo.value_clip=0.2", "ppo.vf_coef=0.1", "rl.gamma=1.0", "ppo.lam=0.95"] if critic else []
    return [f"algorithm={algorithm}", *value_keys,
        "prompts=bench", "model.name_or_path=bench", "reward.models=[bench]",
        "reward.eos_penalty=null", "reward.normalize=none",
        f"run.seed={seed}", "run.progress=false",
        f"rollout.batch_size={batch}", f"rollout.max_new_tokens={response_length}",
        f"rollout.min_new_tokens={response_length}", "rollout.temperature=0.7",
        "rollout.top_k=0", "rollout.top_p=1.0",
        f"rl.iterations={iterations}", f"rl.epochs={epochs}", f"rl.minibatch_size={episodes // minibatches}",
        "rl.clip=0.2", "kl.estimator=k1", "kl.placement=reward", "kl.controller=fixed", "kl.coef=0.05",
        f"run.precision={precision}", f"run.device={device}",
    ]


def _median(xs):
    return statistics.median(xs) if xs else float("nan")


def versions() -> dict:
    import tokenizers
    import transformers

    import tether

    return {"tether": getattr(tether, "__version__", "0.1.0"), "torch": torch.__version__,
            "transformers": transformers.__version__, "tokenizers": tokenizers.__version__,
            "python": platform.python_version()}


def peak_rss_mb() -> float:
    """This process's own peak RSS (not ru_maxrss, which a child inherits: tether.metrics.memory)."""
    from tether.metrics.memory import own_peak_rss_mb

    return own_peak_rss_mb()


def rss_mb() -> float | None:
    """This process's resident memory now (``VmRSS``, MB); None where there is no ``/proc``."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def run_bench(size: str = "small", precision: str = "fp32", batch: int = 16, response_length: int = 32,
              epochs: int = 4, threads: int = 0, iterations: int = 8, seed: int = 0,
              measure_peak: bool = True, overrides: list[str] = (), trainer_hook=None,
              profile: bool = False, model=None, algorithm: str = DEFAULT_ALGORITHM, device: str = "cpu",
              prompt_tokens: tuple[int, int] = PROMPT_WORDS) -> dict:
    """Run ``iterations`` PPO iterations at ``size`` and return the report (a JSON-able dict).

    ``profile``: run one more iteration (not timed) with every operator of its update timed and
    add ``profile`` (matmul seconds and GFLOP/s, non-matmul seconds, top operators).
    ``model``: a :class:`tether.bench.shapes.ModelSource` (a real architecture's shape, random
    init) instead of ``size``; its prompts are ``prompt_tokens`` (min, max) random tokens.
    ``algorithm``: ppo or a critic-free one (tether.algorithms); ``device``: run.device.
    """
    from tether.config import RLConfig, load_config
    from tether.loops.rl_run import rl_trainer
    from tether.roles.build import make_roles
    from tether.roles.groups import role_names
    from tether.roles.sources import SHARED_WITH_CRITIC

    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {list(PRECISIONS)}")
    if precision == "bf16" and not bf16_supported():
        log.warning("bf16 is not native on this CPU: autocast will emulate it and run slower.")
    if threads:
        torch.set_num_threads(threads)
    label = size if model is None else model.name
    cfg = load_config(RLConfig, None, bench_overrides(batch, response_length, epochs, iterations, precision,
                                                        seed=seed, algorithm=algorithm, device=device)
                      + list(overrides))
    retained = cfg.cpu.retain_memory and _retained()  # before the models' memory is allocated
    on_device = torch.device(device).type == "cuda"
    if on_device:
        torch.cuda.reset_peak_memory_stats()
    baseline_rss = rss_mb()
    # With LoRA the reference is the actor's base with the adapters off, and the reward model the
    # critic's (critic.init=reward): no copies of their own.
    shared_rm = cfg.critic.lora.enabled and cfg.critic.init == "reward" and not cfg.critic.shared_trunk
    critic_model = cfg.needs_critic and not shared_rm
    if model is None:
        setup = build_setup(SIZES[size], n_prompts=batch * iterations, seed=seed, reference=not cfg.lora.enabled,
                            critic=critic_model)
    else:
        setup = build_source_setup(model, n_prompts=batch * iterations, seed=seed, reference=not cfg.lora.enabled,
                                   critic=critic_model, prompt_tokens=prompt_tokens)
    dims = setup.dims
    m = setup.models
    params = _params(dims, cfg, m if model is not None else None)
    # Ray workers and an engine with its own copy of the weights load the models from disk.
    if cfg.placement.backend == "ray" or engine_spec(cfg.rollout.engine).holds_own_weights:
        roles, trainer = None, _disk_trainer(cfg, setup, list(overrides), batch, response_length, epochs, iterations,
                                            precision, seed)
    else:
        critic, reward = (m["reward"], SHARED_WITH_CRITIC) if shared_rm else (m["critic"], m["reward"])
        roles = make_roles(cfg, m["policy"], m["reference"], critic, reward, setup.tokenizer, needed=role_names(cfg))
        trainer = rl_trainer(cfg, roles, setup.prompts)
    if trainer_hook is not None:
        trainer_hook(trainer)

    parallel = trainer.update_streams() > 1
    prompt_len = max(len(ids) for ids in setup.prompts.ids)
    predicted = predicted_memory(roles, cfg, m["policy"].config, prompt_len, parallel) if roles is not None else None
    rows = []
    for i in range(iterations):
        prompt_ids, _ = trainer.next_prompts()
        faults0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        t0 = time.perf_counter()
        stats = trainer.step()
        wall = time.perf_counter() - t0
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults0
        # FLOPs are linear in each episode's lengths, so the mean response length gives the exact sum.
        lengths = [stats["response/length_mean"]] * len(prompt_ids)
        # The convention: every episode counts the batch's longest prompt (the rollout batch
        # is a rectangle of left-padded prompts). "real" counts each episode's own tokens only.
        longest = max(len(p) for p in prompt_ids)
        shared = cfg.critic.shared_trunk
        flops = iteration_flops(dims, dims, [longest] * len(prompt_ids), lengths, epochs, shared, cfg.needs_critic)
        flops_real = iteration_flops(dims, dims, [len(p) for p in prompt_ids], lengths, epochs, shared,
                                     cfg.needs_critic)
        phases = {name: stats.get(key, 0.0) for key, name in TIMER_KEYS.items()}
        phases["update"] = stats.get("timing/update", 0.0)
        split = phases["update_forward"] + phases["update_backward"] + phases["update_optimizer"]
        # With parallel roles the forward/backward spans are per-thread seconds that overlap.
        phases["update_other"] = max(phases["update"] - split, 0.0) if split and not parallel else None
        top = sum(stats.get(k, 0.0) for k in ("timing/rollout", "timing/logprobs", "timing/ref_logprobs",
                                               "timing/values", "timing/reward", "timing/advantages",
                                               "timing/update"))
        phases["other"] = max(wall - top, 0.0)
        rows.append({"wall": wall, "phases": phases, "flops": flops, "flops_real": flops_real,
                     "generated_tokens": sum(lengths),
                     "forward_tokens": sum(len(p) + a for p, a in zip(prompt_ids, lengths)),
                     "trained_tokens": epochs * sum(len(p) + a for p, a in zip(prompt_ids, lengths)),
                     "ratio_deviation": trainer.last_ratio_deviation, "page_faults": faults,
                     "score": stats.get("objective/score"), "kl": stats.get("objective/kl"),
                     "async": {k: stats.get(f"timing/{k}") for k in ASYNC_TIMINGS}})
        log.info("iteration %d: %.3f s", i + 1, wall)
        print(f"[bench {label} {cfg.algorithm} {precision}] iteration {i + 1}/{iterations}: {wall:.3f} s",
              file=sys.stderr, flush=True)

    timed = rows[1:] if len(rows) > 1 else rows
    walls = [r["wall"] for r in timed]
    phase_names = list(PHASES) + ["update", "update_other", "other"]
    phases_s = {name: None if timed[0]["phases"][name] is None else _median([r["phases"][name] for r in timed])
                for name in phase_names}
    flops_g = {k: statistics.fmean(r["flops"][k] for r in timed) / 1e9 for k in timed[0]["flops"]}
    flops_real_g = {k: statistics.fmean(r["flops_real"][k] for r in timed) / 1e9 for k in timed[0]["flops"]}
    report = {
        "size": size if model is None else None,
        "model": None if model is None else model.name,
        "algorithm": cfg.algorithm,
        "device": str(torch.device(device)),
        "precision": precision,
        "params": params,
        "config": {"batch": batch, "episodes": cfg.episodes, "response_length": response_length, "epochs": epochs,
                   "prompt_tokens": None if model is None else list(prompt_tokens),
                   "minibatch_size": cfg.rl.minibatch_size,
                   "optimizer_steps": epochs * (cfg.episodes // cfg.rl.minibatch_size),
                   "iterations": iterations, "timed_iterations": len(timed), "temperature": cfg.rollout.temperature,
                   "parallel_roles": parallel, "precision": cfg.run.precision, "compile": cfg.rl.compile,
                   "trim_last_layer": cfg.rl.trim_last_layer, "shared_trunk": cfg.critic.shared_trunk,
                   "linear_backend": cfg.cpu.linear_backend,
                   "linear_backend_resolved": roles.linear_backend if roles is not None else None,
                   "placement": cfg.placement.backend,
                   "retain_memory": retained, "lora_r": cfg.lora.r,
                   "gradient_checkpointing": cfg.gradient_checkpointing},
        "phases_note": PHASES_NOTE_PARALLEL if parallel else PHASES_NOTE,
        "iteration_s": {"median": _median(walls), "min": min(walls), "max": max(walls)},
        "iterations_s": walls,
        "first_iteration_s": rows[0]["wall"],
        "phases_s": phases_s,
        "generated_tokens_per_s": _median([r["generated_tokens"] / max(r["phases"]["generate"], 1e-9) for r in timed]),
        "trained_tokens_per_s": _median([r["trained_tokens"] / max(r["phases"]["update"], 1e-9) for r in timed]),
        "tokens_per_s": phase_tokens_per_s(timed, cfg.needs_critic, _captured(cfg)),
        "peak_rss_mb": round(peak_rss_mb(), 1),
        "peak_device_mb": round(torch.cuda.max_memory_allocated() / 2**20, 1) if on_device else None,
        "rss_before_models_mb": None if baseline_rss is None else round(baseline_rss, 1),
        **(predicted or {"predicted_peak_mb": None, "predicted_peak_split": None}),
        "page_faults_per_iteration": _median([r["page_faults"] for r in timed]),
        "flops_gflop": flops_g,
        "flops_real_tokens_gflop": flops_real_g,
        "achieved_gflops": {
            "update": _median([r["flops"]["update"] / 1e9 / max(r["phases"]["update"], 1e-9) for r in timed]),
            "update_real_tokens": _median([r["flops_real"]["update"] / 1e9 / max(r["phases"]["update"], 1e-9)
                                           for r in timed]),
            "iteration": _median([r["flops"]["total"] / 1e9 / r["wall"] for r in timed]),
        },
        "ratio_deviation_max": max(r["ratio_deviation"] for r in rows),
        # rollout.max_staleness >= 1: medians of the worker's sampling and the waits on either side.
        "max_staleness": cfg.rollout.max_staleness,
        "async_s": {k: _median([r["async"][k] for r in timed]) for k in ASYNC_TIMINGS}
        if cfg.rollout.max_staleness else None,
        "memory_bytes": role_memory(roles) if roles is not None else None,  # Ray: in the workers
        "torch_threads": torch.get_num_threads(),
        "world_size": world_size(),
        "versions": versions(),
        "cpu": cpu_description() | {"bf16_native": bf16_supported(), "load_avg_1m": _load()},
    }
    if profile:
        sink: dict = {}
        with profiled_update(trainer, sink):
            trainer.step()
        # Shares against the ordinary iterations' update time: the clock slows the profiled one.
        report["profile"] = summarize_ops(sink["ops"], phases_s["update"], flops_g["update"], streams=sink["streams"],
                                          executed_gflop=sink["matmul_gflop"])
        report["profile"]["profiled_update_s"] = sink["update_s"]
    if measure_peak and not on_device:  # the matmul peak is this CPU's (tether.bench.peak)
        peak, by_backend = machine_peak_gflops(precision, torch.get_num_threads())
        report["matmul_peak_gflops"] = peak
        report["matmul_peak_gflops_by_backend"] = by_backend
        report["mfu_update"] = report["achieved_gflops"]["update"] / peak
        report["mfu_update_real_tokens"] = report["achieved_gflops"]["update_real_tokens"] / peak
        report["mfu_iteration"] = report["achieved_gflops"]["iteration"] / peak
        if profile:
            report["profile"]["matmul_fraction_of_peak"] = report["profile"]["matmul_gflops"] / peak
    if roles is None:
        trainer.placement.close()  # the Ray workers, the vLLM engine
    elif roles.sampler is not None:
        roles.sampler.close()  # the sampling worker's process (rollout.max_staleness)
    return report


def _disk_trainer(cfg, setup, overrides: list[str], batch, response_length, epochs, iterations, precision, seed):
    """The bench's models written to a temporary directory and loaded from there (Ray role workers
    build their roles from paths; vLLM loads the policy from one); the trainer over that
    placement, with the bench's prompts."""
    import atexit
    import shutil
    import tempfile
    from pathlib import Path

    from tether.algorithms import algorithm
    from tether.config import RLConfig, load_config
    from tether.loops.rl import RLTrainer
    from tether.placement import make_placement

    root = Path(tempfile.mkdtemp(prefix="tether-bench-ray-"))
    atexit.register(shutil.rmtree, root, True)
    paths = []
    for name, key in (("policy", "model.name_or_path"), ("reference", "reference"), ("critic", "critic.path")):
        if setup.models.get(name) is not None:
            setup.models[name].save_pretrained(root / name)
            setup.tokenizer.save_pretrained(root / name)
            paths.append(f"{key}={root / name}")
    setup.models["reward"].save_pretrained(root / "reward")
    setup.tokenizer.save_pretrained(root / "reward")
    paths.append(f"reward.models=[{root / 'reward'}]")
    cfg = load_config(RLConfig, None, bench_overrides(batch, response_length, epochs, iterations, precision,
                                                        seed=seed, algorithm=cfg.algorithm, device=cfg.run.device)
                      + overrides + paths)
    placement, _, _ = make_placement(cfg)
    return RLTrainer(cfg, placement, setup.prompts, algorithm(cfg.algorithm, cfg))


def _params(dims, cfg, models: dict | None) -> dict:
    """Parameters of the policy and of a value model: counted on the built models (``models``),
    else from the size's dims (untied embeddings)."""
    if models is not None:
        return {"policy": sum(p.numel() for p in models["policy"].parameters()),
                "value": sum(p.numel() for p in models["reward"].parameters())}
    value = dims.hidden + 1 if cfg.critic.shared_trunk else dims.total_params - dims.lm_head_params + dims.hidden
    return {"policy": dims.total_params, "value": value}


def phase_tokens_per_s(rows: list[dict], critic: bool = True, captured: bool = False) -> dict:
    """Tokens per second of each phase (medians over ``rows``): generate counts the sampled tokens;
    the scoring forwards (logprobs, ref_logprobs, values, reward) every prompt and response token;
    update every token of every epoch (forward + backward + optimiser). ``captured``: the rollout
    kept its sampling log-probs, so the logprobs phase runs no forward (None)."""
    def rate(tokens_key, phase):
        return _median([r[tokens_key] / max(r["phases"][phase], 1e-9) for r in rows])

    out = {"generate": rate("generated_tokens", "generate")}
    for phase in ("logprobs", "ref_logprobs", *(("values",) if critic else ()), "reward"):
        out[phase] = None if phase == "logprobs" and captured else rate("forward_tokens", phase)
    out["update"] = rate("trained_tokens", "update")
    return out


def _captured(cfg) -> bool:
    """The actor's old log-probs come from the sampling pass (as :func:`tether.roles.build.make_roles` decides)."""
    return captured_logprobs(cfg.rollout)


def combine_runs(reports: list[dict]) -> dict:
    """One report from several runs of :func:`run_bench` with the same settings.

    ``iteration_s.median`` is the median of the runs' medians (min/max over every timed
    iteration of every run); phases, achieved GFLOP/s, the matmul peak and the MFUs are the
    medians over runs; ``runs`` keeps each run's own numbers.
    """
    out = dict(reports[-1])
    out["iteration_s"] = {
        "median": statistics.median(r["iteration_s"]["median"] for r in reports),
        "min": min(r["iteration_s"]["min"] for r in reports),
        "max": max(r["iteration_s"]["max"] for r in reports),
    }
    out["iterations_s"] = [w for r in reports for w in r["iterations_s"]]
    out["phases_s"] = {k: statistics.median(r["phases_s"][k] for r in reports) for k in reports[0]["phases_s"]}
    out["achieved_gflops"] = {k: statistics.median(r["achieved_gflops"][k] for r in reports)
                              for k in reports[0]["achieved_gflops"]}
    for key in ("generated_tokens_per_s", "trained_tokens_per_s", "matmul_peak_gflops", "mfu_update",
                "mfu_update_real_tokens", "mfu_iteration", "first_iteration_s", "page_faults_per_iteration"):
        if key in reports[0]:
            out[key] = statistics.median(r[key] for r in reports)
    out["peak_rss_mb"] = max(r["peak_rss_mb"] for r in reports)
    out["ratio_deviation_max"] = max(r["ratio_deviation_max"] for r in reports)
    out["runs"] = [_run_digest(r) for r in reports]
    return out


def _run_digest(report: dict) -> dict:
    keys = ("iteration_s", "phases_s", "matmul_peak_gflops", "mfu_update", "page_faults_per_iteration", "profile")
    return {k: report[k] for k in keys if k in report} | {"load_avg_1m": report["cpu"]["load_avg_1m"]}


def run_repeated(repeats: int, **kwargs) -> dict:
    """:func:`run_bench` ``repeats`` times (fresh models each time) and :func:`combine_runs`."""
    if repeats < 1:
        raise ValueError("repeats must be >= 1")
    reports = []
    for k in range(repeats):
        if repeats > 1:
            print(f"[bench] run {k + 1}/{repeats}", file=sys.stderr, flush=True)
        reports.append(run_bench(**kwargs))
    return combine_runs(reports)


def _retained() -> bool:
    """glibc keeps freed memory mapped in this process (``cpu.retain_memory``; set by the engines)."""
    from tether.engines.cpu.memory import retain_freed_memory

    return retain_freed_memory()


def _load() -> float | None:
    try:
        import os

        return os.getloadavg()[0]
    except (OSError, AttributeError):
        return None


SCALING_LENGTHS = (32, 64, 128, 256)
SCALING_BATCHES = (16, 32, 64)


def run_scaling(size: str, precision: str, epochs: int, threads: int, iterations: int = 3,
                lengths=SCALING_LENGTHS, batches=SCALING_BATCHES, overrides: list[str] = (), repeats: int = 1) -> dict:
    """Seconds per iteration as the response length (batch 16) and the batch (32 tokens) grow.

    Minibatches stay two per epoch, so the optimiser steps are the same and only the tokens grow.
    Each point is the median over ``repeats`` runs.
    """
    out = {"size": size, "precision": precision, "iterations": iterations, "repeats": repeats,
           "response_length": {}, "batch": {}}
    for a in lengths:
        r = run_repeated(repeats, size=size, precision=precision, batch=16, response_length=a, epochs=epochs,
                         threads=threads, iterations=iterations, measure_peak=False, overrides=overrides)
        out["response_length"][str(a)] = {"iteration_s": r["iteration_s"]["median"], "phases_s": r["phases_s"]}
    for b in batches:
        r = run_repeated(repeats, size=size, precision=precision, batch=b, response_length=32, epochs=epochs,
                         threads=threads, iterations=iterations, measure_peak=False, overrides=overrides)
        out["batch"][str(b)] = {"iteration_s": r["iteration_s"]["median"], "phases_s": r["phases_s"]}
    first = out["response_length"].get(str(lengths[0]), {}).get("iteration_s")
    if first:
        # Cost per response token relative to the shortest length: <= 1 means no worse than linear.
        out["per_token_vs_32"] = {a: (v["iteration_s"] / int(a)) / (first / lengths[0])
                                  for a, v in out["response_length"].items()}
    out["torch_threads"] = torch.get_num_threads()
    out["versions"] = versions()
    out["cpu"] = cpu_description() | {"load_avg_1m": _load()}
    return out
