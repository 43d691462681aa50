"""The outside services tether talks to, and how long each gets to answer.

A service on another machine that does not answer must not hold a command for minutes: each one
is checked before the run directory is created (the trackers' servers and the Ray cluster before
any model loads), and the library that talks to it afterwards gets a bound through its own
setting. A service that does not answer in time stops the command with one paragraph naming the
setting that points at it and the bound (exit 2; nothing is left behind).

The bound is ``T`` = the environment variable ``TETHER_SERVICE_TIMEOUT_S`` (seconds, default
30). A refused connection or a name that does not resolve fails at once; a host that drops the
connection attempt, or a server that takes it and then says nothing, fails after ``T``.

| service | the setting that names it | checked first | then bounded by the library's own setting |
| --- | --- | --- | --- |
| Ray cluster | ``placement.ray.address`` (``host:port``, ``ray://host:port``; ``auto`` through ``RAY_ADDRESS``) | a TCP connection and an HTTP/2 (gRPC) answer within ``T`` | one connection attempt (Ray makes 20): its GCS client waits ``T`` (``RAY_py_gcs_connect_timeout_s``) after Ray's fixed 5 s channel connects, so an address that answers but is no Ray cluster fails in about ``T`` + 11 s |
| MLflow tracking server | ``MLFLOW_TRACKING_URI`` (``http(s)://``; a database URI: its TCP port) | an HTTP answer (a TCP connection for a database) within ``T`` | ``MLFLOW_HTTP_REQUEST_TIMEOUT`` = ``T`` per request, ``MLFLOW_HTTP_REQUEST_MAX_RETRIES`` = 2 (MLflow: 120 s, 7) |
| W&B server (online mode) | ``WANDB_BASE_URL`` (or the host of ``wandb login --host``) | an HTTP answer within ``T`` | ``wandb.init``'s ``init_timeout`` = ``T`` (W&B: 90 s; ``WANDB_INIT_TIMEOUT``) |
| trackio server or Space | ``TRACKIO_SERVER_URL``, ``TRACKIO_SPACE_ID`` (the hub's ``HF_ENDPOINT``) | an HTTP answer within ``T`` | trackio's own (15 s; it keeps unsent logs on disk) |
| reward server | ``reward.url`` | ``GET /health`` within ``T`` in all | each scoring request 120 s, 2 retries |
| Hugging Face hub | ``HF_ENDPOINT`` | a TCP connection within 1 s (``tether.models.loading.hub_offline``) | none needed: then only the local cache is searched |

``--dry-run`` makes the same checks as the run, but for the Ray cluster: it reports the placement
without joining it.

A library setting the user gave (one of the variables above, in the environment) is left as it
is. Behind an HTTP(S) proxy (``HTTPS_PROXY`` and the like) the check connects to the proxy, which
the libraries go through too.
"""

from __future__ import annotations

import math
import os
import socket
import ssl
import time
import urllib.request
from contextlib import contextmanager
from urllib.parse import urlsplit

from tether.common.errors import ConfigError

TIMEOUT_ENV = "TETHER_SERVICE_TIMEOUT_S"
DEFAULT_TIMEOUT_S = 30.0
#: The hub is only asked whether it is there; a miss falls back to the local cache (models/loading.py).
HUB_TIMEOUT_S = 1.0
#: What MLflow's HTTP client retries a failed request, unless MLFLOW_HTTP_REQUEST_MAX_RETRIES says otherwise.
MLFLOW_RETRIES = 2

# The HTTP/2 connection preface and an empty SETTINGS frame (RFC 9113, section 3.4): a gRPC server
# answers them with its own SETTINGS frame at once; a socket that accepts and never answers does not.
HTTP2_GREETING = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
DEFAULT_PORTS = {"http": 80, "https": 443, "ray": 10001, "postgresql": 5432, "mysql": 3306, "mssql": 1433}


class Unreachable(Exception):
    """Why a service did not answer, in a few words (completed into a ConfigError by :func:`check`)."""


def timeout_s() -> float:
    """``T``: seconds an outside service gets to answer (``TETHER_SERVICE_TIMEOUT_S``, default 30)."""
    text = os.environ.get(TIMEOUT_ENV, "").strip()
    if not text:
        return DEFAULT_TIMEOUT_S
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise ConfigError(f"The environment variable {TIMEOUT_ENV} = {text!r}: expected a number of seconds > 0 "
                          f"(how long an outside service gets to answer; default {DEFAULT_TIMEOUT_S:g}).")
    return value


def bound_text() -> str:
    """The sentence every service error ends with: the bound and how to change it."""
    return f"Each outside service gets {timeout_s():g} s to answer ({TIMEOUT_ENV})."


# -- probes ----------------------------------------------------------------------------------------
def connect(host: str, port: int, timeout: float) -> socket.socket:
    """A TCP connection to ``host:port`` within ``timeout`` s, or :class:`Unreachable` saying why not."""
    try:
        return socket.create_connection((host, port), timeout=timeout)
    except socket.gaierror:
        raise Unreachable(f"the name {host!r} does not resolve") from None
    except ConnectionRefusedError:
        raise Unreachable("the connection was refused (nothing listens there)") from None
    except TimeoutError:
        raise Unreachable(f"no connection within {timeout:g} s") from None
    except OSError as err:
        raise Unreachable(err.strerror or str(err)) from None


def connects(host: str, port: int) -> None:
    """``host:port`` takes a TCP connection within ``T`` (for servers that wait for the client to speak)."""
    connect(host, port, timeout_s()).close()


def answers(host: str, port: int, greeting: bytes = b"", tls: bool = False) -> None:
    """Connect to ``host:port``, say ``greeting`` and get the first byte back, all within ``T``;
    :class:`Unreachable` with the reason otherwise. With ``tls`` a finished (or refused) TLS
    handshake is the answer."""
    timeout = timeout_s()
    deadline = time.monotonic() + timeout
    with connect(host, port, timeout) as sock:
        try:
            sock.settimeout(max(deadline - time.monotonic(), 0.001))
            if tls:
                ssl.create_default_context().wrap_socket(sock, server_hostname=host).close()
                return
            sock.sendall(greeting)
            if not sock.recv(1):
                raise ConnectionResetError
        except TimeoutError:
            raise Unreachable(f"it accepted the connection but sent nothing within {timeout:g} s") from None
        except (ssl.SSLEOFError, ConnectionResetError, BrokenPipeError):
            raise Unreachable("it closed the connection without answering") from None
        except ssl.SSLError:
            return  # it spoke TLS back (a certificate problem is the library's to report)
        except OSError as err:
            raise Unreachable(err.strerror or str(err)) from None


def url_answers(url: str) -> None:
    """An ``http(s)://`` URL's server answers within ``T``: an HTTPS server finishes a TLS handshake,
    an HTTP server answers a GET (any status). Behind a proxy the libraries use, the proxy must
    take the connection."""
    parts = urlsplit(url)
    scheme, host = parts.scheme.lower(), parts.hostname
    if scheme not in ("http", "https") or not host:
        raise Unreachable(f"{url!r} is not an http:// or https:// URL")
    proxy = urllib.request.getproxies().get(scheme)
    if proxy and not urllib.request.proxy_bypass(host):
        proxy_parts = urlsplit(proxy if "://" in proxy else f"http://{proxy}")
        return connects(proxy_parts.hostname or "", _port(proxy_parts, "http"))
    if scheme == "https":
        return answers(host, _port(parts, scheme), tls=True)
    request = f"GET {parts.path or '/'} HTTP/1.1\r\nHost: {parts.netloc}\r\nUser-Agent: tether\r\nConnection: close\r\n\r\n"
    return answers(host, _port(parts, scheme), request.encode())


def _port(parts, scheme: str) -> int:
    try:
        port = parts.port
    except ValueError:
        raise Unreachable(f"the port in {parts.netloc!r} is not a number from 1 to 65535") from None
    return port or DEFAULT_PORTS[scheme]


def check(what: str, where: str, setting: str, probe, hint: str = "") -> None:
    """Run ``probe()``; a :class:`ConfigError` naming ``what``, ``where``, ``setting`` (with any
    aside, e.g. ``"placement.ray.address; ..."``) and the bound if the service did not answer."""
    try:
        probe()
    except Unreachable as err:
        raise ConfigError(f"{what} at {where} ({setting}) did not answer: {err}. {hint + ' ' if hint else ''}"
                          f"{bound_text()}") from None


# -- Ray -------------------------------------------------------------------------------------------
RAY_HINT = ("Start the cluster (`ray start --head` on its head node), correct placement.ray.address, or leave it "
            "empty to start a local cluster.")


def ray_target(address: str) -> tuple[str, int, bool] | None:
    """(host, port, through the Ray client) that ``placement.ray.address`` connects to; None when
    there is nothing to check (a local cluster, or ``auto`` without ``RAY_ADDRESS``)."""
    address = address.strip()
    if address == "auto":
        address = os.environ.get("RAY_ADDRESS", "").strip()
    if address in ("", "auto", "local"):
        return None
    client = address.startswith("ray://")
    hostport = address.removeprefix("ray://").split("/", 1)[0]
    host, sep, port = hostport.rpartition(":")
    if client and not sep:
        host, port = hostport, str(DEFAULT_PORTS["ray"])
    host = host.strip("[]")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"Config key 'placement.ray.address' = {address!r}: expected host:port (the head node's "
                          "GCS address, e.g. 10.0.0.1:6379), ray://host:10001, auto, or '' for a local cluster.")
    return host, int(port), client


def check_ray(address: str, node_ip=None) -> None:
    """The Ray cluster of ``placement.ray.address`` answers within ``T`` (before ``ray.init``).

    Where the address says localhost, ``ray.init`` connects to this machine's own address (a head
    node started here listens there): ``node_ip()`` gives it, as Ray finds it.
    """
    target = ray_target(address)
    if target is None:
        return
    host, port, client = target
    where, setting = f"{host}:{port}", "placement.ray.address"
    if not client and host in ("localhost", "127.0.0.1", "::1") and node_ip is not None:
        host = node_ip()
        setting += f"; Ray reaches it as this machine's {host}:{port}"
    if os.environ.get("RAY_USE_TLS", "0").lower() in ("1", "true"):
        probe = lambda: connects(host, port)  # noqa: E731  (a TLS cluster takes the cleartext greeting as noise)
    else:
        probe = lambda: answers(host, port, HTTP2_GREETING)  # noqa: E731
    check("The Ray cluster", where, setting, probe, RAY_HINT)


def ray_env() -> dict[str, str]:
    """Ray's own bounds on joining a cluster: one attempt (Ray makes 20 by default) of at most
    ``T`` for its GCS client. ``RAY_py_gcs_connect_timeout_s`` is read when ``ray`` is first
    imported, ``RAY_gcs_server_port_wait_time_s`` each time it connects."""
    return {"RAY_py_gcs_connect_timeout_s": str(max(1, math.ceil(timeout_s()))),
            "RAY_gcs_server_port_wait_time_s": "1"}


@contextmanager
def scoped_env(values: dict[str, str]):
    """``values`` in ``os.environ`` for the block, each only where the user set none; restored after."""
    added = {k: v for k, v in values.items() if k not in os.environ}
    os.environ.update(added)
    try:
        yield
    finally:
        for key in added:
            os.environ.pop(key, None)


# -- MLflow ----------------------------------------------------------------------------------------
def mlflow_env() -> dict[str, str]:
    """MLflow's HTTP client bounds: ``T`` per request (it takes whole seconds), 2 retries."""
    return {"MLFLOW_HTTP_REQUEST_TIMEOUT": str(max(1, math.ceil(timeout_s()))),
            "MLFLOW_HTTP_REQUEST_MAX_RETRIES": str(MLFLOW_RETRIES)}


def set_default_env(values: dict[str, str]) -> None:
    """``values`` in ``os.environ`` for the rest of the process, each only where the user set none."""
    for key, value in values.items():
        os.environ.setdefault(key, value)


def check_mlflow(uri: str) -> None:
    """The MLflow tracking server (or database) of ``MLFLOW_TRACKING_URI`` answers within ``T``;
    local stores (a path, ``file:``, ``sqlite:``) and ``databricks`` (MLflow's own HTTP bound) pass."""
    parts = urlsplit(uri)
    scheme = parts.scheme.lower().split("+", 1)[0]
    hint = "Start the server, correct MLFLOW_TRACKING_URI, or unset it to keep the run's metrics in RUN/mlflow.db."
    if scheme in ("http", "https"):
        check("The MLflow tracking server", shown(uri), "MLFLOW_TRACKING_URI", lambda: url_answers(uri), hint)
    elif scheme in ("postgresql", "mysql", "mssql") and parts.hostname:
        check("The MLflow database", parts.netloc.rpartition("@")[2], "MLFLOW_TRACKING_URI",
              lambda: connects(parts.hostname, _port(parts, scheme)), hint)


def shown(url: str) -> str:
    """``url`` as an error may print it: without a user, password or query (which may hold a token)."""
    parts = urlsplit(url)
    return parts._replace(netloc=parts.netloc.rpartition("@")[2], query="", fragment="").geturl()
