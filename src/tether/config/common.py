"""Config blocks shared by every stage: the run, the model, the optimiser, the data."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Literal

from tether.config.base import FLOAT32_MAX, option, refuse_inert
from tether.common.errors import ConfigError


def check_adam_step(key: str, lr: float, beta1: float = 0.9) -> None:
    """AdamW's first step is lr / (1 - beta1) per weight: beyond float32's range it fails inside
    torch (an overflow traceback), so such a learning rate is refused here."""
    if lr / (1.0 - beta1) >= FLOAT32_MAX:
        raise ConfigError(
            f"Config key '{key}' = {lr!r}: AdamW's first step would be lr / (1 - beta1) = {lr / (1.0 - beta1):.3g}, "
            f"beyond float32's range (3.4e38); expected a learning rate below {FLOAT32_MAX * (1.0 - beta1):.3g}."
        )


DEVICE_CHOICES = "auto, cpu, cuda, cuda:N or mps"
_DEVICE = re.compile(r"^(auto|cpu|mps|cuda(:\d+)?)$")


def check_device_spec(spec: str, key: str = "run.device") -> None:
    """The spelling of a device (no hardware check: :func:`tether.common.runtime.resolve_device` does that)."""
    if not isinstance(spec, str) or not _DEVICE.match(spec):
        what = key if key.startswith("--") else f"Config key '{key}'"
        raise ConfigError(f"{what} = {spec!r}: expected {DEVICE_CHOICES}.")


@dataclass(frozen=True)
class RunConfig:
    """Where a run writes and how it is seeded."""

    out: str = option("runs/run", "Run directory: resolved config, metrics.jsonl, checkpoints.")
    seed: int = option(0, "Seed for python, numpy and torch RNGs (data order, init, sampling).")
    threads: int = option(
        0, "torch CPU threads; 0 = one per free core (cores other processes keep busy are left out, "
        "at most torch's default), said on stderr.", ge=0, le=1024
    )
    log_every: int = option(10, "Write a metrics line every this many optimiser steps.", ge=1)
    overwrite: bool = option(
        False, "Allow writing into a directory that already holds a different run."
    )
    progress: bool = option(True, "Show a progress bar on stderr.")
    save_every: int = option(
        0, "Write a resumable checkpoint every this many steps (PPO: iterations); 0 = final only.", ge=0
    )
    keep_checkpoints: int = option(2, "Keep only the newest this many checkpoints.", ge=1)
    on_nonfinite: Literal["stop", "skip"] = option(
        "stop", "NaN/Inf loss or gradient: stop the run naming where, or skip that step."
    )
    device: str = option(
        "auto",
        "Where models and batches live: auto (CUDA when available, else CPU), cpu, cuda, cuda:N or mps. "
        "A device this machine does not have is an error.",
    )
    precision: Literal["fp32", "bf16", "fp16"] = option(
        "fp32",
        "fp32, or bf16/fp16 autocast over fp32 master weights, optimiser and loss maths (fp16 adds a gradient "
        "scaler). The LM and scalar heads and the log-softmax stay fp32. bf16 is fast on GPUs and on CPUs with "
        "AVX512-BF16/AMX; elsewhere on CPU it is emulated and slower than fp32.",
    )

    report_to: list[Literal["tensorboard", "wandb", "mlflow", "trackio"]] = option(
        factory=list,
        help="Experiment trackers that get every metrics.jsonl row (same names, same steps) and PPO's samples "
             "table: tensorboard (RUN/tensorboard), wandb (WANDB_MODE=offline works), mlflow (MLFLOW_TRACKING_URI, "
             "else RUN/mlflow.db), trackio (local, TRACKIO_DIR). Each is an optional package.",
    )
    project: str = option("tether", "The trackers' project (W&B project, MLflow experiment, trackio project).")
    name: str | None = option(None, "The run's name in the trackers; default: the run directory's name.")

    def validate(self) -> None:
        check_device_spec(self.device)  # (run.report_to's packages are checked when a stage starts:
        # a Ray worker or a reader of a saved config needs no tracker installed)
        twice = sorted({name for name in self.report_to if self.report_to.count(name) > 1})
        if twice:
            # Refused rather than de-duplicated: each entry opens a tracker run (two event files,
            # two W&B runs), and a repeated name is more likely a slip for another tracker.
            raise ConfigError(f"Config key 'run.report_to' = {list(self.report_to)} names {', '.join(twice)} twice; "
                              "expected each tracker once.")


@dataclass(frozen=True)
class CPUConfig:
    """Speedups that only apply on a CPU (docs/performance.md): the loops never see them."""

    retain_memory: bool = option(
        True,
        "Keep freed memory in the process for reuse (glibc malloc on Linux): big tensors reuse warm "
        "pages instead of page-faulting fresh ones every step. The process keeps its peak heap.",
    )


@dataclass(frozen=True)
class DistributedConfig:
    """Data parallel over several processes, launched with torchrun (docs/distributed.md). One
    process (no torchrun) ignores this block, so one preset serves both launches; only a
    contradiction in it (backend nccl with a CPU run.device) is refused either way."""

    strategy: Literal["ddp", "fsdp"] = option(
        "ddp",
        "How the trained model is spread over ranks: ddp = a whole copy per rank, gradients all-reduced "
        "(DistributedDataParallel); fsdp = weights, gradients and optimiser state sharded over ranks and "
        "gathered layer by layer (FSDP2 fully_shard). PPO's critic may differ: critic.strategy.",
    )
    timeout_s: float = option(
        600.0, "Seconds a collective waits for the other ranks before the run stops with an error naming "
               "the lost rank.", gt=0,
    )
    backend: Literal["auto", "gloo", "nccl"] = option(
        "auto", "torch.distributed backend: auto = nccl when run.device is CUDA, else gloo. nccl needs CUDA GPUs "
                "(refused with a CPU run.device, and under torchrun on a machine without them).")


@dataclass(frozen=True)
class LoRAConfig:
    """LoRA adapters through peft: the base weights stay frozen and only the adapters (and
    ``modules_to_save``) train. Off with r = 0 (full-parameter training)."""

    r: int = option(0, "Adapter rank; 0 = no LoRA (train every weight).", ge=0, le=65536)
    alpha: float = option(16.0, "LoRA alpha: the adapter's output is scaled by alpha / r.", gt=0)
    dropout: float = option(0.0, "Dropout on the adapter's input (must be 0 for PPO's actor and critic).",
                            ge=0, lt=1)
    target_modules: list[str] = option(
        factory=lambda: ["all-linear"],
        help="Module names (or name suffixes) that get adapters, each matching at least one module; "
             "'all-linear' (alone) = every linear layer but the output head (peft's rule).",
    )
    modules_to_save: list[str] = option(
        factory=list,
        help="Modules trained in full beside the adapters (e.g. embed_tokens), each matching at least one "
             "module. A scalar model's head (score) always is.",
    )
    adapter: str | None = option(
        None, "Start from this adapter directory (a LoRA run's adapter/) instead of fresh adapters; its "
              "own r, alpha and targets apply (setting them here too is refused).", path=True,
    )

    @property
    def enabled(self) -> bool:
        return self.r > 0 or self.adapter is not None


@dataclass(frozen=True)
class ModelConfig:
    """A model by Hugging Face hub id or local path."""

    name_or_path: str = option("", "Hub id (e.g. Qwen/Qwen2.5-0.5B) or local checkpoint directory.", path=True)
    tokenizer: str | None = option(None, "Tokenizer id or path; default: same as the model.", path=True)
    dtype: Literal["float32", "bfloat16", "float16"] = option(
        "float32", "Weights dtype. bfloat16 halves memory on GPUs and recent CPUs."
    )
    chat_template: Literal["auto", "always", "never"] = option(
        "auto",
        "Format prompts with the tokenizer's chat template: auto = when it has one.",
    )
    trust_remote_code: bool = option(False, "Passed to from_pretrained (custom model code).")
    attn_implementation: Literal["sdpa", "eager", "flash_attention_2", "flex_attention"] = option(
        "sdpa",
        "Attention of every model the stage loads (policy, reference, reward model, critic): sdpa (eager for "
        "a model without it, said on stderr), eager, flash_attention_2 (CUDA and the flash_attn package) or "
        "flex_attention (not on a CPU: torch has no FlexAttention backward there).",
    )
    padding_free: bool = option(
        True, "Train and score rows packed into one sequence with no padding (models and attention that support "
              "it; tether pads otherwise, with a notice).",
    )

    def validate(self) -> None:
        if not self.name_or_path:
            raise ConfigError(
                "Config key 'model.name_or_path' is empty: expected a hub id or a local path."
            )


@dataclass(frozen=True)
class OptimizerConfig:
    """AdamW with a linear warm-up then a decay schedule: the optimiser block of every trained
    model (``optim`` of SFT, the reward model and DPO; the actor's ``optim`` and the critic's
    ``critic.optim`` in the RL stages, whose defaults differ, not their keys)."""

    lr: float = option(1e-5, "Peak learning rate.", gt=0, lt=FLOAT32_MAX)
    weight_decay: float = option(0.0, "AdamW decoupled weight decay.", ge=0)
    beta1: float = option(0.9, "AdamW beta1.", ge=0, lt=1)
    beta2: float = option(0.999, "AdamW beta2.", ge=0, lt=1)
    eps: float = option(1e-8, "AdamW epsilon.", gt=0)
    warmup_steps: int = option(0, "Linear warm-up from 0 to lr over this many steps.", ge=0)
    schedule: Literal["cosine", "linear", "constant"] = option(
        "cosine", "Decay after warm-up: cosine/linear to min_lr_ratio*lr, or constant."
    )
    min_lr_ratio: float = option(0.1, "Final lr as a fraction of the peak.", ge=0, le=1)
    max_grad_norm: float | None = option(1.0, "Clip the global gradient norm; null = off.", gt=0)

    def check(self, key: str) -> None:
        """The checks of the block at dotted ``key`` (e.g. ``critic.optim``)."""
        check_adam_step(f"{key}.lr", self.lr, self.beta1)
        default = next(f.default for f in dataclasses.fields(self) if f.name == "min_lr_ratio")
        if self.schedule == "constant" and self.min_lr_ratio != default:
            raise ConfigError(f"Config key '{key}.min_lr_ratio' = {self.min_lr_ratio} is set with {key}.schedule="
                              "constant, which does not decay, so it would have no effect; set "
                              f"{key}.schedule=cosine or linear (or drop it).")


MICRO_BATCH_TOKENS_HELP = (
    "Most tokens per micro-batch (rows binned by length to fill it; padding counted unless "
    "model.padding_free); null: grad_accum_steps micro-batches of equal rows."
)


def check_micro_batches(tokens_key: str, tokens: int | None, accum: int) -> None:
    """Micro-batches are sized by a token budget (``tokens_key``, e.g. ``optim.micro_batch_tokens``)
    or by a row count (the block's ``grad_accum_steps``), not both: with a budget set, a row count
    would do nothing."""
    key = tokens_key.rsplit(".", 1)[0]
    if tokens is not None and accum > 1:
        raise ConfigError(
            f"Config key '{key}.micro_batch_tokens' = {tokens} is set with {key}.grad_accum_steps = {accum}: "
            "micro-batches are sized by a token budget or by a row count, not both, so one of them would "
            f"have no effect; drop {key}.grad_accum_steps (default 1) or {key}.micro_batch_tokens (default null)."
        )


@dataclass(frozen=True)
class OptimConfig(OptimizerConfig):
    """The supervised stages' optimiser block: :class:`OptimizerConfig` and the batch it steps on."""

    batch_size: int = option(32, "Examples per optimiser step (after accumulation).", ge=1)
    grad_accum_steps: int = option(
        1, "Split each batch into this many micro-batches (same maths, less memory).", ge=1
    )
    micro_batch_tokens: int | None = option(None, MICRO_BATCH_TOKENS_HELP, ge=1)

    def validate(self) -> None:
        if self.batch_size % self.grad_accum_steps:
            raise ConfigError(
                f"Config key 'optim.grad_accum_steps' = {self.grad_accum_steps}: must divide "
                f"optim.batch_size = {self.batch_size}."
            )
        check_micro_batches("optim.micro_batch_tokens", self.micro_batch_tokens, self.grad_accum_steps)
        self.check("optim")


@dataclass(frozen=True)
class DataConfig:
    """Training and evaluation data: a local jsonl/json/parquet file or a hub dataset name."""

    train: str = option("", "Training data: local file or hub dataset name (name[:subset]).", path=True)
    train_split: str = option("train", "Split of a hub dataset for training.")
    eval: str | None = option(None, "Held-out data; default: a slice of the training data.", path=True)
    eval_split: str = option("test", "Split of a hub dataset for evaluation.")
    eval_size: int = option(
        256, "Rows held out from training when no eval set is given (0 = no evaluation).", ge=0
    )
    max_length: int = option(512, "Maximum tokens of prompt + response.", ge=2)
    on_long: Literal["truncate", "drop", "error"] = option(
        "truncate", "Over-long examples: truncate the response, drop the row, or stop."
    )
    max_rows: int | None = option(None, "Use at most this many training rows.", ge=1)

    def validate(self) -> None:
        if not self.train:
            raise ConfigError("Config key 'data.train' is empty: expected a file or dataset name.")


def refuse_inert_lora(cfg, key: str = "lora") -> None:
    """A LoRA block's settings where they do nothing: with LoRA off (r = 0, no adapter) all of
    them; with ``adapter`` the adapter's own r, alpha, dropout and targets apply instead."""
    lora = cfg
    for part in key.split("."):
        lora = getattr(lora, part)
    settings = [f"{key}.{name}" for name in ("alpha", "dropout", "target_modules", "modules_to_save")]
    if lora.adapter:
        refuse_inert(cfg, [f"{key}.r", *settings], f"with {key}.adapter, whose own adapter_config.json settings apply")
    elif not lora.enabled:
        refuse_inert(cfg, settings, f"while LoRA is off ({key}.r = 0 and no {key}.adapter)")


def check_common(cfg) -> None:
    """The blocks every stage has, against each other: NCCL on a CPU run (a contradiction however
    the run is launched; no GPU at all is found when torchrun starts the process group), and
    settings that do nothing under another: tracker names without a tracker, checkpoints kept
    without checkpoints."""
    if cfg.distributed.backend == "nccl" and cfg.run.device in ("cpu", "mps"):
        raise ConfigError(f"Config key 'distributed.backend' = 'nccl' with run.device = {cfg.run.device!r}: NCCL "
                          "moves CUDA tensors only; gloo is the CPU backend (distributed.backend=gloo, or auto).")
    if not cfg.run.report_to:
        refuse_inert(cfg, ["run.project", "run.name"], "with no tracker in run.report_to")
    if not cfg.run.save_every:
        refuse_inert(cfg, ["run.keep_checkpoints"], "with run.save_every = 0 (only the final model is written)")


def check_supervised(cfg) -> None:
    """SFT's, the reward model's and DPO's settings against each other (:func:`check_common`, and
    those that do nothing under another setting)."""
    check_common(cfg)
    refuse_inert_lora(cfg, "lora")
    if cfg.data.eval:
        refuse_inert(cfg, ["data.eval_size"], "with data.eval given (it holds rows of data.train out only when "
                                              "there is no data.eval)")
    else:
        refuse_inert(cfg, ["data.eval_split"], "with no data.eval (it is the split of a hub data.eval)")
        if not cfg.data.eval_size:
            refuse_inert(cfg, ["eval_every"], "with no held-out data (no data.eval and data.eval_size = 0)")
