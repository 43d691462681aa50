"""The sampling worker is a spawned process; spawn re-imports the parent's ``__main__`` in the
child unless told not to. A user's script without an ``if __name__ == "__main__":`` guard must
run its top-level code (its training calls) once, not once more per worker."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}

#: A script's top level: note this run in the log, then start a spawned process, either as the
#: worker does (tether's start) or plainly (the control: what spawn does without the fix).
TRIVIAL = """\
import multiprocessing as mp
import os
import sys

with open(os.environ["RUNS_LOG"], "a") as log:
    log.write(f"top level ran in {os.getpid()}\\n")
process = mp.get_context("spawn").Process(target=os.getpid)
if sys.argv[1:] == ["plain"]:
    process.start()
else:
    from tether.rollout.worker import start_without_main

    start_without_main(process)
process.join()
print("child exit", process.exitcode)
"""


def _run(tmp_path: Path, argv: list[str], cwd: Path | None = None) -> tuple[subprocess.CompletedProcess, list[str]]:
    log = tmp_path / "runs.log"
    log.unlink(missing_ok=True)
    done = subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=240,
                          env={**ENV, "RUNS_LOG": str(log)}, cwd=cwd or tmp_path)
    return done, log.read_text().splitlines() if log.is_file() else []


def test_an_unguarded_script_runs_once_when_tether_starts_a_spawned_process(tmp_path):
    script = tmp_path / "unguarded.py"
    script.write_text(TRIVIAL)
    done, lines = _run(tmp_path, [str(script)])
    assert done.returncode == 0 and "child exit 0" in done.stdout, done.stderr
    assert len(lines) == 1, lines
    # The control: a plain spawn start re-runs the script's top level in the child (which then
    # fails trying to start a process during its bootstrap), so the test above can tell.
    done, lines = _run(tmp_path, [str(script), "plain"])
    assert len(lines) == 2 and "child exit 1" in done.stdout, (lines, done.stdout, done.stderr)


def test_an_unguarded_module_run_with_dash_m_runs_once(tmp_path):
    """``python -m pkg.script``: spawn records the module's name rather than its file."""
    package = tmp_path / "userpkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "train.py").write_text(TRIVIAL)
    done, lines = _run(tmp_path, ["-m", "userpkg.train"])
    assert done.returncode == 0 and "child exit 0" in done.stdout, done.stderr
    assert len(lines) == 1, lines


def test_the_callers_main_is_restored_after_the_start_even_when_it_fails():
    from tether.rollout.worker import start_without_main

    class Refuses:
        def start(self):
            seen.append(sys.modules["__main__"])
            raise OSError("no processes left")

    seen: list = []
    main = sys.modules["__main__"]
    try:
        start_without_main(Refuses())
    except OSError:
        pass
    assert sys.modules["__main__"] is main
    assert seen[0] is not main and getattr(seen[0], "__file__", None) is None and seen[0].__spec__ is None


@pytest.mark.slow
def test_an_unguarded_script_with_a_rollout_worker_runs_once(tmp_path):
    """The worker itself, sampling one rollout from an unguarded script (a micro model)."""
    script = tmp_path / "worker_script.py"
    script.write_text(textwrap.dedent("""\
        import os

        with open(os.environ["RUNS_LOG"], "a") as log:
            log.write(f"top level ran in {os.getpid()}\\n")

        from tether.bench.setup import SIZES, build_setup
        from tether.rollout import SamplingParams
        from tether.rollout.worker import RolloutWorker, WorkerSpec

        setup = build_setup(SIZES["micro"], 2, seed=5)
        model = setup.models["policy"]
        worker = RolloutWorker(WorkerSpec("lean", model.config, setup.tokenizer, threads=1),
                               lambda: model.state_dict().items())
        worker.push_weights(0)
        worker.request(setup.prompts.ids[:2], setup.prompts.texts[:2], SamplingParams(max_new_tokens=3), seed=1, key=0)
        got = worker.receive(0)
        worker.close()
        print("sampled", tuple(got.rollout.response_ids.shape))
        """))
    done, lines = _run(tmp_path, [str(script)])
    assert done.returncode == 0 and "sampled (2," in done.stdout, done.stderr
    assert len(lines) == 1, lines
