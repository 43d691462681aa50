"""A broken plugin (TETHER_PLUGINS or a ``tether.plugins`` entry point) never breaks ``import
tether``; every ``tether`` command, ``--help`` included, says in one paragraph which plugin, why
and what was expected, and exits 2; no plugin can take a built-in algorithm's name."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.metadata import EntryPoint

import pytest

from tether.registry import plugins as registry
from tether.registry.algorithms import ALGORITHMS, PLUGINS_ENV, AlgorithmSpec, load_plugins, register_algorithm
from tether.cli import main
from tether.common.errors import ConfigError

DUPLICATE = ("from tether.registry.algorithms import AlgorithmSpec, register_algorithm\n"
             "class Mine:\n    pass\n"
             "register_algorithm(AlgorithmSpec('grpo', Mine, 'Mine', 's', 'p', needs_critic=False))\n")

#: name -> (how TETHER_PLUGINS names it, given tmp_path; the file's text or None; words the error must hold)
CASES = {
    "syntax_error": (lambda d: str(d / "syntax_plugin.py"), "x = 1\n\ndef f(:\n    pass\n",
                     ["syntax_plugin.py", "SyntaxError at line 3"]),
    "missing_path": (lambda d: str(d / "nowhere" / "absent_plugin.py"), None,
                     ["absent_plugin.py", "No such file"]),
    "raising_module": (lambda d: "raising_plugin_mod", "x = 1\nraise RuntimeError('the plugin is broken')\n",
                       ["'raising_plugin_mod'", "RuntimeError: the plugin is broken", "raising_plugin_mod.py line 2"]),
    "unknown_module": (lambda d: "no_such_plugin_module_x", None, ["'no_such_plugin_module_x'", "No module named"]),
    "duplicate_name": (lambda d: str(d / "dup_plugin.py"), DUPLICATE,
                       ["dup_plugin.py", "'grpo'", "built-in GRPO", "tether.algorithms.grpo:GRPO", "dup_plugin:Mine"]),
}


def _plugin(case: str, tmp_path) -> tuple[str, list[str]]:
    named, text, words = CASES[case]
    value = named(tmp_path)
    if text is not None:
        file = value if value.endswith(".py") else str(tmp_path / f"{value}.py")
        with open(file, "w", encoding="utf-8") as f:
            f.write(text)
    return value, words


def _env(tmp_path, value: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != PLUGINS_ENV}
    env.update({PLUGINS_ENV: value, "PYTHONPATH": os.pathsep.join([str(tmp_path), env.get("PYTHONPATH", "")])})
    return env


def _one_paragraph(err: str) -> None:
    assert "Traceback" not in err, err
    assert err.count("error:") == 1 and err.strip().count("\n") == 0, err


@pytest.fixture
def clean_registry():
    """The registry, sys.modules and the plugin bookkeeping as they were."""
    algorithms, loaded, installed = dict(ALGORITHMS), set(registry._loaded), registry._installed
    modules = set(sys.modules)
    yield
    ALGORITHMS.clear()
    ALGORITHMS.update(algorithms)
    registry._loaded.clear()
    registry._loaded.update(loaded)
    registry._installed = installed
    for name in set(sys.modules) - modules:
        if "plugin" in name:
            sys.modules.pop(name, None)


@pytest.mark.parametrize("case", list(CASES))
def test_a_broken_plugin_leaves_import_tether_alone_and_every_command_says_it_once(case, tmp_path):
    value, words = _plugin(case, tmp_path)
    env = _env(tmp_path, value)
    imported = subprocess.run([sys.executable, "-c", "import tether, tether.api; print(tether.sft.__name__)"],
                              capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert imported.returncode == 0 and imported.stdout.strip() == "sft", imported.stderr
    for argv in (["--help"], ["ppo", "--help"], ["sft", "--print-config"], ["grpo", "model.name_or_path=x"]):
        done = subprocess.run([sys.executable, "-m", "tether.cli", *argv], capture_output=True, text=True, env=env,
                              cwd=tmp_path, timeout=120)
        assert done.returncode == 2, (argv, done.stdout, done.stderr)
        assert done.stdout == "", argv  # no help printed for a broken installation
        _one_paragraph(done.stderr)
        assert done.stderr.startswith("tether: error:") and value in done.stderr
        for word in words:
            assert word in done.stderr, (argv, word, done.stderr)
        assert "expected" in done.stderr and PLUGINS_ENV in done.stderr


@pytest.mark.parametrize("case", list(CASES))
def test_the_cli_in_process_reports_a_broken_plugin_and_the_registry_is_unchanged(case, tmp_path, monkeypatch,
                                                                                   capsys, clean_registry):
    value, words = _plugin(case, tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv(PLUGINS_ENV, value)
    before = dict(ALGORITHMS)
    assert main(["ppo", "--help"]) == 2
    err = capsys.readouterr().err
    _one_paragraph(err)
    assert all(word in err for word in words), err
    assert ALGORITHMS == before and value not in registry._loaded
    # Not marked loaded and no half-run module left behind: the next use says it again.
    assert not any(name in sys.modules for name in ("syntax_plugin", "raising_plugin_mod", "dup_plugin"))
    with pytest.raises(ConfigError, match="expected"):
        load_plugins()


def test_attribute_probes_on_tether_do_not_load_plugins(tmp_path, monkeypatch, clean_registry):
    """inspect, pickle and pytest probe dunders; only an algorithm's name loads the plugins."""
    import tether

    value, _ = _plugin("raising_module", tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv(PLUGINS_ENV, value)
    for dunder in ("__wrapped__", "__test__", "__signature__"):
        with pytest.raises(AttributeError):
            getattr(tether, dunder)
    with pytest.raises(ConfigError, match="raising_plugin_mod"):
        tether.my_plugin_algorithm  # noqa: B018 - the name of a plugin's algorithm: the plugins load


def test_a_broken_entry_point_is_named_with_its_value(monkeypatch, clean_registry):
    monkeypatch.delenv(PLUGINS_ENV, raising=False)
    point = EntryPoint(name="acme", value="acme_missing_plugin_pkg.algo", group=registry.PLUGINS_GROUP)
    registry._installed = [point]
    with pytest.raises(ConfigError) as info:
        load_plugins()
    text = str(info.value)
    assert "'tether.plugins' entry point 'acme' (acme_missing_plugin_pkg.algo)" in text
    assert "No module named 'acme_missing_plugin_pkg' on sys.path" in text and "uninstall" in text
    assert "\n" not in text


def test_a_plugin_may_not_take_a_built_in_or_another_plugins_name(clean_registry):
    class Mine:
        pass

    class Theirs:
        pass

    for name in ("ppo", "rs"):
        with pytest.raises(ConfigError, match=f"'{name}' is already registered by tether's built-in"):
            register_algorithm(AlgorithmSpec(name, Mine, "Mine", "s", "p", needs_critic=False))
        assert ALGORITHMS[name].target != Mine
    first = register_algorithm(AlgorithmSpec("shared_name", Mine, "Mine", "s", "p", needs_critic=False))
    again = register_algorithm(AlgorithmSpec("shared_name", Mine, "Mine v2", "s", "p", needs_critic=False))
    assert ALGORITHMS["shared_name"] is again is not first  # the same module again: a reloaded plugin
    Theirs.__module__ = "someone_elses_plugin"
    with pytest.raises(ConfigError, match="by the plugin .*test_plugin_errors.*someone_elses_plugin:"):
        register_algorithm(AlgorithmSpec("shared_name", Theirs, "Theirs", "s", "p", needs_critic=False))
    assert ALGORITHMS["shared_name"] is again
