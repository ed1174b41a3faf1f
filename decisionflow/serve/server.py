"""Running the app under uvicorn: bind first (so port 0 picks a free port we can name), then serve.

On SIGTERM or Ctrl-C uvicorn stops accepting connections, lets the requests it has accepted finish
(up to `graceful_shutdown_s`), and only then shuts the app down: the micro-batcher finishes whatever
is still queued before the model thread is released.

uvicorn is configured from the app's `ServeSettings`: at most `limit_concurrency` connections and
requests at once (a plain 503 beyond), no `Server` header, uvicorn's access log off (the app writes its
own JSON line per request, see `logs`), and the `decisionflow.serve` logger on stderr at `log_level`.
"""

from __future__ import annotations

import socket
import threading
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import uvicorn
from uvicorn.config import LOGGING_CONFIG

from .logs import log_config
from .settings import ServeSettings


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


def settings_of(app: Any) -> ServeSettings:
    """The settings `create_app` gave `app` (defaults for another app)."""
    service = getattr(getattr(app, "state", None), "service", None)
    settings = getattr(service, "settings", None)
    return settings if isinstance(settings, ServeSettings) else ServeSettings()


def server_for(app: Any, *, log_level: str = "info", on_started: Callable[[], None] | None = None) -> Server:
    settings = settings_of(app)
    config = uvicorn.Config(
        app, log_level=log_level, log_config=log_config(log_level, LOGGING_CONFIG),
        timeout_graceful_shutdown=settings.graceful_shutdown_s,
        lifespan="on", access_log=False, server_header=False, limit_concurrency=settings.limit_concurrency,
    )
    return Server(config, on_started)


def serve(app: Any, sock: socket.socket, *, log_level: str = "info", on_started: Callable[[], None] | None = None) -> None:
    """Serve `app` on `sock` until SIGTERM/SIGINT (in the main thread) or until the server is told to stop; how
    long accepted requests get to finish is the app's `ServeSettings.graceful_shutdown_s`."""
    server_for(app, log_level=log_level, on_started=on_started).run(sockets=[sock])


@contextmanager
def serving_in_thread(app: Any, host: str = "127.0.0.1", *, log_level: str = "warning") -> Iterator[int]:
    """Serve `app` on a free port of `host` from a thread of this process; yield the port, then stop
    gracefully (what `decisionflow bench` measures the Chat Completions route through)."""
    sock = bind(host, 0)
    started = threading.Event()
    server = server_for(app, log_level=log_level, on_started=started.set)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True, name="decisionflow-server")
    thread.start()
    try:
        if not started.wait(120):
            raise RuntimeError("the server did not start within 120 s")
        yield sock.getsockname()[1]
    finally:
        server.should_exit = True
        thread.join(60)
        sock.close()
