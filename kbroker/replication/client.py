"""An asynchronous Kafka-protocol connection from this broker to another, one request at a time
(a fetcher sends its next Fetch only after the previous answer, as Kafka's replica fetchers do)."""
from __future__ import annotations

import asyncio
import struct
from dataclasses import dataclass, field
from typing import Any

from kbroker.protocol import decode_response, encode_request

_SIZE = struct.Struct(">i")


@dataclass(eq=False)  # one connection each: compared by identity
class BrokerConnection:
    host: str
    port: int
    client_id: str
    timeout_s: float
    _reader: asyncio.StreamReader | None = field(default=None, init=False, repr=False)
    _writer: asyncio.StreamWriter | None = field(default=None, init=False, repr=False)
    _correlation: int = field(default=0, init=False, repr=False)

    @property
    def connected(self) -> bool:
        return self._writer is not None and not self._writer.is_closing()

    async def connect(self) -> None:
        self._reader, self._writer = await asyncio.wait_for(
            asyncio.open_connection(self.host, self.port, limit=1 << 20), self.timeout_s)

    async def request(self, api_key: int, version: int, body: Any) -> Any:
        """Send one request and return the decoded response body. Raises OSError (and
        asyncio.TimeoutError) on any network trouble, after closing the connection."""
        if not self.connected:
            await self.connect()
        assert self._reader is not None and self._writer is not None
        self._correlation = (self._correlation + 1) & 0x7FFFFFFF
        correlation = self._correlation
        try:
            # One deadline for the whole exchange, without a task per step: asyncio.wait_for wraps
            # each await in a new task (Python 3.11), which costs a follower a loop iteration and
            # a timer per step on the replication path (send, drain, size, frame).
            async with asyncio.timeout(self.timeout_s):
                self._writer.write(bytes(encode_request(api_key, version, correlation, self.client_id, body)))
                await self._writer.drain()
                size = _SIZE.unpack(await self._reader.readexactly(4))[0]
                frame = await self._reader.readexactly(size)
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
