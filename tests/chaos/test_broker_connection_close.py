"""Found by the chaos harness (net faults, leader moves): an inter-broker request whose connection was closed by
another task mid-exchange died with AttributeError ('NoneType' object has no attribute 'readexactly') instead of
the OSError every caller handles as a broken connection."""
from __future__ import annotations

import asyncio

import pytest

from kbroker.interbroker.client import BrokerConnection


async def _closed_while_sending() -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # never answers
        writer.close()
    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        connection = BrokerConnection("127.0.0.1", port, "broker-1-fetcher-2", timeout_s=10)
        await connection.connect()
        # e.g. the fetcher being stopped while this request is in flight
        asyncio.get_running_loop().call_later(0.2, connection.close)
        with pytest.raises(OSError):
            await connection.request(18, 0, {})  # ApiVersions
        with pytest.raises(OSError):  # and one sent after the close: connect again, then no answer in time
            connection.timeout_s = 0.5
            await connection.request(18, 0, {})
    finally:
        server.close()
        await server.wait_closed()


def test_a_concurrent_close_fails_the_request_with_oserror() -> None:
    asyncio.run(_closed_while_sending())
