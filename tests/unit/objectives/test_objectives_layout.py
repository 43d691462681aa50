"""Every supervised or preference method reads in one file of ``tether/objectives``: no method
module imports another (what several share is in ``objectives/shared.py``, control in
``tether/loops``), no file outgrows 500 lines and no function 60."""

from __future__ import annotations

import ast
from pathlib import Path

import tether.objectives

OBJECTIVES = Path(tether.objectives.__file__).parent
METHODS = ("sft", "reward_model", "genrm", "prm", "dpo", "simpo", "orpo", "kto")
SHARED = ("__init__", "shared")


def modules() -> dict[str, ast.Module]:
    return {path.stem: ast.parse(path.read_text(encoding="utf-8")) for path in sorted(OBJECTIVES.glob("*.py"))}


def imported(tree: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
    return names


def test_the_package_holds_one_module_per_method_and_the_shared_one():
    assert set(modules()) == set(METHODS) | set(SHARED)


def test_no_method_imports_another():
    for name, tree in modules().items():
        others = {f"tether.objectives.{m}" for m in METHODS if m != name}
        assert not imported(tree) & others, f"{name}.py imports {sorted(imported(tree) & others)}"


def test_the_shared_module_imports_no_method():
    methods = {f"tether.objectives.{m}" for m in METHODS}
    assert not imported(modules()["shared"]) & methods


def test_files_and_functions_are_small():
    for path in sorted(OBJECTIVES.glob("*.py")):
        text = path.read_text(encoding="utf-8")
        assert len(text.splitlines()) <= 500, f"{path.name} has {len(text.splitlines())} lines"
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                assert length <= 60, f"{path.name}: {node.name} is {length} lines"


def test_the_check_sees_a_sibling_import():
    tree = ast.parse("def f():\n    from tether.objectives.sft import split_holdout\n")
    assert "tether.objectives.sft" in imported(tree)
