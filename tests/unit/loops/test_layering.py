"""The layer order of docs/architecture.md holds for the whole package, and the loops own
control only.

Layers, lowest first: a module imports only from its own layer or a lower one (every import
counts, those inside functions too). Each package or module of ``tether`` is placed in exactly
one layer below (a new one must be placed before its first test run); the declared order of
docs/architecture.md is the order of its named layers here. The registries (names and metadata
only, which the config reads: the ``registry`` package) sit in the foundation, below the packages
whose classes they name by string.

The loops import neither Ray nor the CPU speedups and never read a model off a role (no ``x.model``
attribute anywhere in ``tether/loops``; ``cfg.model`` is the config block).
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import tether
import tether.loops

PACKAGE = Path(tether.__file__).parent
ROOT = PACKAGE.parents[1]
LOOPS = Path(tether.loops.__file__).parent
FORBIDDEN = ("ray", "tether.engines.cpu", "vllm")

#: (layer, the modules and packages in it, relative to ``tether``), lowest first; the most specific name wins.
LAYERS = (
    ("pure maths", ("algos",)),
    ("records", ("types",)),
    # What every layer may use: errors, paths, bounded waits, device and rank helpers, the config and
    # the registries it checks names against, metrics files and their trackers, the demo tasks' data.
    ("foundation", ("errors", "outputs", "services", "child_guard", "runtime", "config", "metrics", "trackers",
                    "tasks", "dispatch", "targets", "registry")),
    ("models", ("models",)),
    ("engines", ("engines", "distributed", "data")),
    ("run files", ("runs", "cards", "checkpoint")),
    ("generation", ("rollout",)),
    ("roles", ("roles",)),
    ("placement", ("placement",)),
    ("algorithms & loops", ("algorithms", "objectives", "loops", "eval", "plan")),
    ("commands", ("commands", "cli", "api", "compare", "demo", "sweep", "bench", "feedback", "serve", "plots")),
)
RANK = {name: i for i, (_, names) in enumerate(LAYERS) for name in names}

#: (importing module, imported module) -> why the upward import stays. Empty: the code follows the order.
EXCEPTIONS: dict[tuple[str, str], str] = {}


def layer(module: str) -> int | None:
    """The layer index of ``tether.<module...>`` (None: not placed)."""
    parts = module.split(".")[1:]
    for n in range(len(parts), 0, -1):
        if ".".join(parts[:n]) in RANK:
            return RANK[".".join(parts[:n])]
    return None


def module_of(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _exists(module: str) -> bool:
    path = PACKAGE.parent.joinpath(*module.split("."))
    return path.is_dir() or path.with_suffix(".py").is_file()


def tether_imports(module: str, tree: ast.AST, is_package: bool = False) -> list[tuple[str, int]]:
    """(imported ``tether.*`` module, line) of every import in ``tree``, relative ones resolved;
    ``from tether.x import y`` counts as ``tether.x.y`` when that is a module."""
    package = module if is_package else module.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
            for a in node.names:
                full = f"{base}.{a.name}"
                found.append((full if _exists(full) else base, node.lineno))
    # The root package itself (``from tether import __version__``) is imported before any module of it.
    return [(name, line) for name, line in found if name.startswith("tether.")]


@functools.lru_cache(maxsize=1)
def package_sources():
    files = sorted(PACKAGE.rglob("*.py"))
    assert len(files) > 100
    return [(module_of(path), path, ast.parse(path.read_text(encoding="utf-8"))) for path in files]


def upward(module: str, tree: ast.AST, is_package: bool = False) -> list[str]:
    """The imports of ``module`` from a higher layer than its own, as readable lines."""
    own = layer(module)
    return [f"{module}:{line} ({LAYERS[own][0]}) imports {name} ({LAYERS[layer(name)][0]})"
            for name, line in tether_imports(module, tree, is_package)
            if layer(name) is not None and layer(name) > own and (module, name) not in EXCEPTIONS]


def test_every_module_has_a_layer():
    unplaced = {m for m, _, _ in package_sources() if m != "tether" and layer(m) is None}
    unplaced |= {name for m, path, tree in package_sources()
                 for name, _ in tether_imports(m, tree, path.name == "__init__.py") if layer(name) is None}
    assert not unplaced, f"place these in LAYERS: {sorted(unplaced)}"


def test_no_module_imports_a_higher_layer():
    found = [line for m, path, tree in package_sources() if m != "tether"
             for line in upward(m, tree, path.name == "__init__.py")]
    assert not found, "imports against the layer order (docs/architecture.md):\n" + "\n".join(found)


def test_the_exceptions_are_still_needed():
    imports = {(m, name) for m, path, tree in package_sources()
               for name, _ in tether_imports(m, tree, path.name == "__init__.py")}
    assert not set(EXCEPTIONS) - imports, "drop the exceptions the code no longer needs"


def test_the_documented_order_is_the_checked_one():
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    chain = next(block for block in re.findall(r"```\n(.*?)```", text, re.S) if "←" in block)
    named = [re.sub(r"\(.*?\)", "", item).strip() for item in chain.replace("\n", " ").split("←")]
    assert named[:2] == ["algos", "types"] and named[-1] == "commands"
    ranks = [max(RANK[word.strip()] for word in item.split("&")) for item in named]
    assert ranks == sorted(ranks) and len(set(ranks)) == len(ranks), (named, ranks)


def test_the_layer_check_can_fail():
    tree = ast.parse("import torch\ndef f():\n    from tether.config import RLConfig\n    from ..roles import x\n")
    assert upward("tether.algos.kl", tree) == [
        "tether.algos.kl:3 (pure maths) imports tether.config (foundation)",
        "tether.algos.kl:4 (pure maths) imports tether.roles (roles)"]
    assert upward("tether.roles.policy", ast.parse("from tether.algos import kl_k1\n")) == []


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
    assert len((LOOPS / "rl_run.py").read_text().splitlines()) <= 300
    for path, tree in sources():
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef):
                length = node.end_lineno - node.lineno + 1
                assert length <= 60, f"{path.name}: {node.name} is {length} lines"
