"""`tether compare --pareto`: one RL method trained at several settings of its objectives (a term's
weight, a cost's limit), each over seeds, and the front of the resulting policies in gold against
each objective (docs/judges.md, "Several objectives").

The method runs from its objectives preset, ``configs/demo/<method>_objectives.yaml``: the demo's
reward model as the term ``rm`` and the `!` habit as the term ``bang`` (a regex, 1 when the response
has a '!'). Each *setting* is one value of every ``--vary KEY=V1,V2,...`` (the lists zipped), e.g.
``reward.terms[1].limit=null,0.35,0.25`` with ``reward.terms[1].weight=0,1,1`` (no limit and weight
0: the '!' term only logged, the unconstrained run). Every run starts from the demo's SFT and reward
model; every final policy is measured as `tether compare` measures (gold, the reward model's score,
KL to SFT, accuracy, '!' rate; :func:`tether.demo.compare.measure`), and its last iterations'
multipliers are read from its metrics. Writes ``DIR/seed<S>/<setting>/`` runs, and ``DIR/pareto.json``,
``pareto.md`` and ``pareto.png`` (mean and 95% interval over the seeds; the Pareto-optimal settings
joined, :func:`tether.eval.pareto.pareto_front`).
"""

from __future__ import annotations

from pathlib import Path

import yaml

from tether.common.errors import ConfigError
from tether.metrics import read_metrics
from tether.runs import write_json

#: The objectives the front is drawn over: (key of a policy report, +1 more is better / -1 less).
OBJECTIVES = (("proxy_score", 1), ("spurious_rate", -1))
TAIL = 10  # the last iterations whose training metrics a setting reports


def objectives_preset(method: str) -> Path:
    from tether.demo import PRESETS, preset

    name = f"{method}_objectives"
    if preset(name) is None:
        raise ConfigError(f"tether compare --pareto runs {method!r} from {PRESETS / name}.yaml, which does not exist "
                          "(configs/demo/ppo_objectives.yaml is one to start from).")
    return preset(name)


def parse_vary(items: list[str]) -> list[dict[str, object]]:
    """``--vary KEY=V1,V2,...`` items -> the settings: one {key: value} per position, the lists zipped
    (each value read as YAML: ``null``, numbers). Every list must have the same length, at least 2."""
    if not items:
        raise ConfigError("--pareto needs at least one --vary KEY=V1,V2,... (e.g. --vary "
                          "'reward.terms[1].limit=null,0.35,0.25').")
    columns = {}
    for item in items:
        key, eq, values = item.partition("=")
        if not eq or not key.strip() or not values.strip():
            raise ConfigError(f"--vary {item!r}: expected KEY=V1,V2,... (a config key and its values).")
        if key.strip() in columns:
            raise ConfigError(f"--vary names {key.strip()!r} twice.")
        columns[key.strip()] = [yaml.safe_load(v.strip()) for v in values.split(",")]
    lengths = {len(v) for v in columns.values()}
    if len(lengths) != 1 or min(lengths) < 2:
        raise ConfigError(f"--vary lists of lengths {', '.join(f'{k}: {len(v)}' for k, v in columns.items())}: every "
                          "list gives one value per setting, so they need the same length, at least 2.")
    return [{key: values[i] for key, values in columns.items()} for i in range(lengths.pop())]


def setting_label(setting: dict[str, object]) -> str:
    """A setting's name (its run directory): each key's last part and its value, ``limit=0.25,weight=1``."""
    leaves = [key.rpartition(".")[2] for key in setting]
    names = leaves if len(set(leaves)) == len(leaves) else list(setting)
    return ",".join(f"{name}={'null' if v is None else v}" for name, v in zip(names, setting.values()))


def setting_args(method: str, demo: Path, out: Path, seed: int, setting: dict, extra: list[str]) -> list[str]:
    """The command line of one run: the objectives preset with the demo's paths and the setting's values."""
    task = demo / "task"
    values = [f"{key}={'null' if v is None else v}" for key, v in setting.items()]
    return [method, "--config", str(objectives_preset(method)), f"run.out={out}", f"run.seed={seed}",
            "run.overwrite=true", "run.progress=false", f"model.name_or_path={demo / 'sft'}",
            f"prompts={task / 'ppo_prompts.jsonl'}", f"reward.terms[0].models=[{demo / 'rm'}]",
            f"eval.prompts={task / 'eval_prompts.jsonl'}", *values, *extra]


def training_tail(run_dir: Path, tail: int = TAIL) -> dict:
    """Each ``reward/*``, ``objective/<term>`` and ``constraint/*`` metric's mean over the run's last
    ``tail`` iterations: where the multipliers settled and what the policy was paid in training."""
    rows = [r for r in read_metrics(run_dir / "metrics.jsonl") if "objective/score_raw" in r][-tail:]
    keys = sorted({k for r in rows for k in r if k.startswith(("reward/", "constraint/"))})
    return {k: sum(r[k] for r in rows if k in r) / max(sum(k in r for r in rows), 1) for k in keys}


def pareto_demo(out: Path, demo: Path, method: str, settings: list[dict], seed: int = 0, seeds: int = 3,
                jobs: int = 1, eval_repeats: int = 4, extra: list[str] = (), say=print) -> dict:
    """Run ``method`` at every setting over ``seeds`` run seeds, measure every final policy, and write
    pareto.json / .md / .png in ``out``; returns pareto.json's data."""
    from tether.demo.compare import measure, run_methods
    from tether.eval.pareto import matched_kl
    from tether.eval.seeds import aggregate_compare, over_seeds

    out = Path(out)
    objectives_preset(method)
    labels = [setting_label(s) for s in settings]
    if len(set(labels)) != len(labels):
        raise ConfigError(f"--vary gives the same setting twice ({', '.join(labels)}).")
    run_seeds = [seed + i for i in range(seeds)]
    commands = {}
    for s in run_seeds:
        for label, setting in zip(labels, settings):
            run_dir = out / f"seed{s}" / label
            run_dir.parent.mkdir(parents=True, exist_ok=True)
            commands[s, label] = (setting_args(method, demo, run_dir, s, setting, list(extra)),
                                  run_dir.parent / f"{label}.log", run_dir)
    results = run_methods(commands, jobs, say)
    per_seed = {}
    for s in run_seeds:
        say(f"measuring every policy on the held-out prompts (seed {s})")
        runs = {label: {**results[s, label], "method": method} for label in labels}
        per_seed[s] = measure(out / f"seed{s}", demo, runs, s, eval_repeats)
        for label in labels:
            per_seed[s]["methods"][label]["training"] = training_tail(out / f"seed{s}" / label)
        curves = {label: [(0.0, per_seed[s]["sft"]["gold_score"]), *eval_curve(out / f"seed{s}" / label)]
                  for label in labels}
        if all(len(c) > 1 for c in curves.values()):
            target, golds = matched_kl(curves)
            per_seed[s]["matched_kl"] = target
            for label in labels:
                per_seed[s]["methods"][label]["gold_at_matched_kl"] = golds[label]
        write_json(out / f"seed{s}" / "pareto.json", per_seed[s])
    data = aggregate_compare(per_seed)
    for label, setting in zip(labels, settings):
        data["methods"][label]["setting"] = setting
        if all("matched_kl" in per_seed[s] for s in run_seeds):
            data["methods"][label]["gold_at_matched_kl"] = over_seeds(
                [per_seed[s]["methods"][label]["gold_at_matched_kl"] for s in run_seeds])
        data["methods"][label]["training"] = _mean_tails([per_seed[s]["methods"][label]["training"]
                                                          for s in run_seeds])
    data.update({"method": method, "objectives": [list(o) for o in OBJECTIVES], "runs": [f"seed{s}" for s in run_seeds]})
    if all("matched_kl" in per_seed[s] for s in run_seeds):
        data["matched_kl"] = over_seeds([per_seed[s]["matched_kl"] for s in run_seeds])
    from tether.plots.pareto import pareto_plot, pareto_table

    data["front"] = front_labels(data)
    write_json(out / "pareto.json", data)
    pareto_plot(data, out / "pareto.png")
    (out / "pareto.md").write_text(pareto_table(data) + "\n", encoding="utf-8")
    return data


def eval_curve(run_dir: Path) -> list[tuple[float, float]]:
    """The run's held-out evaluations along the way (``eval.every``): (eval/kl, eval/gold_score) in
    iteration order."""
    return [(r["eval/kl"], r["eval/gold_score"]) for r in read_metrics(run_dir / "metrics.jsonl")
            if "eval/kl" in r and "eval/gold_score" in r]


def _mean_tails(tails: list[dict]) -> dict:
    keys = sorted({k for t in tails for k in t})
    return {k: sum(t[k] for t in tails if k in t) / sum(k in t for t in tails) for k in keys}


def front_labels(data: dict) -> dict[str, list[str]]:
    """For each objective of :data:`OBJECTIVES`: the settings on the front of gold (more is better)
    and that objective, by their means over the seeds."""
    from tether.eval.pareto import pareto_front

    labels = list(data["methods"])
    out = {}
    for key, sense in OBJECTIVES:
        points = [(data["methods"][lb]["gold_score"]["mean"], data["methods"][lb][key]["mean"]) for lb in labels]
        out[key] = [labels[i] for i in pareto_front(points, (1, sense))]
    return out
