"""The listener: accepts connections on one event loop and hands decoded requests to the handlers.

Measured choice (see bench/): one asyncio event loop per broker process, driving non-blocking
sockets directly with add_reader/add_writer rather than asyncio transports, so the receive
buffers are ours (Produce payloads stay in place) and Fetch can hand segment ranges to sendfile.
"""
from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Callable
from typing import Any

from .connection import Connection

log = logging.getLogger(__name__)

Dispatch = Callable[[Any, Any, Connection], Any]


class NetworkServer:
    def __init__(self, host: str, port: int, dispatch: Dispatch, *, max_request_bytes: int = 104857600,
                 send_buffer_bytes: int = 102400, receive_buffer_bytes: int = 102400,
                 idle_ms: int = 600000) -> None:
        self.host = host
        self.port = port
        self.dispatch = dispatch
        self.max_request_bytes = max_request_bytes
        self.send_buffer_bytes = send_buffer_bytes
        self.receive_buffer_bytes = receive_buffer_bytes
        self.idle_ms = idle_ms
        self.connections: set[Connection] = set()
        self.loop: asyncio.AbstractEventLoop = None  # type: ignore[assignment]
        self._listener: socket.socket | None = None
        self._reaper: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.port))
        sock.listen(1024)
        sock.setblocking(False)
        self.port = sock.getsockname()[1]
        self._listener = sock
        self.loop.add_reader(sock.fileno(), self._accept)
        self._reaper = asyncio.ensure_future(self._reap_idle())
        log.info("listening on %s:%d", self.host, self.port)

    def _accept(self) -> None:
        assert self._listener is not None
        for _ in range(64):
            try:
                sock, peer = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                log.warning("accept failed: %s", exc)
                return
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.send_buffer_bytes > 0:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.send_buffer_bytes)
            if self.receive_buffer_bytes > 0:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.receive_buffer_bytes)
            self.connections.add(Connection(self, sock, peer))

    def forget(self, conn: Connection) -> None:
        self.connections.discard(conn)

    async def _reap_idle(self) -> None:
        """Close connections idle for connections.max.idle.ms, as Kafka's processors do."""
        period = max(0.05, min(self.idle_ms / 1000 / 4, 30.0))
        while True:
            await asyncio.sleep(period)
            cutoff = time.monotonic() - self.idle_ms / 1000
            for conn in [c for c in self.connections if c.last_active < cutoff]:
                conn.close("idle for longer than connections.max.idle.ms")

    async def stop(self) -> None:
        if self._reaper is not None:
            self._reaper.cancel()
        if self._listener is not None:
            self.loop.remove_reader(self._listener.fileno())
            self._listener.close()
            self._listener = None
        for conn in list(self.connections):
            conn.close("broker shutting down")
