"""`tether demo`: build the arithmetic task, then SFT → reward model → PPO, then measure.

Each stage runs from its preset in ``configs/demo/`` with paths pointed into ``DIR``, exactly
as a user would run it by hand, and leaves a plain Hugging Face checkpoint: ``DIR/sft/``,
``DIR/rm/``, ``DIR/ppo/``. ``DIR/summary.json`` holds the measurements.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path

import torch

from tether.registry.algorithms import DEFAULT_ALGORITHM
from tether.config import RLConfig, RewardModelConfig, SFTConfig, load_config
from tether.data import encode_prompt, load_records, prompt_examples, prompt_text
from tether.eval.best_of_n import best_of_n
from tether.eval.policies import measured_policy, measured_reward
from tether.eval.sampling import evaluate_policy
from tether.eval.win_rate import policy_vs_sft
from tether.loops.rl_run import run_rl
from tether.objectives.reward_model import run_reward_model
from tether.objectives.sft import run_sft
from tether.models import load_causal_lm, load_scalar_model, load_tokenizer
from tether.models.forward import last_token_scores
from tether.data import collate_right, encode_response
from tether.plots.report import build_report
from tether.rollout import DEFAULT_ENGINE, SamplingParams, engine_spec
from tether.runs import write_json
from tether.types import to_device
from tether.tasks.arith import judge as arith_judge

log = logging.getLogger(__name__)

PRESETS = Path(__file__).resolve().parents[3] / "configs" / "demo"
EVAL_REPEATS = 4
BEST_OF_N = (1, 2, 4, 8, 16)  # samples per held-out prompt: 4 x 128 responses keep gold noise ~±0.05


def preset(name: str) -> Path | None:
    path = PRESETS / f"{name}.yaml"
    return path if path.is_file() else None


#: ``tether demo --lora``: adapters on the reward model and on PPO's actor and critic (with the
#: learning rates that suit them), each final model merged with its adapter in adapter/. SFT
#: trains in full: the demo's base model is a random initialisation, and adapters on random
#: weights do not learn the task (docs/performance.md, "LoRA on the demo").
LORA = {
    "sft": [],
    "rm": ["lora.r=32", "lora.alpha=32", "optim.lr=1e-3"],
    DEFAULT_ALGORITHM: ["lora.r=32", "lora.alpha=32", "lora.modules_to_save=[norm]", "critic.lora.r=32", "critic.lora.alpha=32",
            "optim.lr=5e-4", "critic.optim.lr=1e-3"],
}


def with_lora(overrides: dict[str, list[str]]) -> dict[str, list[str]]:
    """The demo's LoRA settings, then the caller's overrides (which win)."""
    return {stage: [*LORA[stage], *overrides.get(stage, [])] for stage in LORA}


def stage_configs(out: Path, seed: int, beta: float | None, overrides: dict[str, list[str]], quick: bool):
    task = out / "task"
    common = [f"run.seed={seed}", "run.overwrite=true"]
    sft = load_config(SFTConfig, preset("sft"), [
        f"run.out={out / 'sft'}", f"model.name_or_path={task / 'base_model'}",
        f"data.train={task / 'sft_train.jsonl'}", f"data.eval={task / 'sft_eval.jsonl'}", *common,
        *overrides.get("sft", []),
    ])
    rm = load_config(RewardModelConfig, preset("rm"), [
        f"run.out={out / 'rm'}", f"model.name_or_path={out / 'sft'}",
        f"data.train={task / 'prefs_train.jsonl'}", f"data.eval={task / 'prefs_eval.jsonl'}", *common,
        *overrides.get("rm", []),
    ])
    ppo_over = [
        f"run.out={out / DEFAULT_ALGORITHM}", f"model.name_or_path={out / 'sft'}", f"prompts={task / 'ppo_prompts.jsonl'}",
        f"reward.models=[{out / 'rm'}]", f"eval.prompts={task / 'eval_prompts.jsonl'}", *common,
    ]
    if beta is not None:
        ppo_over += ["kl.controller=fixed", f"kl.coef={beta}"]
    ppo = load_config(RLConfig, preset(DEFAULT_ALGORITHM), ppo_over + overrides.get(DEFAULT_ALGORITHM, []))
    return sft, rm, ppo


def held_out_prompts(path: Path, tokenizer, repeats: int):
    examples = prompt_examples(load_records(str(path)))
    ids = [encode_prompt(ex.prompt, tokenizer) for ex in examples] * repeats
    texts = [prompt_text(ex.prompt) for ex in examples] * repeats
    return ids, texts


def policy_report(samples) -> dict:
    """The demo's view of a policy: generic eval numbers plus task accuracy and `!` rate."""
    s = samples.summary()
    n = len(samples.responses)
    return {
        "gold_score": s.get("gold_score"),
        "proxy_score": s.get("proxy_score"),
        "kl": s.get("kl"),
        "accuracy": sum(arith_judge.is_correct(p, r) for p, r in zip(samples.prompts, samples.responses)) / n,
        "spurious_rate": sum(arith_judge.has_spurious(r) for r in samples.responses) / n,
        "entropy": s["entropy"],
        "length_mean": s["length_mean"],
        "eos_rate": s["eos_rate"],
    }


@torch.no_grad()
def probe_margins(rm_model, tokenizer, probes_path: Path) -> dict:
    """Mean RM(a) − RM(b) per probe kind: correct − wrong, and spurious − plain."""
    rows = [json.loads(line) for line in probes_path.read_text().splitlines() if line.strip()]
    out = {}
    for kind in ("correctness", "spurious"):
        sel = [r for r in rows if r["kind"] == kind]
        seqs = []
        for r in sel:
            p = encode_prompt(r["prompt"], tokenizer)
            seqs += [p + encode_response(r["a"], tokenizer), p + encode_response(r["b"], tokenizer)]
        batch = to_device(collate_right(seqs, tokenizer.pad_token_id), next(rm_model.parameters()).device)
        scores = last_token_scores(rm_model, batch["input_ids"], batch["attention_mask"])
        a, b = scores[0::2], scores[1::2]
        out[kind] = float((a - b).mean())
    # correctness probes: a = correct, b = same with a wrong number; spurious: a = b plus `!`.
    return {"correct_margin": out["correctness"], "spurious_bias": out["spurious"]}


def run_demo(out: Path, seed: int = 0, beta: float | None = None, overrides: dict | None = None,
             task_sizes: dict | None = None, eval_repeats: int = EVAL_REPEATS, lora: bool = False) -> dict:
    from tether.tasks.arith import build_task

    t_start = time.perf_counter()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    timing = {}
    t = time.perf_counter()
    meta = build_task(out / "task", seed=seed, **(task_sizes or {}))
    timing["task_s"] = time.perf_counter() - t
    overrides = with_lora(overrides or {}) if lora else (overrides or {})
    sft_cfg, rm_cfg, ppo_cfg = stage_configs(out, seed, beta, overrides, False)
    _say(f"[1/3] SFT: {sft_cfg.run.out}")
    t = time.perf_counter()
    run_sft(sft_cfg)
    timing["sft_s"] = time.perf_counter() - t
    _say(f"[2/3] reward model: {rm_cfg.run.out}")
    t = time.perf_counter()
    rm_result = run_reward_model(rm_cfg)
    timing["rm_s"] = time.perf_counter() - t
    _say(f"[3/3] PPO (beta={ppo_cfg.kl.coef}, {ppo_cfg.kl.controller}): {ppo_cfg.run.out}")
    t = time.perf_counter()
    ppo_result = run_rl(ppo_cfg)
    timing["ppo_s"] = time.perf_counter() - t

    t = time.perf_counter()
    tokenizer = load_tokenizer(str(out / "sft"))
    rollout = ppo_cfg.rollout
    # Every policy samples with the engine the PPO run used (rollout.engine), at its temperature; an
    # engine with its own copy of the weights (vLLM) is replaced by the default in-process one here
    # (it would start one engine per measured policy).
    engine = DEFAULT_ENGINE if engine_spec(rollout.engine).holds_own_weights else rollout.engine
    policies = {name: measured_policy(load_causal_lm(str(path), tokenizer), tokenizer, rollout.temperature, engine)
                for name, path in (("base", out / "task" / "base_model"), ("sft", out / "sft"), (DEFAULT_ALGORITHM, out / DEFAULT_ALGORITHM))}
    rm_model = load_scalar_model(str(out / "rm"), tokenizer)
    reward = measured_reward(rm_model)
    ids, texts = held_out_prompts(out / "task" / "eval_prompts.jsonl", tokenizer, eval_repeats)
    params = SamplingParams(max_new_tokens=rollout.max_new_tokens, temperature=rollout.temperature)
    judge = arith_judge.gold_score
    sft = policies["sft"]

    def ev(name):
        m = policies[name]
        return evaluate_policy(m.sampler, m.policy, ids, texts, params, seed, reward, sft.policy, judge)

    base_samples, sft_samples, ppo_samples = ev("base"), ev("sft"), ev(DEFAULT_ALGORITHM)
    n_prompts = len(ids) // eval_repeats
    greedy_sft = measured_policy(sft.policy.engine.model, tokenizer, 1.0, engine)
    greedy = evaluate_policy(greedy_sft.sampler, greedy_sft.policy, ids[:n_prompts], texts[:n_prompts],
                             SamplingParams(max_new_tokens=params.max_new_tokens, greedy=True), seed)
    greedy_acc = sum(arith_judge.is_correct(p, r) for p, r in zip(greedy.prompts, greedy.responses)) / len(greedy.responses)
    probes = probe_margins(rm_model, tokenizer, out / "task" / "probes.jsonl")
    bon = best_of_n(sft.sampler, ids[:n_prompts], texts[:n_prompts], reward, judge, BEST_OF_N, params, seed)
    write_json(out / "best_of_n.json", {"rows": bon, "policy": "sft", "prompts": n_prompts})
    timing["eval_s"] = time.perf_counter() - t
    timing["total_s"] = time.perf_counter() - t_start

    summary = {
        "base": {"gold_score": base_samples.summary()["gold_score"]},
        "sft": {**policy_report(sft_samples), "greedy_accuracy": greedy_acc},
        "rm": {
            "accuracy": rm_result["eval/accuracy"],
            "accuracy_ceiling": meta["accuracy_ceiling"],
            "margin": rm_result["eval/margin"],
            **probes,
        },
        DEFAULT_ALGORITHM: {**policy_report(ppo_samples), "beta": ppo_cfg.kl.coef, "controller": ppo_cfg.kl.controller,
                "iterations": ppo_cfg.rl.iterations},
        "eval": policy_vs_sft(ppo_samples, sft_samples),
        "alarms": [a for a in ppo_result["alarms"] if a["level"] in ("warning", "alarm")],
        "best_of_n": bon,
        "samples": [
            {"prompt": p, "sft": s, DEFAULT_ALGORITHM: q}
            for p, s, q in list(zip(texts, sft_samples.responses, ppo_samples.responses))[:8]
        ],
        "timing": timing,
        "seed": seed,
        "lora": lora,
    }
    write_json(out / "summary.json", summary)
    build_report(out)
    return summary


def _f(x) -> str:
    return "   -  " if x is None else f"{x:+.3f}" if isinstance(x, float) else str(x)


SIDE_BY_SIDE = (("gold_score", "gold score (judge)"), ("proxy_score", "proxy score (RM)"),
                ("accuracy", "answer accuracy"), ("spurious_rate", "responses with '!'"),
                ("kl", "KL to SFT (nats)"), ("entropy", "entropy (nats/token)"), ("length_mean", "length (tokens)"))


def format_summary(summary: dict, beside: dict | None = None) -> str:
    """The table printed at the end of `tether demo`; with ``beside`` (another run's summary) the
    two runs' SFT and PPO columns side by side."""
    if beside is not None:
        return format_side_by_side(beside, summary)
    f = _f

    rows = [("", "base", "SFT", "PPO")]
    sft, ppo = summary["sft"], summary[DEFAULT_ALGORITHM]
    rows.append(("gold score (judge)", f(summary["base"]["gold_score"]), f(sft["gold_score"]), f(ppo["gold_score"])))
    for key, label in (("proxy_score", "proxy score (RM)"), ("accuracy", "answer accuracy"),
                       ("spurious_rate", "responses with '!'"), ("kl", "KL to SFT (nats)"),
                       ("entropy", "entropy (nats/token)"), ("length_mean", "length (tokens)")):
        rows.append((label, "", f(sft[key]), f(ppo[key])))
    lines = [f"{a:<24}{b:>10}{c:>10}{d:>10}" for a, b, c, d in rows]
    rm = summary["rm"]
    lines += [
        "",
        f"SFT greedy accuracy        {sft['greedy_accuracy']:.3f}",
        f"RM held-out accuracy       {rm['accuracy']:.3f}  (best achievable {rm['accuracy_ceiling']:.3f})",
        f"RM correct - wrong margin  {rm['correct_margin']:+.3f}",
        f"RM bias for '!'            {rm['spurious_bias']:+.3f}",
        f"PPO beta                   {ppo['beta']} ({ppo['controller']}, {ppo['iterations']} iterations)",
        f"PPO win rate vs SFT        {_rate(summary['eval'].get('win_rate_gold'))} by gold judge, "
        f"{_rate(summary['eval'].get('win_rate_proxy'))} by reward model",
        f"alarms raised              {', '.join(a['name'] for a in summary['alarms']) or 'none'}",
        f"total time                 {summary['timing']['total_s']:.0f} s",
    ]
    return "\n".join(lines)


def format_side_by_side(a: dict, b: dict) -> str:
    """Two demo runs (e.g. full-parameter and LoRA) in one table: SFT and PPO of each."""
    def name(summary):
        return "LoRA" if summary.get("lora") else "full"

    head = f"{'':<24}{name(a) + ' SFT':>11}{name(a) + ' PPO':>11}{name(b) + ' SFT':>11}{name(b) + ' PPO':>11}"
    lines = [head]
    for key, label in SIDE_BY_SIDE:
        cells = [_f(s[stage].get(key)) for s in (a, b) for stage in ("sft", DEFAULT_ALGORITHM)]
        lines.append(f"{label:<24}" + "".join(f"{c:>11}" for c in cells))
    for label, get in (("RM held-out accuracy", lambda s: f"{s['rm']['accuracy']:.3f}"),
                       ("RM bias for '!'", lambda s: f"{s['rm']['spurious_bias']:+.3f}"),
                       ("PPO win rate (gold)", lambda s: _rate(s["eval"].get("win_rate_gold"))),
                       ("alarms raised", lambda s: ", ".join(x["name"] for x in s["alarms"]) or "none"),
                       ("total time", lambda s: f"{s['timing']['total_s']:.0f} s")):
        lines.append(f"{label:<24}{get(a):>22}{get(b):>22}")
    return "\n".join(lines)


def _rate(x) -> str:
    return "-" if x is None else f"{x:.3f}"


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)
