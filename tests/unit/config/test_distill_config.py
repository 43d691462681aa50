"""algorithm=distill's config: a teacher is required (in process or over an endpoint, not both, not
the student itself); the reward and kl blocks, and settings distill would not read, are refused."""

from __future__ import annotations

import pytest

from tether.common.errors import ConfigError
from tether.config import RLConfig, load_config

BASE = ["algorithm=distill", "model.name_or_path=student", "prompts=p.jsonl"]


def distill(*overrides):
    return load_config(RLConfig, None, [*BASE, *overrides])


def error_of(*overrides) -> str:
    with pytest.raises(ConfigError) as info:
        distill(*overrides)
    return str(info.value)


def test_a_teacher_in_process_or_over_an_endpoint():
    cfg = distill("reference=teacher")
    assert cfg.reference == "teacher" and cfg.distill.divergence == "reverse_kl" and not cfg.needs_critic
    cfg = distill("distill.teacher_url=http://127.0.0.1:8000", "distill.divergence=jsd", "distill.beta=0.9")
    assert cfg.distill.beta == 0.9 and cfg.reference is None


@pytest.mark.parametrize("overrides,expected", [
    ([], ["needs a teacher", "'reference'", "'distill.teacher_url'"]),
    (["reference=student"], ["'reference' = 'student' is the student", "nothing would train"]),
    (["reference=t", "distill.teacher_url=http://h:1"], ["each names the teacher; set one"]),
    (["reference=t", "reward.models=[rm]"], ["'reward.models'", "trained without a reward"]),
    (["reference=t", "reward.eos_penalty=-2"], ["'reward.eos_penalty'", "trained without a reward"]),
    (["reference=t", "kl.coef=0.1"], ["'kl.coef'", "does not read it"]),
    (["reference=t", "distill.beta=0.2"], ["'distill.beta' = 0.2", "divergence=reverse_kl"]),
    (["reference=t", "distill.teacher_model=m"], ["'distill.teacher_model'", "without distill.teacher_url"]),
    (["distill.teacher_url=http://h:1", "rollout.temperature=0.7"], ["'rollout.temperature' = 0.7", "temperature 1"]),
    (["reference=t", "distill.beta=1.0", "distill.divergence=jsd"], ["distill.beta"]),
])
def test_refused_with_the_reason(overrides, expected):
    msg = error_of(*overrides)
    for text in expected:
        assert text in msg, msg


def test_the_distill_block_is_refused_under_another_algorithm():
    with pytest.raises(ConfigError) as info:
        load_config(RLConfig, None, ["model.name_or_path=m", "prompts=p.jsonl", "reward.models=[r]",
                                     "distill.divergence=jsd"])
    assert "'distill.divergence'" in str(info.value) and "only distill reads it" in str(info.value)


def test_other_algorithms_still_need_a_reward():
    with pytest.raises(ConfigError) as info:
        load_config(RLConfig, None, ["algorithm=grpo", "model.name_or_path=m", "prompts=p.jsonl"])
    assert "needs 'reward.models'" in str(info.value)
