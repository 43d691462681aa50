"""The layer order of docs/architecture.md holds for the whole package, and the loops own
control only.

The layers are the folders: ``tether/`` holds packages only (no loose module), and the chain of
docs/architecture.md names every one of them, lowest layer first (``a & b`` share a layer). The
order checked here is read from that chain, so no module is placed by hand. A module imports only
from its own layer or a lower one (every import counts, those inside functions too), and no circle
of imports joins files of different folders.

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


def documented_chain(text: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """(layer label, its folders) from the ``a ← b & c (label) ← ...`` chain of ``text``, lowest first."""
    chain = next(block for block in re.findall(r"```\n(.*?)```", text, re.S) if "←" in block)
    layers = []
    for item in chain.replace("\n", " ").split("←"):
        label = re.search(r"\((.*?)\)", item)
        folders = tuple(word.strip() for word in re.sub(r"\(.*?\)", "", item).split("&"))
        layers.append((label.group(1) if label else folders[0], folders))
    return tuple(layers)


#: (layer, its folders of ``tether/``), lowest first: read from docs/architecture.md.
LAYERS = documented_chain((ROOT / "docs" / "architecture.md").read_text(encoding="utf-8"))
RANK = {name: i for i, (_, names) in enumerate(LAYERS) for name in names}


def layer(module: str) -> int | None:
    """The layer index of ``tether.<folder>...`` (None: a folder the chain does not name)."""
    parts = module.split(".")
    return RANK.get(parts[1]) if len(parts) > 1 else None


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
            if layer(name) is not None and layer(name) > own]


def test_every_module_has_a_layer():
    unplaced = {m for m, _, _ in package_sources() if m != "tether" and layer(m) is None}
    unplaced |= {name for m, path, tree in package_sources()
                 for name, _ in tether_imports(m, tree, path.name == "__init__.py") if layer(name) is None}
    assert not unplaced, f"place these in LAYERS: {sorted(unplaced)}"


def test_no_module_imports_a_higher_layer():
    found = [line for m, path, tree in package_sources() if m != "tether"
             for line in upward(m, tree, path.name == "__init__.py")]
    assert not found, "imports against the layer order (docs/architecture.md):\n" + "\n".join(found)


def test_the_package_holds_folders_only_and_the_chain_names_each_once():
    entries = {p.name for p in PACKAGE.iterdir() if p.name not in ("__init__.py", "__pycache__")}
    loose = sorted(name for name in entries if not (PACKAGE / name).is_dir())
    assert not loose, f"tether/ holds packages only; put these in a folder of their layer: {loose}"
    named = [folder for _, folders in LAYERS for folder in folders]
    assert len(named) == len(set(named)), f"a folder named twice in the chain: {named}"
    assert set(named) == entries, (f"the chain of docs/architecture.md must name every folder of tether/: "
                                   f"missing {sorted(entries - set(named))}, not a folder {sorted(set(named) - entries)}")
    assert named[:2] == ["algos", "types"] and LAYERS[-1][0] == "entry points"


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan, iterative)."""
    index, low, on_stack, stack, found, counter = {}, {}, set(), [], [], [0]
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]; counter[0] += 1; stack.append(root); on_stack.add(root)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter[0]; counter[0] += 1; stack.append(nxt); on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop(); on_stack.discard(member); component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def folder_circles(sources) -> list[list[str]]:
    """Circles of imports (file to file) whose files lie in more than one folder of ``tether/``."""
    modules = {m for m, _, _ in sources}
    graph = {m: {name for name, _ in tether_imports(m, tree, path.name == "__init__.py")
                 if name in modules and name != m} for m, path, tree in sources}
    return [c for c in _circles(graph) if len({m.split(".")[1] for m in c}) > 1]


def test_no_circle_joins_files_of_different_folders():
    assert not folder_circles(package_sources())


def test_a_circle_across_folders_is_found():
    a, b, c = ("tether.roles.x", "tether.roles.y", "tether.plan.z")
    sources = [(a, PACKAGE / "x.py", ast.parse("import tether.roles.y\n")),
               (b, PACKAGE / "y.py", ast.parse("import tether.plan.z\n")),
               (c, PACKAGE / "z.py", ast.parse("import tether.roles.x\n"))]
    assert folder_circles(sources) == [[c, a, b]]
    assert folder_circles(sources[:2]) == []


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
