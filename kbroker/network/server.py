"""The listener: accepts connections on one event loop and hands decoded requests to the handlers.

Measured choice (see bench/): one asyncio event loop per broker process, driving non-blocking
sockets directly with add_reader/add_writer rather than asyncio transports, so the receive
buffers are ours (Produce payloads stay in place) and Fetch can hand segment ranges to sendfile.

Starting: ``bind`` takes the address (and learns the port when 0 was asked, which a ZooKeeper-mode broker registers)
without listening, ``listen`` then accepts. A broker binds before it registers and listens once it can answer
(kbroker/broker.py): in between a client's connect is refused (ECONNREFUSED) and retried, where a listening socket
would complete the handshake and leave the client's first request unanswered until its timeout.

Accepting: ``max.connections``/``max.connections.per.ip`` are enforced here (see limits.py). When
accept fails for want of file descriptors (EMFILE, ENFILE) the listener stays readable, so retrying
at once would spin the loop and flood the log: accepting pauses for ACCEPT_RETRY_S instead, with one
warning per ACCEPT_WARN_EVERY_S, and everyone already connected goes on being served.
"""
from __future__ import annotations

import asyncio
import errno
import logging
import resource
import socket
import ssl
import time
from collections.abc import Callable

from kbroker.metrics import BrokerMetrics
from kbroker.network.connection import Connection, FrameInterceptor
from kbroker.network.limits import ConnectionLimits
from kbroker.protocol.header import RequestHeader
from kbroker.protocol.outcome import Reply
from kbroker.protocol.schema import Struct
from kbroker.security.principal import ANONYMOUS, KafkaPrincipal

log = logging.getLogger(__name__)

Dispatch = Callable[[RequestHeader, Struct, Connection], Reply]  # a request to its handler (kbroker.handlers)
# a TLS client's certificate (DER, None without one) -> its principal; raises ValueError to refuse it
PrincipalOf = Callable[[bytes | None], KafkaPrincipal]
HANDSHAKE_TIMEOUT_S = 10.0  # a TLS handshake gets this long (or connections.max.idle.ms, if shorter)
ACCEPT_RETRY_S = 0.1        # out of file descriptors: accept again after this
ACCEPT_WARN_EVERY_S = 10.0
_OUT_OF_FDS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)
NOFILE_CEILING = 1 << 20  # the soft limit asked for when the hard one is unlimited (Linux's default nr_open)


def raise_open_files_limit() -> tuple[int, int]:
    """Raise the soft RLIMIT_NOFILE to the hard one, as the JVM does for Kafka (MaxFDLimit, on by
    default): every connection is a descriptor, and a soft limit of 1024 would refuse clients long
    before the machine runs short. Returns (before, after)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = NOFILE_CEILING if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError) as exc:
            log.info("could not raise the open-files limit from %d to %d: %s", soft, target, exc)
    return soft, resource.getrlimit(resource.RLIMIT_NOFILE)[0]


class NetworkServer:
    def __init__(self, host: str, port: int, dispatch: Dispatch, *, max_request_bytes: int = 104857600,
                 send_buffer_bytes: int = 102400, receive_buffer_bytes: int = 102400,
                 idle_ms: int = 600000, listener_name: str = "PLAINTEXT", security_protocol: str = "PLAINTEXT",
                 ssl_context: ssl.SSLContext | None = None, principal_of: PrincipalOf | None = None,
                 new_authenticator: Callable[[Connection], FrameInterceptor | None] | None = None,
                 limits: ConnectionLimits | None = None, inter_broker: bool = False,
                 metrics: BrokerMetrics | None = None) -> None:
        self.metrics = metrics  # each connection times its requests into it (None: not timed)
        self.limits = limits if limits is not None else ConnectionLimits()
        self.inter_broker = inter_broker  # let in beyond max.connections (Kafka's protected listener)
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
        self._accepting = False
        self._accept_retry: asyncio.TimerHandle | None = None
        self._warned_at = -ACCEPT_WARN_EVERY_S
        self.refused_per_ip = 0  # connections closed at once for max.connections.per.ip

    def bind(self) -> None:
        """Take the address; ``port`` is the bound one from here. Connections are refused until ``listen``."""
        before, after = raise_open_files_limit()
        if after != before:
            log.info("open-files limit raised from %d to %d (the hard limit)", before, after)
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self.host, self.port))
            sock.setblocking(False)
        except OSError:
            sock.close()
            raise
        self.port = sock.getsockname()[1]
        self._listener = sock

    def listen(self) -> None:
        """Accept connections on the bound address (on the running loop)."""
        assert self._listener is not None, "bind() first"
        self.loop = asyncio.get_running_loop()
        self._listener.listen(1024)
        self._resume_accept()
        self._reaper = asyncio.ensure_future(self._reap_idle())
        log.info("listening on %s:%d (listener %s, %s)", self.host, self.port, self.listener_name,
                 self.security_protocol)

    def on_handshake(self, conn: Connection) -> str | None:
        """A TLS handshake finished: an SSL listener's client is who its certificate says (SASL_SSL
        ones authenticate later). Returns why the client is refused, or None."""
        if self.principal_of is None or conn.tls is None:
            return None
        try:
            conn.session.principal = self.principal_of(conn.tls.peer_certificate())
        except ValueError as exc:
            return f"no principal for its certificate: {exc}"
        if conn.session.principal != ANONYMOUS:
            log.info("TLS client %s on listener %s is %s", conn.describe_peer(), self.listener_name,
                     conn.session.principal)
        return None

    def _resume_accept(self) -> None:
        self._accept_retry = None
        if self._listener is not None and not self._accepting:
            self.loop.add_reader(self._listener.fileno(), self._accept)
            self._accepting = True

    def _pause_accept(self) -> None:
        if self._listener is not None and self._accepting:
            self.loop.remove_reader(self._listener.fileno())
            self._accepting = False

    def _accept(self) -> None:
        assert self._listener is not None
        limits = self.limits
        for _ in range(64):
            if not self.inter_broker and limits.full():
                # max.connections: leave new connections in the backlog until one closes
                self._pause_accept()
                limits.wait_for_slot(self._resume_accept)
                return
            try:
                sock, peer = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                self._accept_failed(exc)
                return
            ip = peer[0] if peer else ""
            if not limits.admit(ip):
                self.refused_per_ip += 1
                log.info("rejected a connection from /%s on listener %s: the address already has the configured "
                         "maximum of %d connections (max.connections.per.ip)", ip, self.listener_name,
                         limits.limit_for(ip))
                sock.close()
                continue
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.send_buffer_bytes > 0:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.send_buffer_bytes)
            if self.receive_buffer_bytes > 0:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.receive_buffer_bytes)
            self.connections.add(Connection(self, sock, peer))

    def _accept_failed(self, exc: OSError) -> None:
        if exc.errno not in _OUT_OF_FDS:
            log.warning("accept failed on listener %s: %s", self.listener_name, exc)
            return
        now = time.monotonic()
        if now - self._warned_at >= ACCEPT_WARN_EVERY_S:
            self._warned_at = now
            log.warning("accept failed on listener %s: %s, with %d connections open; accepting again every %g s "
                        "until descriptors free up (raise the broker's open-files limit or set max.connections)",
                        self.listener_name, exc.strerror or exc, self.limits.total, ACCEPT_RETRY_S)
        self._pause_accept()
        if self._accept_retry is None:
            self._accept_retry = self.loop.call_later(ACCEPT_RETRY_S, self._resume_accept)

    def forget(self, conn: Connection) -> None:
        if conn in self.connections:
            self.connections.discard(conn)
            self.limits.release(conn.peer[0] if conn.peer else "")

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
        if self._accept_retry is not None:
            self._accept_retry.cancel()
        if self._listener is not None:
            self._pause_accept()
            self._listener.close()
            self._listener = None
        for conn in list(self.connections):
            conn.close("broker shutting down")
