"""docs/architecture.md's "How to add" table says how many files each kind of thing touches; this
test holds the source to it for every registered entry: a built-in algorithm's, engine's, stage's
or environment's module, and a reward kind's builder and planner, are known (by import or by a
registry target) to no file but their own and their registry entry. The one-file plugins of each kind are
run end to end by tests/integration/test_plugin_{algorithm,kinds,stage}.py."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tether.registry.algorithms import ALGORITHMS
from tether.registry.engines import ENGINES
from tether.registry.environments import ENVIRONMENTS
from tether.registry.rewards import REWARD_KINDS
from tether.registry.stages import STAGES

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"
DOC = ROOT / "docs" / "architecture.md"


def documented_files(extension: str) -> int:
    """The file count of ``extension``'s row in the doc's "How to add" table."""
    match = re.search(rf"^\| {re.escape(extension)} \| (\d+) \|", DOC.read_text(encoding="utf-8"), re.M)
    assert match, f"docs/architecture.md has no '| {extension} | N |' row"
    return int(match.group(1))


def files_knowing(module: str) -> set[str]:
    """The files under src/ other than ``module``'s own that import it or name it as a "module:attr" target."""
    own = SRC / (module.replace(".", "/") + ".py")
    found = set()
    for path in SRC.rglob("*.py"):
        if path == own:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            named = (isinstance(node, ast.ImportFrom) and node.module == module) or \
                (isinstance(node, ast.Import) and any(a.name == module for a in node.names)) or \
                (isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith(module + ":"))
            if named:
                found.add(str(path.relative_to(SRC)))
                break
    return found


@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_a_built_in_algorithm_touches_the_files_the_doc_says(name):
    module = ALGORITHMS[name].target.split(":")[0]
    known = files_knowing(module)
    assert known == {"tether/registry/algorithms.py"}, (name, known)
    assert 1 + len(known) <= documented_files("an RL algorithm") <= 2


@pytest.mark.parametrize("name", list(ENGINES))
def test_a_built_in_engine_touches_the_files_the_doc_says(name):
    module = ENGINES[name].target.split(":")[0]
    known = files_knowing(module)
    assert known == {"tether/registry/engines.py"}, (name, known)
    assert 1 + len(known) <= documented_files("a generation engine") <= 3


@pytest.mark.parametrize("name", list(ENVIRONMENTS))
def test_a_built_in_environment_touches_the_files_the_doc_says(name):
    module = ENVIRONMENTS[name].target.split(":")[0]
    known = files_knowing(module)
    assert known == {"tether/registry/environments.py"}, (name, known)
    assert 1 + len(known) == documented_files("an environment kind")


def test_the_check_sees_an_import(tmp_path, monkeypatch):
    pkg = tmp_path / "tether" / "algorithms"
    pkg.mkdir(parents=True)
    (pkg / "x.py").write_text("class X: ...\n")
    (tmp_path / "tether" / "loop.py").write_text("from tether.algorithms.x import X\n")
    monkeypatch.setitem(globals(), "SRC", tmp_path)
    assert files_knowing("tether.algorithms.x") == {"tether/loop.py"}


def files_naming(function: str, own: str) -> set[str]:
    """The files under src/ other than ``own`` that name ``function`` (a call, an import or a "module:function" target)."""
    found = set()
    for path in SRC.rglob("*.py"):
        rel = str(path.relative_to(SRC))
        if rel == own:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Name) and node.id == function) or \
                    (isinstance(node, ast.Attribute) and node.attr == function) or \
                    (isinstance(node, ast.alias) and node.name == function) or \
                    (isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.endswith(":" + function)):
                found.add(rel)
                break
    return found


@pytest.mark.parametrize("name", list(REWARD_KINDS))
def test_a_built_in_reward_kind_touches_the_files_the_doc_says(name):
    spec = REWARD_KINDS[name]
    files = set()
    for target in (spec.build, spec.plan):
        module, function = target.split(":")
        own = "tether/" + module.removeprefix("tether.").replace(".", "/") + ".py"
        assert files_naming(function, own) == {"tether/registry/rewards.py"}, (name, target)
        files.add(own)
    assert callable(spec.builder()) and callable(spec.planner())
    assert len(files | {"tether/registry/rewards.py"}) == documented_files("a reward kind")


#: The demo pipelines (SFT -> reward model -> RL, in demo/ and feedback/iterate.py; the tool demo's
#: SFT -> RL in demo/tool_compare.py) and the padding bench (bench/padding.py) run particular stages
#: by design: SFT's and the reward model's.
DEMO_PIPELINE = {"tether/demo/__init__.py", "tether/demo/compare.py", "tether/demo/tool_compare.py",
                 "tether/feedback/iterate.py", "tether/bench/padding.py"}


@pytest.mark.parametrize("name", list(STAGES))
def test_a_built_in_stage_touches_the_files_the_doc_says(name):
    module = STAGES[name].run.split(":")[0]
    assert files_knowing(module) - DEMO_PIPELINE == {"tether/registry/stages.py"}, name
    config = STAGES[name].config_class()
    assert config.__module__.startswith("tether.config"), name  # its config class: the 3rd file
    assert documented_files("a supervised stage") == 3
