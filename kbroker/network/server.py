"""The listener: accepts connections on one event loop and hands decoded requests to the handlers.

Measured choice (see bench/): one asyncio event loop per broker process, driving non-blocking
sockets directly with add_reader/add_writer rather than asyncio transports, so the receive
buffers are ours (Produce payloads stay in place) and Fetch can hand segment ranges to sendfile.
"""
from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import time
from collections.abc import Callable
from typing import Any

from kbroker.security.principal import ANONYMOUS, KafkaPrincipal

from .connection import Connection, FrameInterceptor

log = logging.getLogger(__name__)

Dispatch = Callable[[Any, Any, Connection], Any]
# a TLS client's certificate (DER, None without one) -> its principal; raises ValueError to refuse it
PrincipalOf = Callable[[bytes | None], KafkaPrincipal]
HANDSHAKE_TIMEOUT_S = 10.0  # a TLS handshake gets this long (or connections.max.idle.ms, if shorter)


class NetworkServer:
    def __init__(self, host: str, port: int, dispatch: Dispatch, *, max_request_bytes: int = 104857600,
                 send_buffer_bytes: int = 102400, receive_buffer_bytes: int = 102400,
                 idle_ms: int = 600000, listener_name: str = "PLAINTEXT", security_protocol: str = "PLAINTEXT",
                 ssl_context: ssl.SSLContext | None = None, principal_of: PrincipalOf | None = None,
                 new_authenticator: Callable[[Connection], FrameInterceptor | None] | None = None) -> None:
        self.listener_name = listener_name
        self.security_protocol = security_protocol
        self.ssl_context = ssl_context
        self.principal_of = principal_of  # SSL listeners: the certificate names the principal
        self.handshake_timeout_s = min(HANDSHAKE_TIMEOUT_S, idle_ms / 1000)
        self.new_authenticator = new_authenticator  # SASL listeners: each connection's authenticator
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
        log.info("listening on %s:%d (listener %s, %s)", self.host, self.port, self.listener_name,
                 self.security_protocol)

    def on_handshake(self, conn: Connection) -> str | None:
        """A TLS handshake finished: an SSL listener's client is who its certificate says (SASL_SSL
        ones authenticate later). Returns why the client is refused, or None."""
        if self.principal_of is None or conn.tls is None:
            return None
        try:
            der = conn.tls.getpeercert(binary_form=True)
            conn.session.principal = self.principal_of(der)
        except ValueError as exc:
            return f"no principal for its certificate: {exc}"
        if conn.session.principal != ANONYMOUS:
            log.info("TLS client %s on listener %s is %s", conn.describe_peer(), self.listener_name,
                     conn.session.principal)
        return None

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
