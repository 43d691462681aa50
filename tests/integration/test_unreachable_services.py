"""Outside services that do not answer (docs/reliability.md, "second round", class 3): each fails within its bound
(``TETHER_SERVICE_TIMEOUT_S``, see ``tether.common.services``) with one paragraph naming the setting,
exit 2, and no run directory.

Each case runs the real CLI in a subprocess (Ray reads its own connect timeout when it is first
imported) with a bound of 2 s, against loopback only: a closed port (refused at once) and a
socket that accepts connections and never says a word (the bound). Before this, a Ray address
waited for minutes, MLflow retried for minutes and W&B gave up after 90 s.

The clock starts after torch and transformers are imported, so it measures the command, not
Python's start; a case that would hang is cut off by the subprocess timeout.
"""

from __future__ import annotations

import http.server
import os
import socket
import subprocess
import sys
import threading
from contextlib import contextmanager
from pathlib import Path

import pytest

from bad_input_helpers import good_prompts, ppo_args, sft_args, write_jsonl, good_sft

BOUND = 2.0
# Slack for what the command does besides waiting (config, tokenizer, a library's import) on a busy machine.
SLACK = 20.0
RUNNER = ("import sys, time\n"
          "import torch, transformers  # noqa: F401  (before the clock: the command is timed, not Python's start)\n"
          "from tether.cli import main\n"
          "t = time.monotonic()\n"
          "code = main(sys.argv[1:])\n"
          "print(f'elapsed {time.monotonic() - t:.3f}', flush=True)\n"
          "sys.exit(code)\n")
# Every variable that could point a tracker or Ray somewhere else.
CLEARED = ("MLFLOW_TRACKING_URI", "MLFLOW_HTTP_REQUEST_TIMEOUT", "MLFLOW_HTTP_REQUEST_MAX_RETRIES", "RAY_ADDRESS",
           "WANDB_BASE_URL", "WANDB_MODE", "WANDB_INIT_TIMEOUT", "WANDB_API_KEY", "TRACKIO_SERVER_URL",
           "TRACKIO_SPACE_ID", "HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy")


# -- loopback servers ------------------------------------------------------------------------------
def closed_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


@contextmanager
def silent_server(host: str = "127.0.0.1", accepted: list | None = None):
    """A socket that accepts every connection (appended to ``accepted``) and never sends a byte;
    yields its port."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, 0))
    sock.listen(64)
    held, stop = [] if accepted is None else accepted, threading.Event()

    def accept():
        sock.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(sock.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield sock.getsockname()[1]
    finally:
        stop.set()
        thread.join(5)
        for conn in held:
            conn.close()
        sock.close()


@contextmanager
def stalling_http_server(host: str = "127.0.0.1"):
    """An HTTP server that answers GET at once and holds every POST unanswered (a W&B server
    whose API is stuck); yields its port."""
    release = threading.Event()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def do_POST(self):
            release.wait(60)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer((host, 0), Handler)
    server.daemon_threads = True
    server.handle_error = lambda request, address: None  # a check that hangs up after the first byte
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        release.set()
        server.shutdown()
        server.server_close()


# -- running the CLI ---------------------------------------------------------------------------------
def env_for(tmp: Path, **extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in CLEARED}
    env.update(OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", TETHER_SERVICE_TIMEOUT_S=f"{BOUND:g}",
               WANDB_CONFIG_DIR=str(tmp / "wandb-config"), WANDB_CACHE_DIR=str(tmp / "wandb-cache"),
               WANDB_DATA_DIR=str(tmp / "wandb-data"), WANDB_SILENT="true", TRACKIO_DIR=str(tmp / "trackio"))
    env.update(extra)
    return env


def run_cli(args: list[str], env: dict, cwd: Path) -> tuple[int, str, float]:
    """(exit code, stderr, seconds the command took); the case fails if it outlives bound + slack."""
    proc = subprocess.run([sys.executable, "-c", RUNNER, *args], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=120 + BOUND + SLACK)
    elapsed = [float(line.split()[1]) for line in proc.stdout.splitlines() if line.startswith("elapsed ")]
    assert elapsed, proc.stderr[-3000:]
    print(f'{elapsed[0]:.2f} s: {proc.stderr}')  # shown with -s or on failure
    return proc.returncode, proc.stderr, elapsed[0]


def assert_one_paragraph(code: int, err: str, stage: str, *needles: str) -> str:
    """Exit 2 and exactly one ``tether STAGE: error:`` paragraph naming ``needles``, no traceback.
    (Libraries may log above it; the error itself is one line.)"""
    assert code == 2, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    lines = [line for line in err.splitlines() if line.startswith(f"tether {stage}: error:")]
    assert len(lines) == 1, err[-3000:]
    for needle in needles:
        assert needle in lines[0], f"{needle!r} not in: {lines[0]}"
    return lines[0]


def assert_within_bound(elapsed: float, silent: bool) -> None:
    assert elapsed < BOUND + SLACK, f"took {elapsed:.1f} s; the bound is {BOUND:g} s"
    if silent:  # the bound, not something else, is what ended the wait
        assert elapsed >= BOUND * 0.9, f"gave up after {elapsed:.1f} s, before the {BOUND:g} s bound"


@pytest.fixture
def workdir(tmp_path) -> Path:
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    return cwd


@contextmanager
def endpoint(kind: str, host: str = "127.0.0.1"):
    """``host:port`` of a closed port or of a silent server."""
    if kind == "closed":
        yield f"{host}:{closed_port(host)}"
    else:
        with silent_server(host) as port:
            yield f"{host}:{port}"


# -- Ray -------------------------------------------------------------------------------------------
def loopback_alias() -> str:
    """127.0.0.2: Ray replaces 127.0.0.1 with this machine's own address, where a silent server on
    127.0.0.1 could not be reached; every other 127/8 address is taken as written."""
    try:
        with socket.socket() as s:
            s.bind(("127.0.0.2", 0))
    except OSError:
        pytest.skip("127.0.0.2 is not a loopback address here")
    return "127.0.0.2"


@pytest.mark.parametrize("kind", ["closed", "silent"])
def test_ray_address_that_does_not_answer(kind, task, tmp_path, workdir):
    pytest.importorskip("ray")
    host = "127.0.0.1" if kind == "closed" else loopback_alias()
    prompts = write_jsonl(tmp_path / "prompts.jsonl", good_prompts())
    out = tmp_path / "run"
    with endpoint(kind, host) as address:
        code, err, elapsed = run_cli(ppo_args(task, out, prompts, "placement.backend=ray",
                                              f"placement.ray.address={address}"), env_for(tmp_path), workdir)
    line = assert_one_paragraph(code, err, "ppo", "placement.ray.address", address.split(":")[1],
                                "2 s to answer (TETHER_SERVICE_TIMEOUT_S)")
    assert ("refused" if kind == "closed" else "sent nothing within 2 s") in line
    assert_within_bound(elapsed, kind == "silent")
    assert not out.exists() and not list(workdir.iterdir())


@pytest.mark.slow
def test_ray_address_that_answers_but_is_no_cluster(task, tmp_path, workdir):
    """An address that answers (an HTTP server: a wrong port) passes the check; Ray then gets one
    connection attempt instead of 20 (its GCS client waits the bound after its own two 5 s channel
    connects), and its failure is the paragraph naming the key. Ray alone: about 13 minutes."""
    pytest.importorskip("ray")
    host = loopback_alias()
    prompts = write_jsonl(tmp_path / "prompts.jsonl", good_prompts())
    out = tmp_path / "run"
    with stalling_http_server(host) as port:
        code, err, elapsed = run_cli(ppo_args(task, out, prompts, "placement.backend=ray",
                                              f"placement.ray.address={host}:{port}"), env_for(tmp_path), workdir)
    assert_one_paragraph(code, err, "ppo", "Could not join the Ray cluster", f"{host}:{port}", "placement.ray.address",
                         "TETHER_SERVICE_TIMEOUT_S")
    assert elapsed < BOUND + 11 + SLACK, f"took {elapsed:.1f} s"
    assert not out.exists() and not list(workdir.iterdir())


# -- MLflow ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["closed", "silent"])
def test_mlflow_tracking_uri_that_does_not_answer(kind, task, tmp_path, workdir):
    pytest.importorskip("mlflow")
    out = tmp_path / "run"
    train = write_jsonl(tmp_path / "train.jsonl", good_sft())
    with endpoint(kind) as address:
        uri = f"http://{address}"
        code, err, elapsed = run_cli(sft_args(task, out, train, "run.report_to=[mlflow]"),
                                     env_for(tmp_path, MLFLOW_TRACKING_URI=uri), workdir)
    assert_one_paragraph(code, err, "sft", "MLFLOW_TRACKING_URI", uri, "TETHER_SERVICE_TIMEOUT_S")
    assert_within_bound(elapsed, kind == "silent")
    assert not out.exists() and not list(workdir.iterdir())


# -- W&B -------------------------------------------------------------------------------------------
def wandb_online(tmp: Path, base_url: str, **extra: str) -> dict:
    return env_for(tmp, WANDB_MODE="online", WANDB_BASE_URL=base_url, WANDB_API_KEY="x" * 40, **extra)


@pytest.mark.parametrize("kind", ["closed", "silent"])
def test_wandb_server_that_does_not_answer(kind, task, tmp_path, workdir):
    """Online mode against a W&B host that refuses or never answers: W&B alone took 90 s (its init_timeout)."""
    pytest.importorskip("wandb")
    out = tmp_path / "run"
    train = write_jsonl(tmp_path / "train.jsonl", good_sft())
    with endpoint(kind) as address:
        url = f"http://{address}"
        code, err, elapsed = run_cli(sft_args(task, out, train, "run.report_to=[wandb]"),
                                     wandb_online(tmp_path, url), workdir)
    assert_one_paragraph(code, err, "sft", "WANDB_BASE_URL", url, "WANDB_MODE=offline", "TETHER_SERVICE_TIMEOUT_S")
    assert_within_bound(elapsed, kind == "silent")
    assert not out.exists() and not list(workdir.iterdir())


def test_wandb_server_that_answers_but_never_starts_the_run(task, tmp_path, workdir):
    """The host answers (the check passes) and then holds W&B's API calls: wandb.init gives up
    after the bound (its init_timeout), and the run directory made meanwhile is removed."""
    pytest.importorskip("wandb")
    out = tmp_path / "run"
    train = write_jsonl(tmp_path / "train.jsonl", good_sft())
    with stalling_http_server() as port:
        code, err, elapsed = run_cli(sft_args(task, out, train, "run.report_to=[wandb]"),
                                     wandb_online(tmp_path, f"http://127.0.0.1:{port}"), workdir)
    line = assert_one_paragraph(code, err, "sft", "run.report_to", "wandb could not start a run",
                                "W&B gets 2 s to start a run (WANDB_INIT_TIMEOUT, else TETHER_SERVICE_TIMEOUT_S)")
    assert "wandb.init(settings=" not in line  # W&B's own advice is Python code a CLI user does not write
    assert elapsed < BOUND + SLACK + 30, f"took {elapsed:.1f} s"  # the model loads before the run starts
    assert not out.exists() and not list(workdir.iterdir())


# -- reward.url --------------------------------------------------------------------------------------
@pytest.mark.parametrize("dry_run", [False, True], ids=["run", "dry-run"])
def test_reward_server_that_never_answers(dry_run, task, tmp_path, workdir):
    """GET /health waited 120 s three times over (360 s); now the check as a whole gets the bound."""
    prompts = write_jsonl(tmp_path / "prompts.jsonl", good_prompts())
    out = tmp_path / "run"
    with silent_server() as port:
        url = f"http://127.0.0.1:{port}"
        args = ppo_args(task, out, prompts, reward=f"reward.url={url}")
        code, err, elapsed = run_cli([args[0], *(["--dry-run"] if dry_run else []), *args[1:]],
                                     env_for(tmp_path), workdir)
    assert_one_paragraph(code, err, "ppo", "reward.url", url, "within 2 s", "TETHER_SERVICE_TIMEOUT_S")
    assert_within_bound(elapsed, silent=True)
    assert not out.exists() and not list(workdir.iterdir())


# -- the dry run -------------------------------------------------------------------------------------
def test_dry_run_does_not_join_the_ray_cluster(task, tmp_path, workdir):
    """``--dry-run`` reports the placement without joining the cluster: it must not start waiting on it."""
    prompts = write_jsonl(tmp_path / "prompts.jsonl", good_prompts())
    out = tmp_path / "run"
    accepted: list = []
    with silent_server(accepted=accepted) as port:
        args = ppo_args(task, out, prompts, "placement.backend=ray", f"placement.ray.address=127.0.0.1:{port}")
        code, err, elapsed = run_cli([args[0], "--dry-run", *args[1:]], env_for(tmp_path), workdir)
    assert code == 0, err[-3000:]
    assert accepted == [] and elapsed < BOUND + SLACK
    assert not out.exists() and not list(workdir.iterdir())


@pytest.mark.parametrize("tracker", ["wandb", "mlflow"])
def test_dry_run_checks_the_trackers_servers_as_the_run_does(tracker, task, tmp_path, workdir):
    """The dry run checks what the run checks first (a dry run that passes means the run starts):
    a tracker server that never answers stops it within the bound, with the run's paragraph."""
    pytest.importorskip(tracker)
    train = write_jsonl(tmp_path / "train.jsonl", good_sft())
    out = tmp_path / "run"
    with silent_server() as port:
        url = f"http://127.0.0.1:{port}"
        env = wandb_online(tmp_path, url) if tracker == "wandb" else env_for(tmp_path, MLFLOW_TRACKING_URI=url)
        args = sft_args(task, out, train, f"run.report_to=[{tracker}]")
        code, err, elapsed = run_cli([args[0], "--dry-run", *args[1:]], env, workdir)
    setting = "WANDB_BASE_URL" if tracker == "wandb" else "MLFLOW_TRACKING_URI"
    assert_one_paragraph(code, err, "sft", setting, url, "sent nothing within 2 s", "TETHER_SERVICE_TIMEOUT_S")
    assert_within_bound(elapsed, silent=True)
    assert not out.exists() and not list(workdir.iterdir())
