"""The server's knobs: names, limits and defaults. One frozen record shared by every part."""

from __future__ import annotations

from dataclasses import dataclass

from tether.common.errors import ConfigError

MiB = 1024 * 1024
MAX_BATCH_WAIT_MS = 10_000  # a longer wait would only stall requests


@dataclass(frozen=True)
class ServeSettings:
    """Limits answer bad or oversized requests with a 4xx before any model work is queued."""

    model_name: str = "tether"  # the id clients put in `model` and GET /v1/models lists
    reward_model_name: str | None = None
    api_key: str | None = None  # when set, /v1/* needs `Authorization: Bearer <key>`
    best_of_default: int = 1  # candidates per prompt when a non-streaming request gives no best_of
    default_max_tokens: int = 256  # when a request gives no max_tokens (capped by the context)
    max_tokens_limit: int = 512  # largest max_tokens a request may ask for
    max_n: int = 16  # most sequences one request may sample: prompts x max(n, best_of)
    max_prompt_tokens: int = 4096
    max_body_bytes: int = 4 * MiB
    queue_depth: int = 64  # requests waiting for the model; one more gets 429
    max_batch_size: int = 32  # sequences per generate call
    max_reward_pairs: int = 1024  # pairs per POST /v1/rewards
    batch_wait_ms: float = 5.0  # how long the worker lets concurrent requests gather
    chat_template: str = "auto"  # how /v1/rewards formats string prompts (as PPO's model.chat_template)

    def validate(self, has_reward_model: bool) -> None:
        positive = ("default_max_tokens", "max_tokens_limit", "max_n", "max_prompt_tokens", "max_body_bytes",
                    "queue_depth", "max_batch_size", "max_reward_pairs", "best_of_default")
        for name in positive:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"--{name.replace('_', '-')} must be an integer, got {value!r}.")
            if value < 1:
                raise ConfigError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}.")
        wait = self.batch_wait_ms
        if isinstance(wait, bool) or not isinstance(wait, (int, float)) or not 0 <= wait <= MAX_BATCH_WAIT_MS:
            # NaN fails every comparison; a huge wait would overflow time.sleep in the worker.
            raise ConfigError(f"--batch-wait-ms must be a number of milliseconds from 0 to {MAX_BATCH_WAIT_MS} "
                              f"(the worker waits this long for a batch to fill), got {wait}.")
        if self.best_of_default > 1 and not has_reward_model:
            raise ConfigError("--best-of-default > 1 needs --reward-model to rank the candidates.")
        if self.best_of_default > self.max_n:
            raise ConfigError(f"--best-of-default {self.best_of_default} exceeds --max-n {self.max_n}.")
        if self.chat_template not in ("auto", "always", "never"):
            raise ConfigError(f"--chat-template must be auto, always or never, got {self.chat_template!r}.")
