"""`tether compare --tool-demo`: does the tool matter? The tool demo (docs/episodes.md, "The tool
demo") over seeds.

For each seed: build the calc task (``tether.tasks.calc``: ``what is A times B ?`` with A
two-digit, B one-digit; the evaluation facts held out of all training data), then

* **each tool method** (an RL algorithm with a ``configs/demo/<method>_tools.yaml`` preset: grpo,
  ppo): SFT on the tool demonstrations (``sft_tools.yaml``, once per seed), then the method in
  episodes calling ``calculator``;
* **notool**, the baseline: SFT on direct answers (``sft_notool.yaml``), then the same GRPO
  single-turn (``grpo_notool.yaml``).

Every checkpoint (both SFT models, every RL policy) is measured the same way on the held-out facts:
sampled at its preset's temperature with a fixed seed (episodes of the run's own environment for a
tool policy), its final answers scored by the gold judge. Reported: gold (mean and 95% interval over
the seeds) after SFT and after RL, answer accuracy, and a tool policy's tool-call rate (calls per
episode) and tool-error rate (failed or malformed blocks per block) from its episodes' ``env/*``
counters, on the held-out facts and in the last RL iteration's rollout. ``DIR/seed<S>/report.json``
per seed; ``DIR/compare.json``, ``compare.md`` (the table) and ``compare.png`` (the chart).
"""

from __future__ import annotations

import time
from pathlib import Path

from tether.common.errors import ConfigError
from tether.config import RLConfig, SFTConfig, load_config
from tether.demo import PRESETS
from tether.environments.base import batch_metrics
from tether.eval.seeds import over_seeds
from tether.runs import write_json

BASELINE = "notool"
#: The SFT preset each kind of method starts from.
SFT = {"tools": "sft_tools", BASELINE: "sft_notool"}
#: The env/* counters of a tool block that did not give a result.
ERRORS = ("malformed_calls", "bad_arguments", "unknown_tools", "tool_errors", "tool_timeouts")
#: What ``--set NAME:KEY=VALUE`` may name besides the methods: the SFT stages and the task's builder.
EXTRA_NAMES = ("sft_tools", "sft_notool", "task")


def tool_methods() -> tuple[str, ...]:
    """The registered RL algorithms with a tool-demo preset (``configs/demo/<name>_tools.yaml``)."""
    from tether.registry.algorithms import ALGORITHMS, load_plugins

    load_plugins()
    return tuple(name for name in ALGORITHMS if (PRESETS / f"{name}_tools.yaml").is_file())


def methods() -> tuple[str, ...]:
    """Every method the tool comparison runs: the tool methods, then the baseline."""
    return (*tool_methods(), BASELINE)


def rl_preset(method: str) -> str:
    return "grpo_notool" if method == BASELINE else f"{method}_tools"


def tool_rates(counters: dict[str, float], episodes: int) -> dict[str, float | None]:
    """Calls per episode and failed blocks per block from ``env/*`` totals over ``episodes``."""
    calls = counters.get("env/tool_calls", 0.0)
    blocks = calls + counters.get("env/malformed_calls", 0.0)
    errors = sum(counters.get(f"env/{k}", 0.0) for k in ERRORS)
    return {"tool_call_rate": calls / episodes if episodes else None,
            "tool_error_rate": errors / blocks if blocks else None}


def stage_config(cls, preset: str, task: Path, seed_dir: Path, seed: int, extra: list[str], start: Path | None = None):
    """A preset with the seed's paths in place of its ``runs/calc/...`` ones, then ``extra``: an SFT
    stage trains on the task's ``PRESET_train.jsonl``; an RL stage starts from ``start`` (its SFT
    model) and evaluates nothing itself (:func:`measure` does, after it)."""
    if cls is SFTConfig:
        paths = [f"model.name_or_path={task / 'base_model'}", f"data.train={task / f'{preset}_train.jsonl'}",
                 f"data.eval={task / f'{preset}_eval.jsonl'}"]
    else:
        paths = [f"model.name_or_path={start}", f"prompts={task / 'rl_prompts.jsonl'}",
                 "eval.prompts=null", "eval.every=0", "eval.judge=null"]
    return load_config(cls, PRESETS / f"{preset}.yaml", [f"run.out={seed_dir / preset}", f"run.seed={seed}",
                                                         "run.progress=false", "run.overwrite=true", *paths, *extra])


def measure(checkpoint: Path, cfg: RLConfig, prompts: Path, repeats: int, seed: int, limit: int | None = None) -> dict:
    """Gold, accuracy and (episodes) tool rates of ``checkpoint`` on the prompts of ``prompts`` (the
    first ``limit``), each sampled ``repeats`` times as ``cfg`` samples (its engine, temperature,
    caps and environment), with a fixed seed."""
    from tether.eval.policies import measured_policy
    from tether.eval.sampling import seeded_rollouts
    from tether.loops.rl_setup import environment_class, load_prompt_set, sampling_params
    from tether.models import load_causal_lm, load_tokenizer
    from tether.roles.build import episode_engine
    from tether.tasks.calc.judge import gold_score, is_correct

    tokenizer = load_tokenizer(str(checkpoint))
    held = load_prompt_set(str(prompts), "test", tokenizer, cfg.model.chat_template, 10_000, limit=limit,
                           key="eval.prompts", environment=environment_class(cfg))
    engine = measured_policy(load_causal_lm(str(checkpoint), tokenizer), tokenizer, cfg.rollout.temperature,
                             cfg.rollout.engine).sampler
    if cfg.environment.enabled:
        engine = episode_engine(cfg, engine, tokenizer)
    rows = None if held.rows is None else held.rows * repeats
    gold, right, stats = [], [], []
    try:
        for ro in seeded_rollouts(engine, held.ids * repeats, held.texts * repeats, sampling_params(cfg), seed,
                                  rows=rows):
            gold += [gold_score(p, r, bool(e)) for p, r, e in zip(ro.prompts, ro.responses, ro.ended.tolist())]
            right += [is_correct(p, r) for p, r in zip(ro.prompts, ro.responses)]
            stats += [record.stats for record in ro.episodes or []]
    finally:
        if cfg.environment.enabled:
            engine.close()
    out = {"gold": sum(gold) / len(gold), "accuracy": sum(right) / len(right), "n": len(gold)}
    if stats:
        env = batch_metrics(stats)
        out.update(turns=env["env/turns"], truncated=env["env/truncated"], **tool_rates(env, len(stats)))
    return out


def train_env(run_dir: Path, cfg: RLConfig) -> dict:
    """The tool rates of the last RL iteration's rollout (its logged env/* totals)."""
    from tether.metrics.logger import read_metrics

    rows = [r for r in read_metrics(run_dir / "metrics.jsonl") if "env/turns" in r]
    if not rows:
        return {}
    return {"iteration": rows[-1]["step"], "turns": rows[-1]["env/turns"],
            **tool_rates(rows[-1], cfg.rollout.batch_size * cfg.samples_per_prompt)}


def run_seed(seed: int, out: Path, chosen: list[str], sets: dict[str, list[str]], repeats: int,
             limit: int | None, say=print) -> dict:
    """Build the seed's task; SFT then RL of every method, each checkpoint measured; the seed's
    report (also OUT/seed<S>/report.json). A kind's SFT runs once, before its first method."""
    from tether.loops.rl_run import run_rl
    from tether.objectives.sft import run_sft
    from tether.tasks.calc import build_task

    seed_dir = out / f"seed{seed}"
    seed_dir.mkdir(parents=True, exist_ok=True)
    task = seed_dir / "task"
    t = time.perf_counter()
    meta = build_task(task, seed=seed, **task_settings(sets.get("task", [])))
    report = {"seed": seed, "task_s": time.perf_counter() - t, "n_eval_facts": meta["n_eval_facts"],
              "demonstrator_accuracy": {"tools": meta["demonstrator_accuracy_tools"],
                                        "notool": meta["demonstrator_accuracy_notool"]}, "methods": {}}
    prompts = task / "eval_prompts.jsonl"
    sft_done: dict[str, tuple] = {}  # kind -> (its SFT config, its measurement, seconds)
    for method in chosen:
        kind = BASELINE if method == BASELINE else "tools"
        if kind not in sft_done:
            say(f"[seed {seed}] {SFT[kind]}")
            sft_cfg = stage_config(SFTConfig, SFT[kind], task, seed_dir, seed, sets.get(SFT[kind], []))
            t = time.perf_counter()
            run_sft(sft_cfg)
            sft_done[kind] = (sft_cfg, None, time.perf_counter() - t)
        sft_cfg, sft_measure, sft_s = sft_done[kind]
        rl_cfg = stage_config(RLConfig, rl_preset(method), task, seed_dir, seed, sets.get(method, []),
                              start=Path(sft_cfg.run.out))
        say(f"[seed {seed}] {method}: {rl_preset(method)}")
        t = time.perf_counter()
        run_rl(rl_cfg)
        rl_s, t = time.perf_counter() - t, time.perf_counter()
        if sft_measure is None:  # the SFT model measured as its first method samples
            sft_measure = measure(Path(sft_cfg.run.out), rl_cfg, prompts, repeats, seed, limit)
            sft_done[kind] = (sft_cfg, sft_measure, sft_s)
        result = {"sft": sft_measure, "rl": measure(Path(rl_cfg.run.out), rl_cfg, prompts, repeats, seed, limit)}
        if rl_cfg.environment.enabled:
            result["train_env"] = train_env(Path(rl_cfg.run.out), rl_cfg)
        report["methods"][method] = {**result, "iterations": rl_cfg.rl.iterations,
                                     "time_s": {"sft": sft_s, "rl": rl_s, "measure": time.perf_counter() - t}}
    write_json(seed_dir / "report.json", report)
    return report


def task_settings(items: list[str]) -> dict[str, int]:
    """``--set task:KEY=VALUE`` items as the calc task builder's integer keyword arguments."""
    import inspect

    from tether.tasks.calc import build_task

    known = [p for p in inspect.signature(build_task).parameters if p not in ("out", "seed")]
    out = {}
    for item in items:
        key, _, value = item.partition("=")
        if key not in known or not value.lstrip("-").isdigit():
            raise ConfigError(f"--set task:{item}: expected task:KEY=INTEGER with KEY one of {', '.join(known)}.")
        out[key] = int(value)
    return out


def summarise(reports: list[dict], chosen: list[str]) -> dict:
    """Each number of each method over the seeds (values, mean, sd, 95% interval); a tool method's
    RL gold minus the baseline's, seed by seed."""
    def over(method: str, stage: str, key: str) -> dict:
        return over_seeds([r["methods"][method].get(stage, {}).get(key) for r in reports])

    summary = {}
    for method in chosen:
        keys = ("gold", "accuracy") if method == BASELINE else ("gold", "accuracy", "tool_call_rate", "tool_error_rate")
        summary[method] = {f"{stage}_{key}": over(method, stage, key) for stage in ("sft", "rl") for key in keys}
        if method != BASELINE:
            summary[method].update({f"train_{key}": over(method, "train_env", key)
                                    for key in ("tool_call_rate", "tool_error_rate")})
            if BASELINE in chosen:
                summary[method]["rl_gold_minus_notool"] = over_seeds(
                    [r["methods"][method]["rl"]["gold"] - r["methods"][BASELINE]["rl"]["gold"] for r in reports])
    return summary


def compare_tool_demo(out: Path, chosen: list[str] | None = None, seed: int = 0, seeds: int = 3,
                      sets: dict[str, list[str]] | None = None, repeats: int = 4, limit: int | None = None,
                      say=print) -> dict:
    """Every seed (``seed``, ``seed + 1``, ...), then the summary: compare.json, .md and .png in ``out``."""
    from tether.plots.tool_compare import tool_compare_plot, tool_compare_table

    chosen = list(methods()) if chosen is None else list(chosen)
    for method in chosen:  # every preset there before the first stage runs
        if method not in methods():
            raise ConfigError(f"--methods: {method!r} has no tool-demo preset; expected some of {', '.join(methods())}.")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    reports = [run_seed(s, out, chosen, sets or {}, repeats, limit, say) for s in range(seed, seed + seeds)]
    data = {"methods": chosen, "seeds": [r["seed"] for r in reports], "eval_repeats": repeats,
            "summary": summarise(reports, chosen), "per_seed": reports, "time_s": time.perf_counter() - t0}
    write_json(out / "compare.json", data)
    (out / "compare.md").write_text(tool_compare_table(data) + "\n", encoding="utf-8")
    tool_compare_plot(data, out / "compare.png")
    return data
