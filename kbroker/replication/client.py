"""An asynchronous Kafka-protocol connection from this broker to another, one request at a time
(a fetcher sends its next Fetch only after the previous answer, as Kafka's replica fetchers do).

Every broker-to-broker connection (replica fetchers, the controller's channel, controlled shutdown,
transaction markers) goes to the other broker's inter-broker listener, with that listener's
security: TLS with the broker's client context, and SASL authentication (SaslHandshake then
SaslAuthenticate, through ``authenticate``) before the first request. The composition root sets it
once with ``use_inter_broker_security``; a connection may carry its own."""
from __future__ import annotations

import asyncio
import ssl
import struct
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


@dataclass(eq=False)  # one connection each: compared by identity
class BrokerConnection:
    host: str
    port: int
    client_id: str
    timeout_s: float
    security: ClientSecurity | None = None  # None: the inter-broker listener's
    _reader: asyncio.StreamReader | None = field(default=None, init=False, repr=False)
    _writer: asyncio.StreamWriter | None = field(default=None, init=False, repr=False)
    _correlation: int = field(default=0, init=False, repr=False)
    # callers sharing the connection (the transaction coordinator's markers to one leader) take turns: the
    # reader serves one waiter, and the broker answers one request at a time anyway
    _turn: asyncio.Lock = field(default_factory=asyncio.Lock, init=False, repr=False)

    @property
    def connected(self) -> bool:
        return self._writer is not None and not self._writer.is_closing()

    async def connect(self) -> None:
        security = self.security or _inter_broker
        context = security.ssl_context
        try:
            if context is None:
                self._reader, self._writer = await asyncio.wait_for(
                    asyncio.open_connection(self.host, self.port, limit=1 << 20), self.timeout_s)
            else:
                self._reader, self._writer = await asyncio.wait_for(asyncio.open_connection(
                    self.host, self.port, limit=1 << 20, ssl=context,
                    server_hostname=self.host if security.check_hostname else "",
                    ssl_handshake_timeout=self.timeout_s), self.timeout_s)
        except ssl.SSLError as exc:
            raise OSError(f"{self.host}:{self.port}: TLS handshake failed: {exc.reason or exc}") from None
        except TimeoutError:
            raise OSError(f"{self.host}:{self.port}: no connection within {self.timeout_s}s") from None
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
        # this exchange's own stream pair: a concurrent close() (a fetcher stopped, a leader moved) clears the
        # attributes, and must make this exchange fail with OSError like any broken connection
        reader, writer = self._reader, self._writer
        if reader is None or writer is None:
            raise OSError(f"{self.host}:{self.port}: connection closed")
        self._correlation = (self._correlation + 1) & 0x7FFFFFFF
        correlation = self._correlation
        try:
            # One deadline for the whole exchange, without a task per step: asyncio.wait_for wraps
            # each await in a new task (Python 3.11), which costs a follower a loop iteration and
            # a timer per step on the replication path (send, drain, size, frame).
            async with asyncio.timeout(self.timeout_s):
                writer.write(bytes(encode_request(api_key, version, correlation, self.client_id, body)))
                await writer.drain()
                size = _SIZE.unpack(await reader.readexactly(4))[0]
                frame = await reader.readexactly(size)
        except (TimeoutError, asyncio.IncompleteReadError, ConnectionError) as exc:
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
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None
