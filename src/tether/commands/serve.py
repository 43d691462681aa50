"""`tether serve`: an OpenAI-compatible HTTP API over a policy, optionally with a reward model."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from tether.registry.engines import DEFAULT_ENGINE, ENGINES, engine_names, engine_spec

DESCRIPTION = (
    "Serve a policy checkpoint (a run directory such as runs/demo/ppo, or any Hugging Face causal LM) over "
    "HTTP: GET /v1/models, POST /v1/chat/completions and /v1/completions (OpenAI schemas, SSE streaming), "
    "GET /health. With --reward-model, requests may ask for best_of (best-of-N reranking) and "
    "POST /v1/rewards scores prompt/response pairs, which PPO can use as reward.url. See docs/serving.md."
)


MAX_THREADS = 1024  # as run.threads in the stages
SEED_RANGE = (-(2**63), 2**64 - 1)  # what torch.manual_seed accepts
DEFAULT_MAX_TOKENS = 256


class _Default(int):
    """An int default argparse hands back untouched: tells 'not given' from 'given the same value'."""


def register(sub) -> None:
    p = sub.add_parser("serve", help="Serve a model over an OpenAI-compatible HTTP API (best-of-N, rewards).",
                       description=DESCRIPTION, formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--model", required=True, help="Policy checkpoint directory or hub id.")
    p.add_argument("--reward-model", default=None,
                   help="Scalar-head reward model (e.g. runs/demo/rm): enables best_of and POST /v1/rewards.")
    p.add_argument("--model-name", default=None,
                   help="The model id clients send and /v1/models lists (default: the --model directory name).")
    p.add_argument("--host", default="127.0.0.1", help="Interface to bind; 0.0.0.0 exposes the server.")
    p.add_argument("--port", type=int, default=8000,
                   help="TCP port, 0 to 65535; 0 picks a free one (the banner shows which).")
    p.add_argument("--api-key", default=None,
                   help="Require 'Authorization: Bearer KEY' on /v1/*. Default: the TETHER_API_KEY variable, if set.")
    p.add_argument("--best-of-default", type=int, default=1,
                   help="Candidates per prompt for non-streaming requests that give no best_of (needs --reward-model).")
    p.add_argument("--default-max-tokens", type=int, default=_Default(DEFAULT_MAX_TOKENS),
                   help="max_tokens when a request gives none (when not given: at most --max-tokens-limit).")
    p.add_argument("--max-tokens-limit", type=int, default=512, help="Largest max_tokens a request may ask for.")
    p.add_argument("--max-n", type=int, default=16,
                   help="Most sequences one request may sample (prompts x max(n, best_of)).")
    p.add_argument("--max-prompt-tokens", type=int, default=4096, help="Longest prompt accepted, in tokens.")
    p.add_argument("--max-body-bytes", type=int, default=4 * 1024 * 1024, help="Largest request body (413 above).")
    p.add_argument("--queue-depth", type=int, default=64, help="Requests waiting for the model before 429.")
    p.add_argument("--max-batch-size", type=int, default=32, help="Sequences per generate call.")
    p.add_argument("--max-reward-pairs", type=int, default=1024, help="Pairs per POST /v1/rewards.")
    p.add_argument("--batch-wait-ms", type=float, default=5.0,
                   help="How long the worker waits for more requests when a batch is not full.")
    p.add_argument("--chat-template", choices=("auto", "always", "never"), default="auto",
                   help="How /v1/rewards formats string prompts (match PPO's model.chat_template).")
    p.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), default="float32", help="Weights dtype.")
    p.add_argument("--engine", choices=sorted(engine_names()), default=DEFAULT_ENGINE,
                   help="Generation engine, as rollout.engine in training. vllm: stop sequences and per-request "
                        "max_tokens apply to whole responses, and streamed text arrives when its batch is done.")
    p.add_argument("--gpu-memory-utilization", type=float, default=0.3,
                   help="--engine vllm: fraction of GPU memory (on vLLM's CPU build: of RAM) for weights and KV cache.")
    p.add_argument("--max-model-len", type=int, default=None,
                   help="--engine vllm: positions per sequence (default: the model's context).")
    p.add_argument("--device", default="auto", help="auto (CUDA when available, else CPU), cpu, cuda, cuda:N or mps.")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = torch's default).")
    p.add_argument("--shutdown-timeout", type=float, default=30.0,
                   help="Seconds open requests get to finish after SIGTERM/SIGINT.")
    p.add_argument("--seed", type=int, default=None, help="Seed for requests without one (default: random).")
    p.add_argument("--trust-remote-code", action="store_true", help="Passed to from_pretrained.")
    p.add_argument("--no-access-log", action="store_true", help="Do not log a line per request.")


def _name(path: str) -> str:
    p = Path(path)
    return p.name if p.exists() else path


def check_args(args) -> None:
    """The arguments the settings record does not hold, alone and in combination (ConfigError)."""
    import os

    from tether.common.errors import ConfigError

    model = "a checkpoint directory or hub id"
    for flag, value, expected in (("--model", args.model, model), ("--reward-model", args.reward_model, model),
                                  ("--model-name", args.model_name, "a model id (omit it for the --model name)"),
                                  ("--host", args.host, "an interface address such as 127.0.0.1 or 0.0.0.0")):
        if value is not None and not value.strip():
            raise ConfigError(f"{flag} is empty ({value!r}); expected {expected}.")
    from tether.config.common import check_device_spec

    check_device_spec(args.device, "--device")
    if not 0 < args.gpu_memory_utilization <= 1:
        raise ConfigError(f"--gpu-memory-utilization must be in (0, 1] (a fraction of the device's memory), got "
                          f"{args.gpu_memory_utilization}.")
    if args.max_model_len is not None and args.max_model_len < 1:
        raise ConfigError(f"--max-model-len must be a positive number of positions, got {args.max_model_len}.")
    if engine_spec(args.engine, "--engine").config_block is None and (
            args.gpu_memory_utilization != 0.3 or args.max_model_len is not None):
        owners = " or ".join(f"--engine {s.name}" for s in ENGINES.values() if s.config_block)
        raise ConfigError(f"--gpu-memory-utilization and --max-model-len set up an engine with settings of its own: "
                          f"they need {owners}.")
    if not 0 <= args.port <= 65535:
        raise ConfigError(f"--port must be a TCP port from 0 to 65535 (0 picks a free port), got {args.port}.")
    if not 0 <= args.threads <= MAX_THREADS:
        raise ConfigError(f"--threads must be from 0 to {MAX_THREADS} (torch CPU threads; 0 = the "
                          f"default), got {args.threads}.")
    if args.seed is not None and not SEED_RANGE[0] <= args.seed <= SEED_RANGE[1]:
        raise ConfigError(f"--seed must be an integer from -2**63 to 2**64-1 (the range torch accepts), "
                          f"got {args.seed}.")
    if not (math.isfinite(args.shutdown_timeout) and args.shutdown_timeout >= 0):
        raise ConfigError(f"--shutdown-timeout must be a finite number of seconds >= 0 (how long open requests "
                          f"may finish after SIGTERM/SIGINT), got {args.shutdown_timeout}.")
    explicit_default = not isinstance(args.default_max_tokens, _Default)
    if explicit_default and 1 <= args.max_tokens_limit < args.default_max_tokens:
        raise ConfigError(f"--default-max-tokens {args.default_max_tokens} exceeds --max-tokens-limit "
                          f"{args.max_tokens_limit}; expected at most the limit (requests may not ask for more).")
    if args.api_key is not None:
        _check_api_key("--api-key", args.api_key)
    elif os.environ.get("TETHER_API_KEY"):
        _check_api_key("the TETHER_API_KEY variable", os.environ["TETHER_API_KEY"])


def _check_api_key(source: str, key: str) -> None:
    from tether.common.errors import ConfigError

    if not key.strip():
        raise ConfigError(f"{source} is empty or blank; expected a key (omit it to serve without one).")
    if key != key.strip() or not all(32 <= ord(c) <= 126 for c in key):
        raise ConfigError(f"{source} must be printable ASCII without leading or trailing spaces (clients send it "
                          "in the 'Authorization: Bearer KEY' header, so no other key could ever match), got "
                          "one that is not.")


def settings_from_args(args):
    import os

    from tether.serve import ServeSettings

    api_key = args.api_key if args.api_key is not None else os.environ.get("TETHER_API_KEY") or None
    default_max_tokens = int(args.default_max_tokens)
    if isinstance(args.default_max_tokens, _Default):
        default_max_tokens = min(default_max_tokens, max(args.max_tokens_limit, 1))
    return ServeSettings(
        model_name=args.model_name or _name(args.model),
        reward_model_name=_name(args.reward_model) if args.reward_model else None,
        api_key=api_key,
        best_of_default=args.best_of_default,
        default_max_tokens=default_max_tokens,
        max_tokens_limit=args.max_tokens_limit,
        max_n=args.max_n,
        max_prompt_tokens=args.max_prompt_tokens,
        max_body_bytes=args.max_body_bytes,
        queue_depth=args.queue_depth,
        max_batch_size=args.max_batch_size,
        max_reward_pairs=args.max_reward_pairs,
        batch_wait_ms=args.batch_wait_ms,
        chat_template=args.chat_template,
    )


def _exit_on_signal(signum, frame):
    raise SystemExit(128 + signum)


def run(args) -> int:
    import signal

    from tether.serve.server import bind_socket

    # Every argument first, then the socket (a busy port or a bad host fails in a moment), and
    # only then torch and the (slow) model load.
    check_args(args)
    settings = settings_from_args(args)
    settings.validate(bool(args.reward_model))
    sock = bind_socket(args.host, args.port)
    try:
        import logging

        import torch

        from tether.runs import set_threads
        from tether.serve import ModelService, create_app, serve

        port = sock.getsockname()[1]
        set_threads(args.threads)
        if args.seed is not None:
            torch.manual_seed(args.seed)
        else:
            torch.seed()
        from tether.engines import EngineSettings
        from tether.common.runtime import Precision, resolve_device

        where = EngineSettings(resolve_device(args.device, "--device"), Precision("fp32"))
        from tether.rollout import check_frozen

        # The engine's own settings (an engine without a settings block ignores them).
        options = dict(dtype=args.dtype, gpu_memory_utilization=args.gpu_memory_utilization,
                       max_model_len=args.max_model_len, seed=(args.seed or 0) % (2**31 - 1))
        check_frozen(args.engine, (args.model,), options)  # what would stop the engine, before the weights load
        service = ModelService.load(args.model, args.reward_model, args.dtype, args.trust_remote_code,
                                    args.max_batch_size, args.engine, where, options)
        app = create_app(service, settings)
        logging.getLogger("tether").setLevel(logging.INFO)
        auth = "API key required" if settings.api_key else "no API key"
        host = f"[{args.host}]" if ":" in args.host else args.host
        print(f"tether serve: '{settings.model_name}'"
              + (f" + reward model '{settings.reward_model_name}'" if service.has_reward else "")
              + f" on http://{host}:{port}/v1 ({auth})", flush=True)
        # uvicorn shuts down on SIGTERM, then raises the signal again under the handler it found:
        # with Python's default the process would die there, before the models are released (vLLM's
        # engine-core process would outlive it). This handler turns it into an exit that runs them.
        signal.signal(signal.SIGTERM, _exit_on_signal)
        try:
            serve(app, args.host, port, shutdown_timeout=args.shutdown_timeout, access_log=not args.no_access_log,
                  sock=sock)
        finally:
            service.close()
    finally:
        sock.close()
    return 0
