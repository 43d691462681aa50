"""The algorithm registry is the one place an algorithm's name is known: no code in ``src/``
spells a registered name as a string outside the registry, every entry builds an algorithm with
the protocol's methods, and plugins register and fail by name."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from tether.registry.algorithms import (
    ALGORITHMS,
    PLUGINS_ENV,
    AlgorithmSpec,
    algorithm_spec,
    load_plugins,
    register_algorithm,
)
from source_scan import docstring_ids
from tether.common.errors import ConfigError

SRC = Path(__file__).resolve().parents[3] / "src" / "tether"
REGISTRY = SRC / "registry" / "algorithms.py"
BUILT_IN = ("ppo", "grpo", "rloo", "reinforce_pp")


def spelled_names(path: Path) -> list[tuple[int, str]]:
    """(line, name) of every non-docstring string constant in ``path`` equal to a built-in algorithm's name."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs = docstring_ids(tree)
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in BUILT_IN
            and id(node) not in docs]


def test_no_algorithm_name_is_spelled_outside_the_registry():
    found = {f"{path.relative_to(SRC)}:{line}": name for path in sorted(SRC.rglob("*.py")) if path != REGISTRY
             for line, name in spelled_names(path)}
    assert not found, f"algorithm names spelled outside registry/algorithms.py: {found}"


def test_the_check_finds_a_spelled_name(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text('"""Docstrings may say "ppo"."""\nif cfg.algorithm == "grpo":\n    pass\n')
    assert spelled_names(bad) == [(2, "grpo")]


def test_the_built_in_algorithms_are_registered_in_order():
    assert tuple(ALGORITHMS)[:4] == BUILT_IN


@pytest.mark.parametrize("name", BUILT_IN)
def test_every_entry_loads_a_class_with_the_protocol(name):
    cls = algorithm_spec(name).load()
    for method in ("experience", "actor_loss", "critic_loss"):
        assert callable(getattr(cls, method)), (name, method)


def test_unknown_and_bad_names_are_config_errors():
    with pytest.raises(ConfigError, match="'algorithm' = 'nope'.*ppo, grpo"):
        algorithm_spec("nope")
    with pytest.raises(ConfigError, match="not one of tether's commands"):
        register_algorithm(AlgorithmSpec("serve", object, "x", "x", "x", needs_critic=False))
    with pytest.raises(ConfigError, match="min_group_size"):
        register_algorithm(AlgorithmSpec("x_algo", object, "x", "x", "x", needs_critic=False, default_group_size=1,
                                         min_group_size=2))
    assert "x_algo" not in ALGORITHMS


def test_a_plugin_that_fails_to_import_is_named(tmp_path, monkeypatch):
    broken = tmp_path / "broken_plugin.py"
    broken.write_text("raise RuntimeError('boom')\n")
    monkeypatch.setenv(PLUGINS_ENV, str(broken))
    with pytest.raises(ConfigError, match="broken_plugin.py.*RuntimeError: boom"):
        load_plugins()
    sys.modules.pop("broken_plugin", None)
