"""The packages only some features need are imported where those features run: the RL loop, the
CLI, the bench and the SFT stage import without them (the GPU image has torch, transformers and
peft but not jsonschema, datasets, fastapi, uvicorn, httpx or pydantic; docs/gpu.md)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"
OPTIONAL = ("jsonschema", "datasets", "fastapi", "uvicorn", "httpx", "pydantic")

SCRIPT = textwrap.dedent("""
    import importlib, sys

    class Refuse:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in {optional!r}:
                raise ModuleNotFoundError(f"No module named {{name!r}} (refused by the test)")
            return None

    sys.meta_path.insert(0, Refuse())
    for module in ("tether.cli", "tether.commands.bench", "tether.commands.stage", "tether.bench.setup",
                   "tether.loops.rl_run", "tether.loops.supervised", "tether.loops.stage"):
        importlib.import_module(module)
    print("imported")
""")


def test_core_paths_import_without_the_optional_packages():
    script = SCRIPT.format(optional=set(OPTIONAL))
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                         env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0 and "imported" in out.stdout, out.stderr[-3000:]
