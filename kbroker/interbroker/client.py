"""An asynchronous Kafka-protocol connection from this broker to another, one request at a time
(a fetcher sends its next Fetch only after the previous answer, as Kafka's replica fetchers do).

Every broker-to-broker connection (replica fetchers, the controller's channel, controlled shutdown,
transaction markers) goes to the other broker's inter-broker listener, with that listener's
security: TLS with the broker's client context, and SASL authentication (SaslHandshake then
SaslAuthenticate, through ``authenticate``) before the first request. The composition root sets it
once with ``use_inter_broker_security``; a connection may carry its own."""
from __future__ import annotations

import asyncio
import socket
import ssl
import struct
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from kbroker.protocol import decode_response, encode_request

_SIZE = struct.Struct(">i")

Request = Callable[[int, int, Any], Awaitable[Any]]


@dataclass(frozen=True)
class ClientSecurity:
    """How this broker connects to the inter-broker listener: PLAINTEXT when all is None."""
    ssl_context: ssl.SSLContext | None = None
    check_hostname: bool = False
    # SASL: given ``request(api_key, version, body)``, authenticate the connection (raise on failure)
    authenticate: Callable[[Request], Awaitable[Any]] | None = None
    protocol: str = "PLAINTEXT"


_inter_broker = ClientSecurity()


def use_inter_broker_security(security: ClientSecurity) -> None:
    global _inter_broker
    _inter_broker = security


FIRST_BUFFER_BYTES = 64 * 1024


class _Responses(asyncio.BufferedProtocol):
    """Response frames read straight into one buffer of the connection's (no StreamReader copy, no new bytes
    object per frame): a follower's Fetch answers carry their records as views into it, which it appends to its
    log before asking again. The buffer is used again once nothing holds a view into it (a caller that kept
    records gets a fresh one for the next answer); it grows to the largest answer seen and stays that size,
    so a megabyte of records does not land in freshly allocated pages each time."""

    def __init__(self) -> None:
        self._buf = bytearray(FIRST_BUFFER_BYTES)
        self._view = memoryview(self._buf)
        self._have = 0           # bytes of the current frame received (size prefix included)
        self._size = -1          # the current frame's size once its prefix is in
        self._waiter: asyncio.Future[memoryview] | None = None
        self._lost: BaseException | None = None
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # a stream transport (TCP or TLS)

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = exc or ConnectionResetError("connection closed by the peer")
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(self._lost)

    def expect(self) -> asyncio.Future[memoryview]:
        """The next response frame (without its size prefix), as a view valid until the next ``expect``."""
        if self._lost is not None:
            raise ConnectionResetError(f"connection closed: {self._lost!r}")
        if self._have:
            raise ConnectionError("the peer sent bytes no request asked for")
        self._waiter = None  # it holds the last frame
        # Each frame is a view of its own (its own managed buffer, one reference to the bytearray, shared by
        # every slice of it): 3 references are this attribute, ``_view``'s and getrefcount's argument; more
        # means views into an earlier answer are still held
        if sys.getrefcount(self._buf) > 3:
            self._renew(len(self._buf))
        self._size = -1
        self._waiter = asyncio.get_running_loop().create_future()
        return self._waiter

    def _renew(self, size: int) -> None:
        old, have = self._view, self._have
        self._buf = bytearray(size)
        self._view = memoryview(self._buf)
        self._view[:have] = old[:have]

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._have == len(self._buf):  # full: the frame is larger (its size is known by now)
            self._renew(max(2 * len(self._buf), 4 + self._size))
        return self._view[self._have:]

    def buffer_updated(self, nbytes: int) -> None:
        self._have += nbytes
        if self._size < 0 and self._have >= 4:
            self._size = _SIZE.unpack_from(self._buf)[0]
            if self._size < 0:
                self._fail(ConnectionError(f"a response frame of {self._size} bytes"))
                return
            if 4 + self._size > len(self._buf):
                self._renew(4 + self._size)
        if self._size >= 0 and self._have >= 4 + self._size:
            if self._have > 4 + self._size or self._waiter is None or self._waiter.done():
                self._fail(ConnectionError("the peer sent bytes no request asked for"))
                return
            self._have = 0
            self._waiter.set_result(memoryview(self._buf)[4:4 + self._size])

    def _fail(self, exc: Exception) -> None:
        self._lost = exc
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(exc)
        if self.transport is not None:
            self.transport.close()

    def eof_received(self) -> bool | None:
        return False  # close the transport: connection_lost fails the waiter


@dataclass(eq=False)  # one connection each: compared by identity
class BrokerConnection:
    host: str
    port: int
    client_id: str
    timeout_s: float
    security: ClientSecurity | None = None  # None: the inter-broker listener's
    _transport: asyncio.Transport | None = field(default=None, init=False, repr=False)
    _responses: _Responses | None = field(default=None, init=False, repr=False)
    _correlation: int = field(default=0, init=False, repr=False)
    # callers sharing the connection (the transaction coordinator's markers to one leader) take turns: one
    # response is read at a time, and the broker answers one request at a time anyway
    _turn: asyncio.Lock = field(default_factory=asyncio.Lock, init=False, repr=False)

    @property
    def connected(self) -> bool:
        return self._transport is not None and not self._transport.is_closing()

    def socket(self) -> socket.socket | None:
        return None if self._transport is None else self._transport.get_extra_info("socket")

    async def connect(self) -> None:
        security = self.security or _inter_broker
        context = security.ssl_context
        loop = asyncio.get_running_loop()
        try:
            if context is None:
                transport, protocol = await asyncio.wait_for(
                    loop.create_connection(_Responses, self.host, self.port), self.timeout_s)
            else:
                transport, protocol = await asyncio.wait_for(loop.create_connection(
                    _Responses, self.host, self.port, ssl=context,
                    server_hostname=self.host if security.check_hostname else "",
                    ssl_handshake_timeout=self.timeout_s), self.timeout_s)
        except ssl.SSLError as exc:
            raise OSError(f"{self.host}:{self.port}: TLS handshake failed: {exc.reason or exc}") from None
        except TimeoutError:
            raise OSError(f"{self.host}:{self.port}: no connection within {self.timeout_s}s") from None
        self._transport, self._responses = transport, protocol  # asyncio sets TCP_NODELAY on TCP transports
        if security.authenticate is not None:
            try:
                await security.authenticate(self._exchange)
            except OSError:
                self.close()
                raise
            except Exception as exc:
                self.close()
                raise OSError(f"{self.host}:{self.port}: SASL authentication failed: {exc}") from None

    async def request(self, api_key: int, version: int, body: Any) -> Any:
        """Send one request and return the decoded response body. Raises OSError (and
        asyncio.TimeoutError) on any network trouble, after closing the connection."""
        async with self._turn:
            if not self.connected:
                await self.connect()
            return await self._exchange(api_key, version, body)

    async def _exchange(self, api_key: int, version: int, body: Any) -> Any:
        # this exchange's own transport and reader: a concurrent close() (a fetcher stopped, a leader moved)
        # clears the attributes, and must make this exchange fail with OSError like any broken connection
        transport, responses = self._transport, self._responses
        if transport is None or responses is None or transport.is_closing():
            raise OSError(f"{self.host}:{self.port}: connection closed")
        self._correlation = (self._correlation + 1) & 0x7FFFFFFF
        correlation = self._correlation
        try:
            answer = responses.expect()
            transport.write(encode_request(api_key, version, correlation, self.client_id, body))
            # One deadline for the exchange, without a task of its own (asyncio.wait_for wraps the await in a
            # new task on Python 3.11, a turn of the loop on the replication path).
            async with asyncio.timeout(self.timeout_s):
                frame = await answer
        except (TimeoutError, ConnectionError) as exc:
            self.close()
            raise OSError(f"{self.host}:{self.port}: {exc!r}") from None
        except OSError:
            self.close()
            raise
        got, body = decode_response(api_key, version, frame)
        if got != correlation:
            self.close()
            raise OSError(f"{self.host}:{self.port}: correlation id {got}, expected {correlation}")
        return body

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()
        self._transport = self._responses = None
