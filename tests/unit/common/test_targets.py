"""``'module:attr'`` targets: the callable found, or a ConfigError naming what is missing."""

from __future__ import annotations

import sys

import pytest

from tether.common.errors import ConfigError
from tether.common.targets import import_callable


def test_import_callable_finds_function():
    from tether.tasks.arith.judge import gold_score

    assert import_callable("tether.tasks.arith.judge:gold_score") is gold_score


def test_import_callable_needs_colon():
    with pytest.raises(ConfigError, match="module:function"):
        import_callable("tether.tasks.arith.judge.gold_score")


def test_import_callable_missing_module():
    with pytest.raises(ConfigError) as info:
        import_callable("no_such_module_xyz:fn")
    assert "no_such_module_xyz" in str(info.value)


def test_import_callable_missing_or_non_callable_attribute():
    with pytest.raises(ConfigError) as info:
        import_callable("tether.tasks.arith.judge:no_such_fn")
    assert "no_such_fn" in str(info.value) and "tether.tasks.arith.judge" in str(info.value)
    with pytest.raises(ConfigError, match="BEST_SCORE"):
        import_callable("tether.tasks.arith.judge:BEST_SCORE")


def test_import_callable_from_sys_path(tmp_path, monkeypatch):
    (tmp_path / "my_reward_mod_abc.py").write_text("def score(p, r):\n    return [1.0] * len(r)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        fn = import_callable("my_reward_mod_abc:score")
        assert fn(["a"], ["b"]) == [1.0]
    finally:
        sys.modules.pop("my_reward_mod_abc", None)
