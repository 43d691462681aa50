"""Seconds per PPO iteration of TRL 1.12's PPOTrainer on this machine: the baseline for `tether bench`.

Runs ``trl.experimental.ppo.PPOTrainer`` (trl==1.12.0, the last TRL release with a PPO trainer)
on the configuration `tether bench` uses (docs/performance.md), so both are measured on the
same hardware:

* random-init ``LlamaConfig`` models, untied embeddings, SDPA attention, fp32:
  tiny h128 L2 heads4 ffn512 vocab2048; small h256 L4 heads4 ffn2048 vocab4096;
  medium h512 L4 heads8 ffn2048 vocab4096. Policy and reference (a copy of the policy) are
  ``LlamaForCausalLM``; the value model and the reward model are the same shape with a scalar
  head (``LlamaForSequenceClassification``, ``num_labels=1``);
* a word-level tokenizer of exactly that vocabulary built locally (``<pad> <bos> <eos> <unk>``
  then ``w4 w5 ...``), BOS prepended, left padding -- built the same way as
  ``tether.bench.setup``, and the prompts are the same 16 x iterations random-word prompts of
  16-24 words (+BOS) that `tether bench` draws for the same seed (TRL's dataloader groups them
  into batches in its own shuffled order);
* 16 prompts per iteration, 32 new tokens always generated, temperature 0.7, no top-k/top-p;
  4 PPO epochs x 2 minibatches of 8 = 8 optimizer steps per iteration; k1 KL in the reward,
  kl_coef 0.05 fixed, cliprange 0.2, cliprange_value 0.2, vf_coef 0.1, gamma 1, lam 0.95;
  AdamW (TRL's default ``adamw_torch_fused``).

How the configuration maps onto TRL 1.12's PPOConfig:

* batch sizes: TRL derives ``batch_size = per_device_train_batch_size x
  gradient_accumulation_steps x world_size`` and ``mini_batch_size = batch_size /
  num_mini_batches``, and runs its update under ``accelerator.accumulate`` with
  ``gradient_accumulation_steps``. Hence ``per_device_train_batch_size=16,
  gradient_accumulation_steps=1, num_mini_batches=2``: 16 episodes per iteration, minibatches of
  8, one optimizer step per minibatch (with gradient_accumulation_steps=2 accelerate would step
  only every second minibatch: 4 steps of 16). ``local_rollout_forward_batch_size=16``: the 16
  prompts are generated and scored as one batch. The script counts the optimizer's real steps
  (a post-step hook on the torch optimizer) and fails if they are not 8 per iteration.
* no early EOS: ``stop_token=None, stop_token_id=None`` (TRL then sets the policy's
  ``generation_config.eos_token_id = None``, so ``generate`` never stops early, and it truncates
  nothing), ``missing_eos_penalty=None``. Every response is 32 tokens; the script counts the
  policy's no-grad forward calls (one per decoding step) and fails if they are not 32 per
  iteration. The EOS id can still be *sampled* as an ordinary token (reported as
  ``eos_tokens_sampled``); it changes no shape and no cost.
* ``bf16=False`` (TRL's configs default to bf16), ``gradient_checkpointing=False`` (the TRL
  default is True, though PPOTrainer never enables it itself), ``report_to="none"``,
  ``save_strategy="no"``, ``eval_strategy="no"``, ``num_sample_generations=0`` (no debug sample
  generations), no eval dataset. Nothing in TRL is patched: its ``gc.collect()`` calls, metric
  gathering and logging are part of the measured time. Its per-iteration metric lines are
  printed by transformers' PrinterCallback; stdout is redirected to stderr while training so
  that stdout carries only the final JSON.

What is timed: a ``TrainerCallback`` records ``time.perf_counter()`` in ``on_train_begin`` and
in every ``on_step_end``. In PPOTrainer.train() one pass of the ``for update in ...`` loop is one
PPO iteration (one batch of 16 episodes: rollout, scoring, advantages, 4 x 2 optimizer steps,
metrics), and ``on_step_end`` is called once per pass, after the update, metrics/log and
``lr_scheduler.step()`` and before the pass's tail (``del``, ``empty_cache()``,
``gc.collect()``). So iteration i's time is the interval between the (i-1)-th and the i-th
``on_step_end``: the tail of pass i-1 plus the body of pass i -- every pass's full cost once, in
steady state. Iteration 1 (from on_train_begin) is the warm-up and is discarded: medians are
over iterations 2..N, like `tether bench`. With ``--repeat R`` the models are built afresh
(same seed) R times in this process; ``iteration_s.median`` is the median of the runs'
medians and min/max are over every timed iteration of every run (as `tether bench --repeat`).

Also reported, as a diagnostic already included in ``iteration_s``: ``full_gc_s``, the seconds of
full (generation-2) garbage collection inside each iteration, observed with ``gc.callbacks``.
TRL calls ``gc.collect()`` twice per iteration and each full collection walks the whole Python
heap (torch, transformers, datasets, pandas, ...), so this is a fixed cost that does not shrink
with the model (tether's loop makes no such call).

Setup (a separate venv outside the repo; torch pinned first, or pip pulls a CUDA build)::

    python3 -m venv /work/trl-venv
    /work/trl-venv/bin/pip install torch==2.13.0
    /work/trl-venv/bin/pip install trl==1.12.0 torch==2.13.0

Run (from the repo root; prints one JSON object on stdout, progress on stderr)::

    /work/trl-venv/bin/python benchmarks/trl_baseline.py --size small --seed 1
    /work/trl-venv/bin/python benchmarks/trl_baseline.py --size tiny --threads 1 --iterations 3

Prefer one process per run (``--seed 1``, ``--seed 2``, ... as ``benchmarks/bench_table.py
--trl-python`` does) over ``--repeat``: in one process every later run's garbage collections
also walk whatever the earlier runs left behind, so the runs are not independent.

The script imports nothing from tether (it rebuilds the same tokenizer, models and prompts), so
the TRL venv needs nothing else.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import gc
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time

SIZES = {
    # hidden, layers, heads, ffn, vocab -- the same as tether.bench.setup.SIZES
    "tiny": dict(hidden=128, layers=2, heads=4, ffn=512, vocab=2048),
    "small": dict(hidden=256, layers=4, heads=4, ffn=2048, vocab=4096),
    "medium": dict(hidden=512, layers=4, heads=8, ffn=2048, vocab=4096),
}
SPECIALS = ("<pad>", "<bos>", "<eos>", "<unk>")
MAX_POSITIONS = 1024

BATCH = 16  # episodes (prompts) per PPO iteration
MINIBATCHES = 2  # minibatches per PPO epoch -> minibatches of 8
EPOCHS = 4
RESPONSE_LENGTH = 32
TEMPERATURE = 0.7
PROMPT_WORDS = (16, 24)


def log(msg: str) -> None:
    print(f"[trl-baseline] {msg}", file=sys.stderr, flush=True)


def word_tokenizer(vocab_size: int):
    """A word-level fast tokenizer with exactly ``vocab_size`` ids: specials 0-3, then ``w4`` ...;
    BOS prepended, left padding (as tether.bench.setup.word_tokenizer)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(SPECIALS)}
    vocab.update({f"w{i}": i for i in range(len(SPECIALS), vocab_size)})
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    core.post_processor = processors.TemplateProcessing(
        single="<bos> $A", pair="<bos> $A $B", special_tokens=[("<bos>", 1)]
    )
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token="<pad>", bos_token="<bos>", eos_token="<eos>", unk_token="<unk>"
    )
    tok.padding_side = "left"
    return tok


def build_models(dims: dict, tokenizer, seed: int) -> dict:
    """Random-init fp32 Llamas: policy, reference (a copy of the policy), value and reward models."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, LlamaForSequenceClassification

    config = LlamaConfig(
        vocab_size=dims["vocab"],
        hidden_size=dims["hidden"],
        num_hidden_layers=dims["layers"],
        num_attention_heads=dims["heads"],
        num_key_value_heads=dims["heads"],
        intermediate_size=dims["ffn"],
        max_position_embeddings=MAX_POSITIONS,
        tie_word_embeddings=False,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        num_labels=1,
    )
    config._attn_implementation = "sdpa"

    def finish(model):
        model.config._attn_implementation = "sdpa"
        gen = getattr(model, "generation_config", None)
        if gen is not None:
            gen.pad_token_id = tokenizer.pad_token_id
            gen.bos_token_id = tokenizer.bos_token_id
            gen.eos_token_id = tokenizer.eos_token_id  # PPOTrainer resets it to None (stop_token=None)
        return model

    torch.manual_seed(seed)
    policy = finish(LlamaForCausalLM(config))
    reference = copy.deepcopy(policy)
    torch.manual_seed(seed + 1)
    value = finish(LlamaForSequenceClassification(config))
    torch.manual_seed(seed + 2)
    reward = finish(LlamaForSequenceClassification(config))
    return {"policy": policy, "reference": reference, "value": value, "reward": reward}


def prompt_ids(tokenizer, n: int, seed: int) -> list[list[int]]:
    """``n`` prompts of 16-24 random words (+BOS): the same draws as tether.bench.setup.prompt_set."""
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(len(SPECIALS), tokenizer.vocab_size)]
    texts = [" ".join(rng.choices(words, k=rng.randint(*PROMPT_WORDS))) for _ in range(n)]
    return [tokenizer(t)["input_ids"] for t in texts]


def n_params(model) -> int:
    return sum(p.numel() for p in model.parameters())


class GCClock:
    """Seconds the interpreter spends in garbage collection, observed through ``gc.callbacks``
    (Python's hook for watching collections; nothing is changed). ``full`` counts generation-2
    collections, which is what TRL's explicit ``gc.collect()`` calls run."""

    def __init__(self):
        self.total = self.full = 0.0
        self._t0 = None

    def __call__(self, phase, info):
        if phase == "start":
            self._t0 = time.perf_counter()
        elif self._t0 is not None:
            dt = time.perf_counter() - self._t0
            self.total += dt
            if info.get("generation") == 2:
                self.full += dt
            self._t0 = None


def make_callback(gc_clock: GCClock):
    from transformers import TrainerCallback

    class IterationTimer(TrainerCallback):
        """perf_counter (and the GC clock) at on_train_begin and at every on_step_end (one per PPO
        iteration), and the metrics TRL logs each iteration."""

        def __init__(self):
            self.stamps: list[float] = []
            self.gc_full: list[float] = []
            self.logs: list[dict] = []

        def on_train_begin(self, args, state, control, **kwargs):
            self.stamps = [time.perf_counter()]
            self.gc_full = [gc_clock.full]

        def on_step_end(self, args, state, control, **kwargs):
            self.stamps.append(time.perf_counter())
            self.gc_full.append(gc_clock.full)
            i = len(self.stamps) - 1
            log(f"iteration {i}: {self.stamps[-1] - self.stamps[-2]:.3f} s")

        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs:
                self.logs.append(dict(logs))

    return IterationTimer()


def run_once(size: str, iterations: int, seed: int) -> dict:
    import torch
    from datasets import Dataset
    from trl.experimental.ppo import PPOConfig, PPOTrainer

    dims = SIZES[size]
    tokenizer = word_tokenizer(dims["vocab"])
    models = build_models(dims, tokenizer, seed)
    ids = prompt_ids(tokenizer, BATCH * iterations, seed)
    dataset = Dataset.from_dict({"input_ids": ids})

    # Observation only (no change to TRL): count the optimizer's real steps and the policy's
    # no-grad forward calls (= decoding steps of generate; the update's forwards run with grad).
    counts = {"optimizer_steps": 0, "decode_steps": 0}

    def count_decode(module, args, kwargs):
        if not torch.is_grad_enabled():
            counts["decode_steps"] += 1

    models["policy"].register_forward_pre_hook(count_decode, with_kwargs=True)

    gc_clock = GCClock()
    timer = make_callback(gc_clock)
    with tempfile.TemporaryDirectory(prefix="trl-baseline-") as out_dir:
        args = PPOConfig(
            output_dir=out_dir,
            report_to="none",
            save_strategy="no",
            eval_strategy="no",
            push_to_hub=False,
            disable_tqdm=True,
            use_cpu=True,
            bf16=False,
            fp16=False,
            gradient_checkpointing=False,
            seed=seed,
            learning_rate=1e-5,  # tether's actor lr; irrelevant to time
            # batch sizes (see the module docstring)
            per_device_train_batch_size=BATCH,
            gradient_accumulation_steps=1,
            num_mini_batches=MINIBATCHES,
            local_rollout_forward_batch_size=BATCH,
            num_ppo_epochs=EPOCHS,
            total_episodes=BATCH * iterations,
            # rollout
            response_length=RESPONSE_LENGTH,
            temperature=TEMPERATURE,
            stop_token=None,
            stop_token_id=None,
            missing_eos_penalty=None,
            num_sample_generations=0,
            # PPO
            kl_estimator="k1",
            kl_coef=0.05,
            cliprange=0.2,
            cliprange_value=0.2,
            vf_coef=0.1,
            gamma=1.0,
            lam=0.95,
            whiten_rewards=False,
        )
        with contextlib.redirect_stdout(sys.stderr):
            trainer = PPOTrainer(
                args=args,
                processing_class=tokenizer,
                model=models["policy"],
                ref_model=models["reference"],
                reward_model=models["reward"],
                train_dataset=dataset,
                value_model=models["value"],
                callbacks=[timer],
            )
            inner_opt = getattr(trainer.optimizer, "optimizer", trainer.optimizer)
            inner_opt.register_step_post_hook(lambda *a, **k: counts.__setitem__("optimizer_steps",
                                                                                  counts["optimizer_steps"] + 1))
            gc.callbacks.append(gc_clock)
            try:
                t0 = time.perf_counter()
                trainer.train()
                train_wall = time.perf_counter() - t0
            finally:
                gc.callbacks.remove(gc_clock)

    stamps = timer.stamps
    walls = [b - a for a, b in zip(stamps, stamps[1:])]
    gc_full = [b - a for a, b in zip(timer.gc_full, timer.gc_full[1:])]
    if len(walls) != iterations:
        raise RuntimeError(f"expected {iterations} on_step_end calls, got {len(walls)}")
    steps_per_it = counts["optimizer_steps"] / iterations
    decode_per_it = counts["decode_steps"] / iterations
    if steps_per_it != EPOCHS * MINIBATCHES:
        raise RuntimeError(f"{steps_per_it} optimizer steps per iteration, expected {EPOCHS * MINIBATCHES}")
    if decode_per_it != RESPONSE_LENGTH:
        raise RuntimeError(f"{decode_per_it} decoding steps per iteration, expected {RESPONSE_LENGTH}")
    timed = walls[1:] if len(walls) > 1 else walls
    opt_group = inner_opt.param_groups[0] if inner_opt.param_groups else {}
    return {
        "iteration_s": {"median": statistics.median(timed), "min": min(timed), "max": max(timed)},
        "iterations_s": walls,
        "first_iteration_s": walls[0],
        "full_gc_s": {"median": statistics.median(gc_full[1:] or gc_full), "per_iteration": gc_full},
        "train_wall_s": train_wall,
        "load_avg_1m": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
        "checks": {
            "optimizer_steps_per_iteration": steps_per_it,
            "decode_steps_per_iteration": decode_per_it,
            "eos_tokens_sampled": [int(l.get("val/num_eos_tokens", 0)) for l in timer.logs
                                   if "val/num_eos_tokens" in l],
            "mixed_precision": str(trainer.accelerator.mixed_precision),
            "param_dtype": str(next(models["policy"].parameters()).dtype),
            "gradient_checkpointing": bool(models["policy"].is_gradient_checkpointing),
            "attn_implementation": models["policy"].config._attn_implementation,
            "generation_eos_token_id": models["policy"].generation_config.eos_token_id,
            "optimizer": f"{type(inner_opt).__name__}(fused={opt_group.get('fused')})",
        },
        "trl_derived": {k: getattr(trainer.args, k) for k in (
            "batch_size", "local_batch_size", "mini_batch_size", "local_mini_batch_size", "micro_batch_size",
            "per_device_train_batch_size", "gradient_accumulation_steps", "num_mini_batches",
            "local_rollout_forward_batch_size", "num_ppo_epochs", "num_total_batches", "world_size")},
        "params": {"policy": n_params(models["policy"]), "value": n_params(models["value"])},
    }


def versions() -> dict:
    import accelerate
    import tokenizers
    import torch
    import transformers
    import trl

    return {"trl": trl.__version__, "torch": torch.__version__, "transformers": transformers.__version__,
            "accelerate": accelerate.__version__, "tokenizers": tokenizers.__version__,
            "python": platform.python_version()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", choices=sorted(SIZES), default="small")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads (default 2)")
    parser.add_argument("--iterations", type=int, default=8,
                        help="PPO iterations per run; the first is a warm-up (default 8)")
    parser.add_argument("--repeat", type=int, default=1, help="runs with fresh models (default 1)")
    parser.add_argument("--seed", type=int, default=0)
    a = parser.parse_args(argv)
    if a.iterations < 1 or a.repeat < 1 or a.threads < 1:
        parser.error("--iterations, --repeat and --threads must be >= 1")

    import torch

    torch.set_num_threads(a.threads)
    runs = []
    for k in range(a.repeat):
        log(f"run {k + 1}/{a.repeat}: size={a.size} threads={a.threads} iterations={a.iterations}")
        runs.append(run_once(a.size, a.iterations, a.seed))
        log(f"run {k + 1}: median {runs[-1]['iteration_s']['median']:.3f} s/iteration")

    medians = [r["iteration_s"]["median"] for r in runs]
    report = {
        "framework": "trl",
        "size": a.size,
        "dims": SIZES[a.size],
        "params": runs[0]["params"],
        "iteration_s": {
            "median": statistics.median(medians),
            "min": min(r["iteration_s"]["min"] for r in runs),
            "max": max(r["iteration_s"]["max"] for r in runs),
        },
        "run_medians": medians,
        "config": {
            "batch": BATCH, "minibatch_size": BATCH // MINIBATCHES, "epochs": EPOCHS,
            "optimizer_steps": EPOCHS * MINIBATCHES, "response_length": RESPONSE_LENGTH,
            "temperature": TEMPERATURE, "prompt_words": list(PROMPT_WORDS), "kl_estimator": "k1",
            "kl_coef": 0.05, "cliprange": 0.2, "cliprange_value": 0.2, "vf_coef": 0.1, "gamma": 1.0,
            "lam": 0.95, "precision": "fp32", "iterations": a.iterations,
            "timed_iterations": max(a.iterations - 1, 1), "repeat": a.repeat, "seed": a.seed,
        },
        "timing": ("interval between consecutive TrainerCallback.on_step_end calls (the first from "
                   "on_train_begin) = one PPOTrainer.train() loop pass; medians over iterations 2..N"),
        "full_gc_s_median": statistics.median(r["full_gc_s"]["median"] for r in runs),
        "runs": [{k: r[k] for k in ("iteration_s", "iterations_s", "first_iteration_s", "full_gc_s", "train_wall_s",
                                    "load_avg_1m", "checks")} for r in runs],
        "trl_derived": runs[0]["trl_derived"],
        "threads": torch.get_num_threads(),
        "versions": versions(),
        "cpu": {"capability": torch.backends.cpu.get_cpu_capability(), "machine": platform.machine()},
    }
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
