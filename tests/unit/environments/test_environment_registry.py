"""The built-in environment kinds are registered, load to classes that answer the protocol, and
their names are owned: a plugin may not take them. Episode totals and batch metrics."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import tether.environments
from tether.common.errors import ConfigError
from tether.environments.base import COUNTERS, EpisodeStats, Step, batch_metrics
from tether.registry.environments import ENVIRONMENTS, EnvironmentSpec, environment_spec, register_environment


def test_the_built_in_kinds_are_registered_and_load():
    assert {"tools", "scripted"} <= set(ENVIRONMENTS)
    for name in ("tools", "scripted"):
        cls = environment_spec(name).load()
        assert all(callable(getattr(cls, m, None)) for m in ("check_row", "reset", "step")), name
    assert environment_spec("tools").reads == ("messages", "prompt", "tools")
    assert environment_spec("scripted").reads == ("messages", "prompt", "follow_ups")


def test_a_built_in_name_cannot_be_taken():
    with pytest.raises(ConfigError, match="built-in"):
        register_environment(EnvironmentSpec("tools", "my_plugin:MyEnv", "mine"))


def test_an_unknown_name_lists_the_registered_ones():
    with pytest.raises(ConfigError, match="tools, scripted"):
        environment_spec("nope")


def test_the_registry_and_the_package_import_no_torch():
    code = ("import sys, tether.registry.environments, tether.environments, tether.environments.tool_env, "
            "tether.environments.scripted; print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_episode_totals_and_batch_metrics():
    a = EpisodeStats().plus(Step([], 0.5, counters={"tool_calls": 2, "tool_errors": 1})).plus(Step([], None, True))
    b = EpisodeStats().plus(Step([], 1.0, True, True, {"tool_calls": 1}))
    assert (a.turns, a.reward, a.truncated, a.counters) == (2, 0.5, False, {"tool_calls": 2, "tool_errors": 1})
    assert batch_metrics([a, b]) == {"env/turns": 1.5, "env/truncated": 0.5, "env/tool_calls": 3.0,
                                     "env/tool_errors": 1.0}
    assert batch_metrics([]) == {}
    assert set(a.counters) <= set(COUNTERS)


def test_the_package_imports_only_the_foundation():
    """environments/ sits with generation but needs none of it: common/, registry/, config/ only."""
    allowed = ("tether.common", "tether.registry", "tether.config", "tether.environments")
    found = []
    for path in sorted(Path(tether.environments.__file__).parent.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            found += [f"{path.name}: {n}" for n in names if n.startswith("tether") and not n.startswith(allowed)]
    assert not found, found
