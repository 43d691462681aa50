"""The memory model: weights, gradients and optimiser state per role, and the peak of a run.

Per parameter (:func:`role_bytes`, the per-role lines of ``--dry-run``):

| weights dtype | trained parameter | frozen parameter |
| --- | --- | --- |
| float32 (fp32 weights, gradients and AdamW's two moments) | 4 + 4 + 8 = 16 B | 4 B |
| bfloat16 / float16 (half weights and gradients, fp32 AdamW moments) | 2 + 2 + 8 = 12 B | 2 B |

``run.precision=bf16`` autocasts over fp32 master weights: it is the float32 row.

The peak (:func:`predict_peak`) is the largest over a run's phases of what is resident then:
the process itself (:data:`BASELINE_BYTES`), every role's weights and the trained roles' AdamW
moments in every phase, plus the phase's transients, each from the model's shapes
(:class:`Shape`: hidden, intermediate, layers, heads, KV heads, vocabulary) and the run's tokens
(:class:`Workload`), for a Llama/Qwen2-layout decoder:

- rollout (generation): the KV cache, 2 × layers × KV heads × head_dim × (prompt + response) ×
  batch in the compute dtype; a decode step's logits and the sampler's copies (4 × [B, V] fp32)
  or the prefill's one-layer working set; the decode loop's packed copy of the actor's linear
  weights and LM head where oneDNN packs them (CPU, ``cpu.linear_backend``: :func:`decode_copy_bytes`).
- log-probs (old and reference log-probs, values, scores; DPO's reference pass): one forward
  without gradients at a time, which keeps one layer's outputs, plus the LM head's fp32 logits
  and logsumexp's temporary (and the entropy's three buffers for the actor's pass) at the
  response positions only, where tether runs the head.
- update (forward + backward + AdamW of one micro-batch; the actor's and the critic's at once
  under ``cpu.parallel_roles``): the trained role's gradients; the activations autograd keeps
  (:func:`layer_activation_bytes` per layer without checkpointing, each layer's input with it,
  plus one layer's backward working set); the head's logits, their gradient and a temporary
  (3 × [positions, V] fp32; SFT's head runs at every position from the model's own logits,
  :func:`sft_head_bytes`); autocast's casts of the linear weights; AdamW's step temporaries.
  On CPU with ``cpu.parallel_roles`` and ``cpu.retain_memory`` the update's threads allocate from
  their own glibc arenas, so what the main thread's rollout or log-prob passes freed (and glibc
  keeps mapped) stays resident beside them (``retained``).

The LM-head buffers are bounded by ``logprob_chunk`` positions at a time where the head runs in
chunks (:func:`tether.models.forward.logprobs_from_hidden`). SDPA's fused kernels keep no
(T × T) attention matrix, so none is counted. Weights loaded from safetensors are mapped from
the file (clean pages: RSS counts them once, as weights). Calibrated against measured peak RSS
(CPU, torch 2.13, transformers 5.23; docs/scale.md has the table): ``tether bench --model`` PPO
within 4 % (smollm2-135m fp32 and bf16, qwen2.5-0.5b LoRA + checkpointing + bf16), SFT
(``benchmarks/memory_model.py --measure-sft``) within 7 % with the model's own logits and 10 %
under with the chunked head, the CLI's PPO at the 0.5B shape 13 % under. On CUDA
(``Workload.device="cuda"``, against ``torch.cuda.max_memory_allocated``; docs/gpu.md): an H200's
SFT step within 6 %, ``tether bench --model qwen2.5-0.5b`` PPO within 1 % and GRPO 7 % over.
"""

from __future__ import annotations

from dataclasses import dataclass

from tether.registry.stages import STAGES, Passes

#: model.dtype -> (bytes per trained parameter, bytes per frozen parameter)
BYTES_PER_PARAM = {"float32": (16, 4), "bfloat16": (12, 2), "float16": (12, 2)}


@dataclass(frozen=True)
class RoleSize:
    """One role's parameters: ``frozen`` ones (a LoRA base, a frozen model) and ``trained`` ones
    (every weight in full training; the adapters, plus a head trained in full, with LoRA)."""

    frozen: int = 0
    trained: int = 0


def role_bytes(size: RoleSize, dtype: str = "float32") -> int:
    """Weights + gradients + AdamW state of one role, in bytes."""
    trained, frozen = BYTES_PER_PARAM[dtype]
    return size.trained * trained + size.frozen * frozen


def per_rank_bytes(roles: dict[str, RoleSize], dtype: str, world: int, strategy: dict[str, str]) -> dict[str, int]:
    """Bytes per rank of each role on ``world`` ranks: ``strategy[role]`` = ``fsdp`` shards a trained
    role (weights, gradients and optimiser state, a LoRA base included) over the ranks; ``ddp`` and
    frozen roles keep a whole copy on every rank."""
    out = {}
    for name, size in roles.items():
        whole = role_bytes(size, dtype)
        out[name] = -(-whole // world) if size.trained and strategy.get(name) == "fsdp" else whole
    return out


def sampling_peak_bytes(actor_params: int, dtype: str, world: int) -> int:
    """What FSDP adds while sampling: the rest of the actor's weights, gathered for the rollout."""
    return actor_params * BYTES_PER_PARAM[dtype][1] * (world - 1) // world


def human_bytes(n: float) -> str:
    """``1536`` -> ``'1.5 KB'`` (powers of 1000, as GPU memory is quoted)."""
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    raise AssertionError("unreachable")


# -- the peak: activations, logits, the KV cache, per phase ---------------------------------------

#: Resident memory of a tether process before any model: Python, torch, transformers, tokenizers
#: and tether imported, and what a run's set-up touches before its first model (the tokenizer,
#: the data, the config checks). Measured with torch 2.13 (CPU) and transformers 5.23: 223-244 MiB
#: right after importing torch, transformers and tether's SFT loop; 335 MiB in ``tether bench
#: --model`` just before its models are built (its report's ``rss_before_models_mb``).
BASELINE_BYTES = 330 * 2**20

#: Bytes per element of a dtype name (model.dtype, or the precision autocast computes in).
DTYPE_BYTES = {"float32": 4, "fp32": 4, "none": 4, "bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2}

PHASES = ("rollout", "logprobs", "update")


@dataclass(frozen=True)
class Shape:
    """A Llama/Qwen2-layout decoder's shapes (what the activations and caches scale with)."""

    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    vocab: int
    head_dim: int = 0  # 0: hidden // heads
    tied: bool = False

    @property
    def hd(self) -> int:
        return self.head_dim or self.hidden // self.heads

    @property
    def q(self) -> int:
        """Width of the queries (heads × head_dim)."""
        return self.heads * self.hd

    @property
    def kv(self) -> int:
        """Width of the keys or the values (KV heads × head_dim)."""
        return self.kv_heads * self.hd

    @classmethod
    def of(cls, config) -> "Shape":
        """From a transformers config (Llama, Qwen2, Mistral naming; GPT-2's n_* names too)."""
        get = lambda *names, default=None: next(  # noqa: E731
            (getattr(config, n) for n in names if getattr(config, n, None) is not None), default)
        hidden = get("hidden_size", "n_embd")
        heads = get("num_attention_heads", "n_head")
        return cls(hidden=hidden, intermediate=get("intermediate_size", "n_inner", default=4 * hidden),
                   layers=get("num_hidden_layers", "n_layer"), heads=heads,
                   kv_heads=get("num_key_value_heads", default=heads), vocab=get("vocab_size"),
                   head_dim=get("head_dim", default=0) or 0, tied=bool(get("tie_word_embeddings", default=False)))

    def layer_linear_params(self) -> int:
        """Weights of one layer's linear maps: q, k, v, o, gate, up, down."""
        h = self.hidden
        return h * self.q + 2 * h * self.kv + self.q * h + 3 * h * self.intermediate

    def causal_lm_params(self) -> int:
        """Embeddings, layers (linears, q/k/v biases as in Qwen2, two norms), final norm, LM head."""
        per_layer = self.layer_linear_params() + self.q + 2 * self.kv + 2 * self.hidden
        trunk = self.vocab * self.hidden + self.layers * per_layer + self.hidden
        return trunk + (0 if self.tied else self.vocab * self.hidden)

    def scalar_params(self) -> int:
        """The trunk and a hidden × 1 score head (no LM head)."""
        return self.causal_lm_params() - (0 if self.tied else self.vocab * self.hidden) + self.hidden

    def lora_params(self, rank: int) -> int:
        """LoRA r on every linear map of every layer: r × (in + out) each."""
        h, i = self.hidden, self.intermediate
        pairs = [(h, self.q), (h, self.kv), (h, self.kv), (self.q, h), (h, i), (h, i), (i, h)]
        return self.layers * sum(rank * (a + b) for a, b in pairs)


def layer_activation_bytes(shape: Shape, tokens: int, compute: int, residual: int = 4) -> int:
    """What autograd keeps for one decoder layer's backward, for ``tokens`` = batch × sequence.

    Per token (elements): the two RMSNorms keep their input and their normalised output (4 ×
    hidden, in the residual stream's dtype: fp32 master weights keep it fp32 under autocast);
    under autocast (``compute`` ≠ ``residual``) the two norm outputs' casts that the linear maps
    read (2 × hidden); attention keeps the rotated queries, the keys and values as SDPA sees them
    (repeated to every query head), its output and o_proj's contiguous input (5 × heads ×
    head_dim); the MLP keeps gate, up, SiLU(gate) and the product down_proj reads (4 ×
    intermediate), all in ``compute`` bytes. SDPA's fused kernels keep no (T × T) matrix.
    """
    h = shape.hidden
    casts = 2 * h * compute if compute != residual else 0
    per_token = 4 * h * residual + casts + (5 * shape.q + 4 * shape.intermediate) * compute
    return tokens * per_token


def activation_bytes(shape: Shape, tokens: int, compute: int, checkpointing: bool, residual: int = 4) -> int:
    """Activations of one micro-batch's forward + backward through the trunk (``tokens`` = batch ×
    sequence), at the backward's start, where they peak.

    Without checkpointing every layer's :func:`layer_activation_bytes`; with it each layer keeps
    its input only (hidden × residual bytes) and one layer's are recomputed at a time. Either way
    the backward's working set is one more layer's worth (the gradients of the layer being
    back-propagated), and the embedding output and the final norm's input and output stay (3 ×
    hidden × residual).
    """
    kept, working = activation_split(shape, tokens, compute, checkpointing, residual)
    return kept + working


def activation_split(shape: Shape, tokens: int, compute: int, checkpointing: bool,
                     residual: int = 4) -> tuple[int, int]:
    """:func:`activation_bytes` as (kept, working): what the forward leaves for the backward (every
    layer's activations, or each layer's input under checkpointing, and the embedding output and
    the final norm's input and output) and the trunk's backward working set (one layer's gradients,
    plus the recomputed layer under checkpointing), which exists only once the head's backward is done."""
    layer = layer_activation_bytes(shape, tokens, compute, residual)
    ends = 3 * tokens * shape.hidden * residual
    if checkpointing:
        return shape.layers * tokens * shape.hidden * residual + ends, 2 * layer
    return shape.layers * layer + ends, layer


def inference_activation_bytes(shape: Shape, tokens: int, compute: int, residual: int = 4) -> int:
    """A forward without gradients keeps nothing: its working set is about one layer's outputs."""
    return layer_activation_bytes(shape, tokens, compute, residual) + 2 * tokens * shape.hidden * residual


def head_bytes(positions: int, vocab: int, grad: bool, entropy: bool = False, chunk: int | None = None) -> int:
    """fp32 LM-head buffers of tether's log-prob path (:func:`tether.models.forward.logprobs_from_hidden`)
    at ``positions`` = batch × response tokens (tether runs the head at response positions only),
    in [n, V] fp32 buffers, n the positions at once (measured: ``benchmarks/memory_model.py``).

    All at once: without gradients the (temperature-scaled) logits and logsumexp's exp temporary
    (2); with them the logits kept for the backward, the gather's scattered gradient and
    logsumexp's exp and product (4). In ``chunk``-position chunks (n = the chunk) one more each
    (3 and 5: the chunk's recomputed forward overlaps its backward). An entropy adds softmax,
    its finite copy and their product (3 more).
    """
    n = min(positions, chunk) if chunk else positions
    chunked = bool(chunk) and positions > chunk
    per = (4 if grad else 2) + (1 if chunked else 0) + (3 if entropy else 0)
    return per * n * vocab * 4


def sft_head_bytes(positions: int, vocab: int, compute: int, device: str = "cpu") -> int:
    """SFT's head over every position (the model's own ``.logits``, then fp32 log-probs): the
    logits in ``compute`` bytes, their fp32 copy (none when already fp32) and logsumexp's exp
    temporary in the forward; the backward adds the fp32 gradient, a temporary and the sliced
    gradient's full-size copy (and its cast back when the logits were half). On CUDA (fused
    logsumexp, and the allocator reuses what was freed) two fp32 [positions, V] buffers at once
    (measured on an H200: tests/gpu/test_gpu_memory.py, docs/gpu.md)."""
    fp32 = 4 * positions * vocab
    if device == "cuda":
        return 2 * fp32
    half = compute * positions * vocab if compute != 4 else 0
    return 4 * fp32 + 2 * half


def kv_cache_bytes(shape: Shape, batch: int, tokens: int, dtype_bytes: int) -> int:
    """Generation's KV cache: 2 × layers × KV heads × head_dim × tokens (prompt + response) × batch."""
    return 2 * shape.layers * shape.kv * tokens * batch * dtype_bytes


def decode_bytes(shape: Shape, batch: int, tokens: int, dtype_bytes: int) -> int:
    """A decode step's transients besides the cache: the growing cache's concatenation copies one
    layer's keys and values, and the step's fp32 logits with the sampler's filtered copy,
    softmax and log-softmax (4 × [B, V])."""
    return 2 * shape.kv * tokens * batch * dtype_bytes + 4 * batch * shape.vocab * 4


def autocast_copy_bytes(shape: Shape, role: RoleSize, grad: bool, checkpointing: bool, compute: int,
                        weight: int) -> int:
    """Autocast's casts of the decoder's linear weights (none without autocast: ``compute`` =
    ``weight``). Autocast caches the cast of every trained weight for the whole forward (a role
    trained in full: all of them); autograd keeps a frozen weight's cast for the backward (LoRA
    without checkpointing: all of them); otherwise one layer's casts live at a time."""
    if compute == weight:
        return 0
    every = shape.layers * shape.layer_linear_params()
    if (role.trained and not role.frozen) or (grad and not checkpointing):
        return every * compute
    return shape.layer_linear_params() * compute


@dataclass(frozen=True)
class Workload:
    """The token shapes of a run that the transient buffers scale with (per rank).

    ``stage``: a registered stage; ``passes``: a supervised stage's micro-batch (its registry
    entry's, filled in from ``stage`` when not given; None: an RL stage). Supervised stages:
    ``micro_batch`` rows (examples, pairs, KTO rows) of ``seq`` tokens, of which ``response`` are
    the response. RL: ``batch`` episodes per iteration (the rollout and the log-prob passes
    take them at once), ``prompt`` + ``response`` tokens each, updates on ``micro_batch`` episodes.
    ``precision``: run.precision (bf16/fp16 autocast over ``dtype`` weights); ``logprob_chunk``:
    positions per chunk of the LM head and its log-softmax (None: all at once).
    """

    stage: str
    micro_batch: int
    batch: int = 0
    seq: int = 0
    prompt: int = 0
    response: int = 0
    precision: str = "fp32"
    dtype: str = "float32"
    grad_ckpt: bool = False
    entropy: bool = False
    logprob_chunk: int | None = None
    parallel_roles: bool = False  # cpu.parallel_roles: the actor's and the critic's updates at once
    captured_logprobs: bool = True  # rollout.capture_logprobs: the actor's old log-probs come from sampling
    #: cpu.retain_memory on a CPU: freed heap stays mapped. AdamW's step then adds to the update's
    #: activations instead of reusing them; and the update's threads (parallel_roles) allocate from
    #: their own glibc arenas, which cannot reuse what the main thread's rollout and log-prob passes freed.
    retained_heap: bool = False
    decode_copy: int = 0  # bytes per packed weight of the decode loop's oneDNN linears (:func:`decode_copy_bytes`)
    #: "cpu": peak RSS, where what a step frees stays mapped, so its transients add up; "cuda": the
    #: caching allocator's live tensors, where the trunk's backward working set reuses what the
    #: head's backward freed (the update counts the larger of the two, not both).
    device: str = "cpu"
    passes: Passes | None = None

    def __post_init__(self):
        if self.passes is None and self.stage in STAGES:
            object.__setattr__(self, "passes", STAGES[self.stage].passes)


SPLIT = ("baseline", "weights", "gradients", "optimizer", "optimizer_step", "weight_copies", "activations", "logits",
         "kv_cache", "retained")


def _split(**parts: int) -> dict[str, int]:
    out = {key: int(parts.get(key, 0)) for key in SPLIT}
    out["total"] = sum(out[key] for key in SPLIT)
    return out


def _pass(shape: Shape, run: Workload, role: RoleSize, tokens: int, head: int, grad: bool) -> dict[str, int]:
    """One role's forward (and backward when ``grad``) over ``tokens``: its transient bytes."""
    compute = DTYPE_BYTES[run.precision] if run.precision not in (None, "none", "fp32") else DTYPE_BYTES[run.dtype]
    weight = DTYPE_BYTES[run.dtype]
    residual = weight  # fp32 master weights keep the residual stream fp32 under autocast
    if not grad:
        acts = inference_activation_bytes(shape, tokens, compute, residual)
    elif run.device == "cuda":  # the head's buffers and the trunk's backward working set: the larger
        kept, working = activation_split(shape, tokens, compute, run.grad_ckpt, residual)
        acts = kept + max(working - head, 0)
    else:
        acts = activation_bytes(shape, tokens, compute, run.grad_ckpt, residual)
    casts = autocast_copy_bytes(shape, role, grad, run.grad_ckpt, compute, weight)
    if run.passes and run.passes.head == "tokens" and not run.logprob_chunk and compute != weight:
        # the model's own LM head over every position: autocast casts its weight too
        casts += shape.vocab * shape.hidden * compute
    out = {"activations": acts, "logits": head, "gradients": role.trained * weight if grad else 0,
           "weight_copies": casts, "optimizer_step": 0}
    step = optimizer_step_bytes(shape, role) if grad else 0
    if run.retained_heap and run.passes:
        # cpu.retain_memory: the heap keeps the pages the backward freed (blocks under 32 MiB), and
        # AdamW's embedding-sized temporaries are fresh mappings beside them: the two add up.
        out["optimizer_step"] = step
    elif step > acts + head + casts:  # AdamW steps after the backward has freed these: the larger counts
        out.update(activations=0, logits=0, weight_copies=0, optimizer_step=step)
    return out


#: oneDNN packs a linear for the decode loop when batch × its weights reach this many
#: multiply-accumulates (:data:`tether.engines.cpu.onednn.MIN_MACS`).
PACK_MIN_MACS = 1 << 22


def decode_copy_bytes(shape: Shape, batch: int, per_weight: int) -> int:
    """The lean decode loop's oneDNN-packed weights (:func:`tether.engines.cpu.onednn.packed_linears`),
    held for the whole rollout: each decoder linear and the LM head whose batch × weights reach
    :data:`PACK_MIN_MACS`, at ``per_weight`` bytes (0: no packing). 4 either way, measured: an fp32
    copy, or a bf16 copy plus its bf16 cast, which stays allocated beside it."""
    if not per_weight:
        return 0
    h, i = shape.hidden, shape.intermediate
    layer = [h * shape.q, h * shape.kv, h * shape.kv, shape.q * h, h * i, h * i, i * h]
    packed = shape.layers * sum(n for n in layer if batch * n >= PACK_MIN_MACS)
    head = shape.vocab * h if batch * shape.vocab * h >= PACK_MIN_MACS else 0
    return (packed + head) * per_weight


def default_logprob_chunk(vocab: int) -> int:
    """Positions per chunk of tether's LM head (the log-probs of SFT, DPO and RL):
    :func:`tether.models.forward.logprob_chunk`."""
    from tether.models.forward import logprob_chunk

    return logprob_chunk(vocab)


def optimizer_step_bytes(shape: Shape, role: RoleSize) -> int:
    """AdamW's step on CPU (one tensor at a time) makes two temporaries the size of the tensor
    it updates (``sqrt`` of the second moment, then its scaled copy): the largest, the
    embedding (vocabulary × hidden, fp32 moments), in a role trained in full; LoRA's are small."""
    return 2 * shape.vocab * shape.hidden * 4 if role.trained and not role.frozen else 0


def _add(*parts: dict[str, int]) -> dict[str, int]:
    out: dict[str, int] = {}
    for part in parts:
        for key, value in part.items():
            out[key] = out.get(key, 0) + value
    return out


def _largest(parts: list[dict[str, int]]) -> dict[str, int]:
    return max(parts, key=lambda p: sum(p.values())) if parts else {}


def _supervised_transients(shape: Shape, trained: RoleSize, run: Workload) -> dict[str, dict[str, int]]:
    """A supervised stage's micro-batch (its entry's :class:`~tether.registry.stages.Passes`): the
    trained pass over ``sequences`` per row, and the reference's pass before training, if any."""
    passes, micro, v, chunk = run.passes, run.micro_batch, shape.vocab, run.logprob_chunk
    tokens = passes.sequences * micro * run.seq
    if passes.head == "tokens":  # every position: SFT through tether.models.forward.sequence_logprobs
        positions = micro * (run.seq - 1)
        head = (head_bytes(positions, v, True, False, chunk) if chunk
                else sft_head_bytes(positions, v, _compute(run), run.device))
    elif passes.head == "score":  # a scalar head at the last token only
        head = 0
    else:  # log-probs at the response positions
        head = head_bytes(passes.sequences * micro * (run.response or run.seq), v, True, False, chunk)
    phases = {"update": _pass(shape, run, trained, tokens, head, True)}
    if passes.reference:
        positions = passes.reference * micro * (run.response or run.seq)
        phases = {"logprobs": _pass(shape, run, RoleSize(frozen=1), passes.reference * micro * run.seq,
                                    head_bytes(positions, v, False, False, chunk), False), **phases}
    return phases


def phase_transients(shape: Shape, roles: dict[str, RoleSize], run: Workload) -> dict[str, dict[str, int]]:
    """Each phase's transient bytes by kind: the largest pass of the phase (passes run one after
    another; ``parallel_roles`` adds the actor's and the critic's updates together)."""
    v, chunk = shape.vocab, run.logprob_chunk
    actor = roles.get("actor") or roles.get("policy") or roles.get("reward") or RoleSize()
    if run.passes:
        return _supervised_transients(shape, actor, run)
    tokens, length = run.batch * (run.prompt + run.response), run.prompt + run.response
    positions = run.batch * run.response
    compute = _compute(run)
    rollout = _pass(shape, run, actor, run.batch * run.prompt, 0, False)
    rollout["activations"] = max(rollout["activations"], decode_bytes(shape, run.batch, length, compute))
    rollout["kv_cache"] = kv_cache_bytes(shape, run.batch, length, compute)
    rollout["weight_copies"] += decode_copy_bytes(shape, run.batch, run.decode_copy)
    logprobs = []
    for name, role in roles.items():
        if name == "reference" or (name == "actor" and not run.captured_logprobs):
            entropy = name == "actor"  # the actor's log-prob pass also takes the entropies
            logprobs.append(_pass(shape, run, role, tokens, head_bytes(positions, v, False, entropy, chunk), False))
        elif name != "actor":  # values, scores: the trunk and a scalar head
            logprobs.append(_pass(shape, run, role, tokens, 0, False))
    micro_tokens, micro_positions = run.micro_batch * length, run.micro_batch * run.response
    updates = [_pass(shape, run, actor, micro_tokens, head_bytes(micro_positions, v, True, run.entropy, chunk), True)]
    if "critic" in roles:
        updates.append(_pass(shape, run, roles["critic"], micro_tokens, 0, True))
    update = _add(*updates) if run.parallel_roles else _largest(updates)
    logprobs = _largest(logprobs)
    if run.parallel_roles and run.retained_heap:
        update["retained"] = max(sum(rollout.values()), sum(logprobs.values()))
    return {"rollout": rollout, "logprobs": logprobs, "update": update}


def _compute(run: Workload) -> int:
    return DTYPE_BYTES[run.precision] if run.precision not in (None, "none", "fp32") else DTYPE_BYTES[run.dtype]


def predict_peak(shape: Shape, roles: dict[str, RoleSize], run: Workload, baseline: int = BASELINE_BYTES) -> dict:
    """The predicted peak resident bytes of a run: the most over its phases of what is resident.

    Resident in every phase: the process ``baseline``, every role's weights and the trained roles'
    AdamW moments; each phase adds its largest pass's transients (:func:`phase_transients`:
    gradients of the role being updated, activations, LM-head buffers, the KV cache, autocast's
    weight casts, the decode loop's packed weights, AdamW's step). Returns ``{"total": bytes,
    "phase": the peak's phase, "split": {kind: bytes} of that phase, "phases": {phase: {kind:
    bytes, "total": bytes}}}``, kinds as :data:`SPLIT`.
    """
    weight = DTYPE_BYTES[run.dtype]
    weights = sum((r.trained + r.frozen) * weight for r in roles.values())
    optimizer = sum(r.trained * 8 for r in roles.values())  # AdamW's two fp32 moments
    phases = {name: _split(baseline=baseline, weights=weights, optimizer=optimizer, **parts)
              for name, parts in phase_transients(shape, roles, run).items()}
    peak = max(phases, key=lambda name: phases[name]["total"])
    return {"total": phases[peak]["total"], "phase": peak, "split": phases[peak], "phases": phases}


def bench_roles(shape: Shape, algorithm: str, lora_rank: int | None) -> dict[str, RoleSize]:
    """The roles of an RL run whose models all have ``shape`` (``tether bench``: policy and
    reference causal LMs, reward model and critic scalar models). Under LoRA the reference is the
    actor's base with its adapters off and the reward model the critic's (no copies); without a
    critic (grpo) the reward model is its own frozen copy."""
    lm, scalar = shape.causal_lm_params(), shape.scalar_params()
    from tether.registry.algorithms import algorithm_spec

    critic = algorithm_spec(algorithm).needs_critic
    if lora_rank is None:
        roles = {"actor": RoleSize(trained=lm), "reference": RoleSize(frozen=lm), "reward": RoleSize(frozen=scalar)}
        if critic:
            roles["critic"] = RoleSize(trained=scalar)
        return roles
    adapters = shape.lora_params(lora_rank)
    roles = {"actor": RoleSize(frozen=lm, trained=adapters), "reference": RoleSize()}
    if critic:
        roles.update(critic=RoleSize(frozen=scalar, trained=adapters + shape.hidden), reward=RoleSize())
    else:
        roles["reward"] = RoleSize(frozen=scalar)
    return roles
