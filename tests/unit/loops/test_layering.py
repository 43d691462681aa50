"""The loops own control only (issue 20): they import neither Ray nor the CPU speedups, and never
read a model off a role (no ``x.model`` attribute anywhere in ``tether/loops``; ``cfg.model`` is
the config block)."""

from __future__ import annotations

import ast
from pathlib import Path

import tether.loops

LOOPS = Path(tether.loops.__file__).parent
FORBIDDEN = ("ray", "tether.engines.cpu", "vllm")


def sources():
    files = sorted(LOOPS.glob("*.py"))
    assert len(files) >= 6
    return [(path, ast.parse(path.read_text())) for path in files]


def imported(tree) -> list[str]:
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.append(node.module)
            names += [f"{node.module}.{a.name}" for a in node.names]
    return names


def test_loops_import_neither_ray_nor_the_cpu_speedups():
    for path, tree in sources():
        for name in imported(tree):
            assert not any(name == f or name.startswith(f + ".") for f in FORBIDDEN), f"{path.name} imports {name}"


def test_loops_never_read_a_model_attribute():
    for path, tree in sources():
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr == "model":
                owner = node.value
                is_cfg = (isinstance(owner, ast.Name) and owner.id == "cfg") or (
                    isinstance(owner, ast.Attribute) and owner.attr == "cfg")
                assert is_cfg, f"{path.name}:{node.lineno} reads .model of {ast.unparse(owner)}"


def test_the_checks_can_fail():
    tree = ast.parse("import ray\nfrom tether.engines.cpu.onednn import x\nroles.actor.model.train()\n")
    assert "ray" in imported(tree) and "tether.engines.cpu.onednn" in imported(tree)
    reads = [n for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr == "model"]
    assert reads and ast.unparse(reads[0].value) == "roles.actor"


def test_the_loop_files_are_small():
    assert len((LOOPS / "rl.py").read_text().splitlines()) <= 300
    assert len((LOOPS / "ppo.py").read_text().splitlines()) <= 300
    for path, tree in sources():
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef):
                length = node.end_lineno - node.lineno + 1
                assert length <= 60, f"{path.name}: {node.name} is {length} lines"
