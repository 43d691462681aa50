"""On-policy distillation's block (``distill``, read by ``algorithm=distill`` only) and the checks of
a distillation run: a teacher that differs from the student, in process or over an endpoint."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tether.config.base import option
from tether.common.errors import ConfigError


@dataclass(frozen=True)
class DistillConfig:
    """The student samples; a frozen teacher scores every sampled token; the student is trained to lower
    the divergence from the teacher on its own samples (docs/algorithms.md, On-policy distillation)."""

    divergence: Literal["reverse_kl", "jsd"] = option(
        "reverse_kl", "The per-token divergence estimated on the student's samples: reverse_kl = KL(student || "
                      "teacher) (MiniLLM, GKD on-policy); jsd = GKD's generalised Jensen-Shannon divergence of "
                      "weight distill.beta (tether.algos.distill).")
    beta: float = option(0.5, "jsd's beta: the teacher's weight in the mixture M = beta T + (1 - beta) S (small: "
                              "towards the forward KL; near 1: towards the reverse KL). Read with divergence=jsd only.",
                         gt=0, lt=1)
    discount: float = option(
        0.0, "A token's advantage is its own divergence term plus discount^k times the one k sampled tokens "
             "later: 0 = its own alone (each position's divergence), 1 = the sum to the end of the response.",
        ge=0, le=1)
    teacher_url: str | None = option(
        None, "A teacher behind an OpenAI-compatible completions endpoint that returns prompt log-probs (vLLM's "
              "server, `tether serve`): POST {url}/v1/completions with the token ids, echo and logprobs. Instead "
              "of the in-process teacher `reference`.")
    teacher_model: str | None = option(None, "The `model` the teacher endpoint serves (null: the first of its "
                                             "GET /v1/models).")
    teacher_api_key: str | None = option(
        None, "API key for teacher_url; it is saved in config.yaml, so prefer null and the TETHER_API_KEY variable.")
    teacher_timeout_s: float = option(120.0, "Seconds one teacher request may take before it counts as failed.",
                                      gt=0)
    teacher_batch_size: int = option(16, "Sequences per teacher request.", ge=1)


def check_distill(cfg) -> None:
    """A distillation run needs a teacher: ``reference`` (a checkpoint other than the student's) or
    ``distill.teacher_url``, not both; the JSD's beta only with divergence=jsd; an endpoint's
    log-probs are the teacher's at temperature 1, so the student must sample at 1 too."""
    d = cfg.distill
    if d.teacher_url and cfg.reference:
        raise ConfigError(f"Config keys 'reference' = {cfg.reference!r} and 'distill.teacher_url' = {d.teacher_url!r}: "
                          "each names the teacher; set one (reference: a checkpoint in this process; teacher_url: an "
                          "endpoint).")
    if not d.teacher_url and not cfg.reference:
        raise ConfigError("algorithm=distill needs a teacher: set 'reference' to the teacher's checkpoint (it must "
                          "share the student's tokenizer) or 'distill.teacher_url' to an endpoint serving it. With "
                          "neither, the teacher would be the student itself and there is nothing to learn.")
    if cfg.reference and cfg.reference == cfg.model.name_or_path:
        raise ConfigError(f"Config key 'reference' = {cfg.reference!r} is the student (model.name_or_path): the "
                          "divergence from itself is 0 on every token, so nothing would train; expected the "
                          "teacher's checkpoint.")
    if d.divergence != "jsd" and d.beta != 0.5:
        raise ConfigError(f"Config key 'distill.beta' = {d.beta} is set with distill.divergence={d.divergence}, "
                          "which does not read it (beta weighs jsd's mixture); drop it or set divergence=jsd.")
    if d.teacher_model and not d.teacher_url:
        raise ConfigError("Config key 'distill.teacher_model' is set without distill.teacher_url, so it would have "
                          "no effect; drop it.")
    if d.teacher_url and cfg.rollout.temperature != 1.0:
        raise ConfigError(f"Config key 'rollout.temperature' = {cfg.rollout.temperature} with distill.teacher_url: "
                          "an endpoint returns the teacher's log-probs at temperature 1, and the student's are taken "
                          "at the sampling temperature, so the two would describe different distributions; sample "
                          "at 1.0 (or use an in-process teacher, `reference`).")
