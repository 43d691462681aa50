"""tether.common.services: the bound, the address parsing, and the probes against loopback servers that
refuse, say nothing, hang up, or answer (tests/integration/test_unreachable_services.py drives the
CLI)."""

from __future__ import annotations

import os
import socket
import threading
import time
from contextlib import contextmanager

import pytest

from tether.common import services
from tether.common.errors import ConfigError
from tether.common.services import Unreachable

BOUND = 0.5


@pytest.fixture(autouse=True)
def small_bound(monkeypatch):
    monkeypatch.setenv(services.TIMEOUT_ENV, f"{BOUND:g}")
    for name in ("RAY_ADDRESS", "RAY_USE_TLS", "http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY",
                 "no_proxy", "NO_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)


@contextmanager
def server(reply: bytes | None, close: bool = False, host: str = "127.0.0.1"):
    """A loopback server: on each connection it sends ``reply`` (None: nothing), and hangs up if
    ``close``; yields its port."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, 0))
    sock.listen(16)
    sock.settimeout(0.1)
    held, stop = [], threading.Event()

    def serve():
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except OSError:
                continue
            if reply is not None:
                conn.sendall(reply)
            if close:
                conn.close()
            else:
                held.append(conn)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield sock.getsockname()[1]
    finally:
        stop.set()
        thread.join(2)
        for conn in held:
            conn.close()
        sock.close()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def timed(fn):
    start = time.monotonic()
    try:
        fn()
    except Unreachable as err:
        return str(err), time.monotonic() - start
    return None, time.monotonic() - start


# -- the bound -----------------------------------------------------------------------------------
def test_the_bound_comes_from_the_environment(monkeypatch):
    assert services.timeout_s() == BOUND
    monkeypatch.delenv(services.TIMEOUT_ENV)
    assert services.timeout_s() == services.DEFAULT_TIMEOUT_S == 30.0
    assert services.bound_text() == "Each outside service gets 30 s to answer (TETHER_SERVICE_TIMEOUT_S)."
    for bad in ("abc", "0", "-1", "nan", "inf"):
        monkeypatch.setenv(services.TIMEOUT_ENV, bad)
        with pytest.raises(ConfigError, match=f"TETHER_SERVICE_TIMEOUT_S = '{bad}': expected a number of seconds"):
            services.timeout_s()


def test_library_bounds_follow_it_and_never_override_the_user(monkeypatch):
    monkeypatch.setenv(services.TIMEOUT_ENV, "2.5")
    assert services.mlflow_env() == {"MLFLOW_HTTP_REQUEST_TIMEOUT": "3", "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2"}
    assert services.ray_env() == {"RAY_py_gcs_connect_timeout_s": "3", "RAY_gcs_server_port_wait_time_s": "1"}
    monkeypatch.setenv("RAY_gcs_server_port_wait_time_s", "7")
    monkeypatch.delenv("RAY_py_gcs_connect_timeout_s", raising=False)
    with services.scoped_env(services.ray_env()):
        assert os.environ["RAY_gcs_server_port_wait_time_s"] == "7"
        assert os.environ["RAY_py_gcs_connect_timeout_s"] == "3"
    assert "RAY_py_gcs_connect_timeout_s" not in os.environ and os.environ["RAY_gcs_server_port_wait_time_s"] == "7"
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "99")
    monkeypatch.delenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", raising=False)
    try:
        services.set_default_env(services.mlflow_env())
        assert os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] == "99"
        assert os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] == "2"
    finally:
        os.environ.pop("MLFLOW_HTTP_REQUEST_MAX_RETRIES", None)


# -- probes --------------------------------------------------------------------------------------
def test_a_refused_connection_fails_at_once():
    reason, took = timed(lambda: services.answers("127.0.0.1", closed_port(), b"hi"))
    assert "refused" in reason and took < BOUND


def test_a_server_that_says_nothing_fails_at_the_bound():
    with server(None) as port:
        reason, took = timed(lambda: services.answers("127.0.0.1", port, b"hi"))
    assert reason == f"it accepted the connection but sent nothing within {BOUND:g} s"
    assert BOUND * 0.9 <= took < BOUND + 1.0


def test_a_server_that_hangs_up_did_not_answer():
    with server(None, close=True) as port:
        reason, _ = timed(lambda: services.answers("127.0.0.1", port, b"hi"))
    assert reason == "it closed the connection without answering"


def test_a_server_that_answers_passes():
    with server(b"\x00\x00\x06\x04") as port:
        assert timed(lambda: services.answers("127.0.0.1", port, services.HTTP2_GREETING))[0] is None


def test_a_name_that_does_not_resolve():
    reason, _ = timed(lambda: services.answers("no-such-host.invalid", 80, b"hi"))
    assert reason == "the name 'no-such-host.invalid' does not resolve"


def test_a_grpc_server_answers_the_http2_greeting():
    """Ray's GCS and its client server are gRPC servers: they answer the greeting at once."""
    grpc = pytest.importorskip("grpc")
    from concurrent import futures

    srv = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    port = srv.add_insecure_port("127.0.0.1:0")
    srv.start()
    try:
        assert timed(lambda: services.answers("127.0.0.1", port, services.HTTP2_GREETING))[0] is None
    finally:
        srv.stop(0)


def test_urls_http_https_and_proxies(monkeypatch):
    with server(b"HTTP/1.1 404 Not Found\r\n\r\n") as port:
        services.url_answers(f"http://127.0.0.1:{port}/api")  # any status is an answer
        # TLS: a peer that answers the handshake with anything has answered; one that says nothing has not.
        services.url_answers(f"https://127.0.0.1:{port}")
        # Behind a proxy the libraries would use, the proxy is what must take the connection.
        monkeypatch.setenv("http_proxy", f"http://127.0.0.1:{closed_port()}")
        reason, _ = timed(lambda: services.url_answers(f"http://127.0.0.1:{port}"))
        assert "refused" in reason
        monkeypatch.setenv("no_proxy", "127.0.0.1")
        services.url_answers(f"http://127.0.0.1:{port}")
    with server(None) as port:
        reason, _ = timed(lambda: services.url_answers(f"https://127.0.0.1:{port}"))
        assert reason.startswith("it accepted the connection but sent nothing")
    assert "not a number" in timed(lambda: services.url_answers("http://127.0.0.1:99999"))[0]


# -- the settings --------------------------------------------------------------------------------
@pytest.mark.parametrize("address,target", [
    ("", None), ("auto", None), ("local", None),
    ("10.0.0.1:6379", ("10.0.0.1", 6379, False)), ("[::1]:6379", ("::1", 6379, False)),
    ("ray://head", ("head", 10001, True)), ("ray://head:9000", ("head", 9000, True)),
])
def test_ray_targets(address, target):
    assert services.ray_target(address) == target


def test_ray_auto_follows_ray_address_and_bad_addresses_name_the_key(monkeypatch):
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.2:6380")
    assert services.ray_target("auto") == ("10.0.0.2", 6380, False)
    for bad in ("localhost", "head:abc", "head:0", ":6379"):
        with pytest.raises(ConfigError, match="placement.ray.address.*expected host:port"):
            services.ray_target(bad)


def test_ray_check_names_the_key_and_where_ray_goes():
    port = closed_port()
    with pytest.raises(ConfigError) as err:
        services.check_ray(f"127.0.0.1:{port}", node_ip=lambda: "127.0.0.1")
    text = str(err.value)
    assert text.startswith(f"The Ray cluster at 127.0.0.1:{port} (placement.ray.address; Ray reaches it as this "
                           f"machine's 127.0.0.1:{port}) did not answer: the connection was refused")
    assert text.endswith(f"Each outside service gets {BOUND:g} s to answer (TETHER_SERVICE_TIMEOUT_S).")
    assert "\n" not in text
    with server(b"\x00") as live:  # localhost means this machine's address, as Ray resolves it
        services.check_ray(f"localhost:{live}", node_ip=lambda: "127.0.0.1")
    services.check_ray("")  # a local cluster: nothing to reach


def test_mlflow_local_stores_are_not_probed_and_servers_are(tmp_path):
    for uri in (str(tmp_path / "mlruns"), f"file://{tmp_path}/mlruns", f"sqlite:///{tmp_path}/m.db", "databricks"):
        services.check_mlflow(uri)
    port = closed_port()
    for uri in (f"http://127.0.0.1:{port}", f"postgresql+psycopg2://u:p@127.0.0.1:{port}/db"):
        with pytest.raises(ConfigError, match=r"\(MLFLOW_TRACKING_URI\) did not answer: the connection was refused"):
            services.check_mlflow(uri)


def test_errors_print_no_password_or_token():
    port = closed_port()
    with pytest.raises(ConfigError) as err:
        services.check_mlflow(f"http://user:secret@127.0.0.1:{port}/mlflow?token=abc")
    assert f"at http://127.0.0.1:{port}/mlflow (MLFLOW_TRACKING_URI)" in str(err.value)
    assert "secret" not in str(err.value) and "abc" not in str(err.value)
    with pytest.raises(ConfigError) as err:
        services.check_mlflow(f"mysql+pymysql://user:secret@127.0.0.1:{port}/db")
    assert f"The MLflow database at 127.0.0.1:{port}" in str(err.value) and "secret" not in str(err.value)
