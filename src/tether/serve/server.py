"""Run the app with uvicorn: in the foreground (``tether serve``) or in a background thread.

uvicorn handles SIGINT/SIGTERM in the foreground: it stops accepting connections, lets open
requests finish (up to ``shutdown_timeout`` seconds), then runs the app's shutdown, which
drains the batcher. :class:`ServerThread` serves on an already-bound socket, so tests and the
load test get a free port on 127.0.0.1 with no race.
"""

from __future__ import annotations

import socket
import threading
import time


def _config(app, host: str, port: int, log_level: str, shutdown_timeout: float | None, access_log: bool = False):
    import uvicorn

    return uvicorn.Config(app, host=host, port=port, log_level=log_level, access_log=access_log,
                          timeout_graceful_shutdown=shutdown_timeout, lifespan="on")


def serve(app, host: str = "127.0.0.1", port: int = 8000, log_level: str = "info",
          shutdown_timeout: float | None = 30.0, access_log: bool = True) -> None:
    """Serve until SIGINT/SIGTERM, then shut down gracefully."""
    import uvicorn

    uvicorn.Server(_config(app, host, port, log_level, shutdown_timeout, access_log)).run()


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
