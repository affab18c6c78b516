"""Found by the chaos harness (net faults, leader moves): an inter-broker request whose connection was closed by
another task mid-exchange died with AttributeError ('NoneType' object has no attribute 'readexactly') instead of
the OSError every caller handles as a broken connection."""
from __future__ import annotations

import asyncio

import pytest

from kbroker.replication.client import BrokerConnection


async def _closed_while_sending() -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # never answers
        writer.close()
    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        connection = BrokerConnection("127.0.0.1", port, "broker-1-fetcher-2", timeout_s=10)
        await connection.connect()
        assert connection._writer is not None
        real_drain = connection._writer.drain

        async def drain_then_closed_by_another_task() -> None:
            await real_drain()
            connection.close()  # e.g. the fetcher being stopped while this request is in flight
        connection._writer.drain = drain_then_closed_by_another_task  # type: ignore[method-assign]
        with pytest.raises(OSError):
            await connection.request(18, 0, {})  # ApiVersions
    finally:
        server.close()
        await server.wait_closed()


def test_a_concurrent_close_fails_the_request_with_oserror() -> None:
    asyncio.run(_closed_while_sending())
