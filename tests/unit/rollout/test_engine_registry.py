"""The generation-engine registry: an engine's name is spelled only in the registry and its own
modules; every entry declares every capability and its class has the protocol's methods; every
engine that can be built here samples once through the one constructor (vLLM's run of a PPO
iteration is in tests/on_vllm); callers read the declarations (the loop syncs only an engine
that holds its own weights, the log-probs switch, the engine's settings block)."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
import typing
from pathlib import Path

import pytest
import torch

import tether
from tether.config import RLConfig, load_config
from tether.common.errors import ConfigError
from tether.rollout import (ENGINES, EngineSetup, EngineSpec, GenerationEngine, SamplingParams, build_engine,
                            captured_logprobs, check_frozen, engine_class, engine_settings_block, engine_spec)

SRC = Path(tether.__file__).parent
PPO_MIN = ["model.name_or_path=m", "prompts=p.jsonl", "reward.models=[r]"]
PROTOCOL = ("from_config", "install_check", "memory_lines", "generate", "sync_weights")


def ppo(*overrides):
    return load_config(RLConfig, None, [*PPO_MIN, *overrides])


def name_tests(name: str, own_prefix: str) -> list[str]:
    """``path:line`` of every line under src/tether that spells ``name`` as a string, outside the
    engine's own modules (files under rollout/ whose name starts with ``own_prefix``) and its
    registry entry (registry/engines.py)."""
    quoted = re.compile(rf"""["']{re.escape(name)}["']""")
    hits = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel.startswith(f"rollout/{own_prefix}") or rel == "registry/engines.py":
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if quoted.search(line):
                hits.append(f"{rel}:{number}")
    return hits


def test_no_code_outside_the_vllm_modules_spells_its_name():
    # Its entry in registry/engines.py is the one place; config, loop, roles, plan and commands ask it.
    assert name_tests("vllm", "vllm") == []


def test_the_name_check_can_fail():
    assert any(hit.startswith("serve/service.py") for hit in name_tests("lean", "vllm"))
    assert name_tests("vllm", "nothing") and all(h.startswith("rollout/vllm") for h in name_tests("vllm", "nothing"))


@pytest.mark.parametrize("name", list(ENGINES))
def test_every_engine_declares_every_capability(name):
    spec = engine_spec(name)
    hints = typing.get_type_hints(EngineSpec)
    for field in dataclasses.fields(EngineSpec):
        assert field.default is dataclasses.MISSING, f"{field.name} has a default: an entry could leave it out"
        value = getattr(spec, field.name)
        wanted = hints[field.name]
        assert isinstance(value, typing.get_args(wanted) or wanted), (name, field.name, value)
    cls = engine_class(name)
    for method in PROTOCOL:
        assert callable(getattr(cls, method, None)), f"{cls.__name__} lacks {method}"
    cfg = ppo(f"rollout.engine={name}")
    assert isinstance(getattr(cfg.rollout, spec.logprobs_switch), bool)  # a rollout.* switch that exists
    block = engine_settings_block(cfg)
    assert (block is None) == (spec.config_block is None)
    if spec.post_sync_check:  # the loop reads the block's check_sync and sync_tolerance
        assert isinstance(block.check_sync, bool) and block.sync_tolerance > 0
    assert isinstance(cls.memory_lines(1000, lambda n: f"{n:.0f} B"), list)


def test_the_protocol_declares_sync_weights_and_the_constructor():
    for method in PROTOCOL:
        assert method in GenerationEngine.__dict__, method
    assert not hasattr(GenerationEngine, "sync") and not hasattr(GenerationEngine, "shares_weights")


def test_the_registry_and_the_parsers_import_no_torch():
    code = ("import sys, tether.rollout, tether.registry.engines, tether.config, tether.commands.eval, "
            "tether.commands.serve, tether.commands.pairs; print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_choices_come_from_the_registry():
    with pytest.raises(ConfigError, match=r"rollout.engine' = 'nope': expected one of \['lean', 'hf'"):
        ppo("rollout.engine=nope")
    from tether.cli import build_parser

    for command in ("eval", "serve", "pairs"):
        with pytest.raises(SystemExit):
            build_parser().parse_args([command, "--engine", "nope"])


@pytest.mark.parametrize("name", [n for n, s in ENGINES.items() if not s.holds_own_weights])
def test_every_in_process_engine_samples_through_the_one_constructor(name):
    from tether.bench.setup import SIZES, build_setup

    setup = build_setup(SIZES["micro"], 4, seed=5)
    engine = build_engine(name, EngineSetup(setup.tokenizer, model=setup.models["policy"], capture=True))
    torch.manual_seed(0)
    rollout = engine.generate(setup.prompts.ids[:3], setup.prompts.texts[:3],
                              SamplingParams(max_new_tokens=4, temperature=0.9))
    assert rollout.response_ids.shape[0] == 3 and 1 <= rollout.response_ids.shape[1] <= 4
    assert rollout.sampled_logprobs is not None  # capture=True: the engine's log-probs
    assert (rollout.sampled_entropy is not None) == engine_spec(name).returns_entropy  # as declared
    assert engine.sync_weights() == 0.0  # it samples the model it was given: nothing to move
    assert engine_class(name).install_check(EngineSetup(setup.tokenizer, path="anywhere")) is None


def test_an_engine_with_its_own_weights_needs_a_checkpoint_path():
    name = next(n for n, s in ENGINES.items() if s.holds_own_weights)
    with pytest.raises(ValueError, match="checkpoint on disk"):
        build_engine(name, EngineSetup(None, model=torch.nn.Linear(1, 1)))


def test_the_install_check_names_the_commands_flags_or_the_config_keys(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "vllm", None)  # as where vLLM is not installed
    name = next(n for n, s in ENGINES.items() if s.holds_own_weights)
    with pytest.raises(ConfigError, match=f"--engine {name}, but vLLM is not installed"):
        check_frozen(name, [tmp_path, None])
    from tether.rollout import install_check

    with pytest.raises(ConfigError, match=f"rollout.engine' = '{name}', but vLLM is not installed"):
        install_check(name, EngineSetup(None, path=str(tmp_path)))
    check_frozen("lean", [tmp_path])  # an in-process engine: nothing to check


def test_the_log_probs_switch_is_the_engines_own():
    assert captured_logprobs(ppo().rollout) is True  # lean: rollout.capture_logprobs, on by default
    assert captured_logprobs(ppo("rollout.capture_logprobs=false").rollout) is False
    own = next(n for n, s in ENGINES.items() if s.logprobs_switch == "use_engine_logprobs")
    assert captured_logprobs(ppo(f"rollout.engine={own}").rollout) is False
    assert captured_logprobs(ppo(f"rollout.engine={own}", "rollout.use_engine_logprobs=true").rollout) is True


class _Recorder:
    def __init__(self):
        self.calls = []

    def sync_weights(self):
        self.calls.append("sync_weights")
        return 1.0


@pytest.mark.parametrize("name", list(ENGINES))
def test_the_loop_syncs_only_an_engine_that_holds_its_own_weights(name):
    from tether.loops.common import Timer
    from tether.loops.rl import RLTrainer

    trainer = RLTrainer.__new__(RLTrainer)  # only what sync_weights reads
    trainer.cfg, trainer.rollout, trainer.rollout_engine = ppo(f"rollout.engine={name}"), _Recorder(), ENGINES[name]
    trainer.pipeline = None  # synchronous: no sampling worker to send the weights to
    checked = []
    trainer.check_sync = checked.append
    RLTrainer.sync_weights(trainer, Timer())
    assert trainer.rollout.calls == (["sync_weights"] if ENGINES[name].holds_own_weights else [])
    assert checked == []  # check_sync is off by default


def test_the_post_sync_check_reads_the_engines_block():
    from tether.loops.common import Timer
    from tether.loops.rl import RLTrainer

    name = next(n for n, s in ENGINES.items() if s.post_sync_check)
    block = ENGINES[name].config_block
    trainer = RLTrainer.__new__(RLTrainer)
    trainer.cfg = ppo(f"rollout.engine={name}", f"{block}.check_sync=true", f"{block}.sync_tolerance=0.5")
    trainer.rollout, trainer.rollout_engine, trainer.pipeline = _Recorder(), ENGINES[name], None
    checked = []
    trainer.check_sync = checked.append
    RLTrainer.sync_weights(trainer, Timer())
    assert checked == [0.5]
