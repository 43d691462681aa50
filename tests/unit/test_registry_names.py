"""Stage names and reward-kind names live in their registry entries: the code a new stage or a new
reward kind plugs into (the loops, the planner, the memory model, the model cards, the API, the
commands that run a stage, the config, the roles, the run files) dispatches on entries, never on a
spelled name; and nothing decides "RL or supervised" by probing the config's attributes.

Outside this scope, the demo pipeline and its reports name the run directories they make
(``demo/sft``, ``summary["rm"]``): a fixed composition of particular stages, not a dispatch.
"""

from __future__ import annotations

import ast
from pathlib import Path

import tether
from source_scan import docstring_ids
from tether.registry.rewards import REWARD_KINDS
from tether.registry.stages import STAGES

SRC = Path(tether.__file__).parent
#: The packages and modules a new stage or reward kind plugs into.
CORE = ("loops", "objectives", "plan", "config", "roles", "registry", "runs/__init__.py", "runs/cards.py", "api", "cli",
        "commands/stage.py", "commands/launch.py", "__init__.py")


def _own_name(tree: ast.AST) -> set[int]:
    """A method's own module names its stage body once (``StageBody(name="dpo", ...)``)."""
    return {id(kw.value) for node in ast.walk(tree) if isinstance(node, ast.Call)
            for kw in node.keywords if kw.arg == "name" and isinstance(kw.value, ast.Constant)}


def spelled(path: Path, names: set[str]) -> list[tuple[int, str]]:
    """(line, name) of every non-docstring string constant in ``path`` equal to one of ``names``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    allowed = docstring_ids(tree) | _own_name(tree)
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names
            and id(node) not in allowed]


def attribute_probes(path: Path) -> list[int]:
    """Lines of ``hasattr(cfg, ...)`` (a config probed for a block to tell the kind of stage)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [node.lineno for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "hasattr"
            and node.args and isinstance(node.args[0], ast.Name) and node.args[0].id == "cfg"]


def core_files() -> list[Path]:
    out = []
    for name in CORE:
        path = SRC / name
        out += sorted(path.rglob("*.py")) if path.is_dir() else [path] if path.is_file() else []
    return out


def test_no_stage_or_reward_kind_name_is_spelled_outside_its_entry():
    names = {*STAGES, *REWARD_KINDS}
    found = {f"{p.relative_to(SRC)}:{line}": name for p in core_files() if "registry" not in p.parts
             for line, name in spelled(p, names)}
    assert not found, f"stage or reward-kind names spelled outside the registry: {found}"


def test_no_config_attribute_probe_decides_the_kind_of_stage():
    found = [f"{p.relative_to(SRC)}:{line}" for p in core_files() for line in attribute_probes(p)]
    assert not found, found


def test_the_checks_can_fail(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text('"""Prose may say "dpo"."""\nif stage in ("dpo", "kto"):\n    pass\nif hasattr(cfg, "rollout"):\n'
                   '    pass\nBODY = StageBody(name="sft")\n')
    assert spelled(bad, {"dpo", "kto", "sft"}) == [(2, "dpo"), (2, "kto")]
    assert attribute_probes(bad) == [4]
