"""Running the app under uvicorn: bind first (so port 0 picks a free port we can name), then serve.

On SIGTERM or Ctrl-C uvicorn stops accepting connections, lets the requests it has accepted finish
(up to `graceful_shutdown_s`), and only then shuts the app down: the micro-batcher finishes whatever
is still queued before the model thread is released.
"""

from __future__ import annotations

import socket
from typing import Any, Callable

import uvicorn


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on (host, port); port 0 takes a free one (read it back with `getsockname`)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


class Server(uvicorn.Server):
    """uvicorn's server, telling `on_started` once the app has started and the socket accepts requests."""

    def __init__(self, config: uvicorn.Config, on_started: Callable[[], None] | None = None) -> None:
        super().__init__(config)
        self._on_started = on_started

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if self.started and self._on_started is not None:
            self._on_started()


def server_for(app: Any, *, graceful_shutdown_s: float = 30.0, log_level: str = "info",
               on_started: Callable[[], None] | None = None) -> Server:
    config = uvicorn.Config(
        app, log_level=log_level, timeout_graceful_shutdown=graceful_shutdown_s, lifespan="on", access_log=False,
    )
    return Server(config, on_started)


def serve(app: Any, sock: socket.socket, *, graceful_shutdown_s: float = 30.0, log_level: str = "info",
          on_started: Callable[[], None] | None = None) -> None:
    """Serve `app` on `sock` until SIGTERM/SIGINT (in the main thread) or until the server is told to stop."""
    server_for(app, graceful_shutdown_s=graceful_shutdown_s, log_level=log_level, on_started=on_started).run(sockets=[sock])
