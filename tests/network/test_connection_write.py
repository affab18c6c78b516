"""The connection's writer: responses leave in request order and byte-exact, whatever mix of bytes
and segment file ranges they carry (small ranges are copied into a sendmsg, large ones go by
sendfile) and however the socket cuts the sends short."""
from __future__ import annotations

import asyncio
import os
import socket
import threading

import pytest

from kbroker.log.segment import FileSlice
from kbroker.network.connection import Connection
from kbroker.network.responses import COPY_RANGE_BYTES, ResponseSlot
from tests.network.loopback import connection_on_loopback


@pytest.fixture
def pair():
    """A Connection on the accepted end of a loopback TCP socket with a tiny send buffer (so sends
    are cut short and the writer must wait for writability), and the client end."""
    forgotten: list[Connection] = []
    with connection_on_loopback(forget=forgotten.append, server_send_buffer=4096) as (loop, conn, client, _):
        yield loop, conn, client, forgotten


def drain(client: socket.socket, want: int, got: bytearray) -> threading.Thread:
    def run() -> None:
        while len(got) < want:
            data = client.recv(65536)
            if not data:
                return
            got.extend(data)
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def run_until_sent(loop, conn, reader: threading.Thread, timeout: float = 10.0) -> None:
    async def wait() -> None:
        while (conn._out or conn._slots) and not conn.closed:
            await asyncio.sleep(0.001)
    loop.run_until_complete(asyncio.wait_for(wait(), timeout))
    reader.join(timeout)


def test_mixed_chunks_arrive_in_order_and_exact(pair, tmp_path):
    loop, conn, client, _ = pair
    content = os.urandom(600_000)
    path = tmp_path / "segment.log"
    path.write_bytes(content)
    fd = os.open(path, os.O_RDONLY)
    small = COPY_RANGE_BYTES // 2
    try:
        responses = [
            [b"head-1", FileSlice(fd, 10, small), b"tail-1"],                      # copied, one sendmsg
            [b"head-2", FileSlice(fd, 1000, 300_000), b"tail-2"],                  # sendfile
            [b"only-bytes" * 5000],
            [b"h", FileSlice(fd, 0, 1), FileSlice(fd, 500_000, 100_000), b"t"],    # both kinds together
        ]
        expected = b"".join(c if isinstance(c, bytes) else content[c.position:c.position + c.length]
                            for chunks in responses for c in chunks)
        slots = [ResponseSlot(1, 12, i) for i in range(len(responses))]
        conn._slots.extend(slots)
        got = bytearray()
        reader = drain(client, len(expected), got)
        for i in (2, 0, 3, 1):  # handlers finish out of order; responses still leave in order
            conn._fill(slots[i], responses[i])
        run_until_sent(loop, conn, reader)
        assert not conn.closed
        assert bytes(got) == expected
    finally:
        os.close(fd)


def test_a_small_range_beyond_the_file_end_closes_the_connection(pair, tmp_path):
    loop, conn, client, forgotten = pair
    path = tmp_path / "short.log"
    path.write_bytes(b"x" * 100)
    fd = os.open(path, os.O_RDONLY)
    try:
        slot = ResponseSlot(1, 12, 7)
        conn._slots.append(slot)
        conn._fill(slot, [b"head", FileSlice(fd, 50, 100), b"tail"])
        assert conn.closed and forgotten == [conn]
    finally:
        os.close(fd)
