"""Run the app with uvicorn: in the foreground (``tether serve``) or in a background thread.

uvicorn handles SIGINT/SIGTERM in the foreground: it stops accepting connections, lets open
requests finish (up to ``shutdown_timeout`` seconds), then runs the app's shutdown, which
drains the batcher. :class:`ServerThread` serves on an already-bound socket, so tests and the
load test get a free port on 127.0.0.1 with no race. ``tether serve`` binds its socket with
:func:`bind_socket` before loading the models, so a busy port or a bad host is a one-line
error at once, and hands it to :func:`serve`.
"""

from __future__ import annotations

import errno
import socket
import threading
import time

from tether.common.errors import ConfigError

BACKLOG = 2048  # uvicorn's default


def _shown(text: object) -> str:
    text = str(text)
    return text if text.isprintable() else repr(text)[1:-1]


def _address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _bind_error(host: str, port: int, err: Exception) -> ConfigError:
    addr = _shown(_address(host, port))
    reason = " ".join(str(getattr(err, "strerror", None) or err).split())
    code = getattr(err, "errno", None)
    if isinstance(err, (socket.gaierror, ValueError)):  # UnicodeError (IDNA) is a ValueError
        return ConfigError(
            f"--host '{_shown(host)}' cannot be resolved to an address of this machine ({reason}); expected an "
            "IP address such as 127.0.0.1 (this machine only) or 0.0.0.0 (every interface), or a host name of "
            "this machine (IPv6 addresses without brackets, e.g. ::1)."
        )
    if code == errno.EADDRINUSE:
        return ConfigError(
            f"--port {port}: {addr} is already in use (another server is listening there); stop it, or choose "
            "another --port (0 picks a free one)."
        )
    if code == errno.EACCES:
        why = "ports below 1024 need root" if 0 < port < 1024 else reason
        return ConfigError(f"--port {port}: permission denied binding {addr} ({why}); choose another --port, "
                           "e.g. 8000.")
    if code == errno.EADDRNOTAVAIL:
        return ConfigError(
            f"--host '{_shown(host)}': cannot bind {addr} ({reason}): it is not an address of this machine; "
            "expected 127.0.0.1, 0.0.0.0 or the address of one of its network interfaces."
        )
    return ConfigError(f"--host '{_shown(host)}' --port {port}: cannot bind {addr} ({reason}).")


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (port 0: a free one), as uvicorn would bind it.

    Raises :class:`ConfigError` naming ``--host``/``--port`` when the port is out of range, in
    use or privileged, or the host cannot be resolved or is not an address of this machine.
    Listening at once reserves the port: connections wait in the backlog until the server runs.
    """
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ConfigError(f"--port must be a TCP port from 0 to 65535 (0 picks a free port), got {port}.")
    if not isinstance(host, str) or not host.strip():
        raise ConfigError(f"--host is empty ({host!r}); expected an interface address such as 127.0.0.1 "
                          "(this machine only) or 0.0.0.0 (every interface).")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET  # as uvicorn decides
    try:
        sock = socket.socket(family, socket.SOCK_STREAM)
    except OSError as err:
        raise _bind_error(host, port, err) from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(BACKLOG)
    except (OSError, ValueError, OverflowError) as err:  # gaierror is an OSError, UnicodeError a ValueError
        sock.close()
        raise _bind_error(host, port, err) from None
    return sock


def _config(app, host: str, port: int, log_level: str, shutdown_timeout: float | None, access_log: bool = False):
    import uvicorn

    return uvicorn.Config(app, host=host, port=port, log_level=log_level, access_log=access_log,
                          timeout_graceful_shutdown=shutdown_timeout, lifespan="on")


def _server_class():
    import uvicorn

    class Server(uvicorn.Server):
        """uvicorn's server, which logs 'Uvicorn running on ...' for a passed-in socket too."""

        async def startup(self, sockets=None) -> None:
            await super().startup(sockets=sockets)
            log_started = getattr(self, "_log_started_message", None)
            if sockets and self.started and callable(log_started):
                log_started(sockets)

    return Server


def serve(app, host: str = "127.0.0.1", port: int = 8000, log_level: str = "info",
          shutdown_timeout: float | None = 30.0, access_log: bool = True,
          sock: socket.socket | None = None) -> None:
    """Serve until SIGINT/SIGTERM, then shut down gracefully.

    ``sock``: a listening socket from :func:`bind_socket` (``host`` is then only shown in logs);
    without one, ``host:port`` is bound here first (a :class:`ConfigError` if it cannot be).
    """
    own = sock is None
    if own:
        sock = bind_socket(host, port)
    try:
        bound_port = sock.getsockname()[1]
        config = _config(app, host, bound_port, log_level, shutdown_timeout, access_log)
        _server_class()(config).run(sockets=[sock])
    finally:
        if own:
            sock.close()


class ServerThread:
    """``with ServerThread(app) as server: httpx.get(server.url + "/health")`` on 127.0.0.1."""

    def __init__(self, app, host: str = "127.0.0.1", port: int = 0, log_level: str = "warning",
                 shutdown_timeout: float | None = 10.0):
        import uvicorn

        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((host, port))
        self.host, self.port = self.sock.getsockname()[:2]
        self.server = uvicorn.Server(_config(app, self.host, self.port, log_level, shutdown_timeout))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]},
                                       name="tether-server", daemon=True)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, timeout: float = 30.0) -> "ServerThread":
        self.thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the server on {self.url} did not start")
            time.sleep(0.01)
        return self

    def stop(self, timeout: float = 30.0) -> None:
        self.server.should_exit = True
        self.thread.join(timeout)
        self.sock.close()

    def __enter__(self) -> "ServerThread":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
