"""A connected loopback TCP pair, and a Connection on it driven by hand, for the tests of the connection."""
from __future__ import annotations

import asyncio
import socket
import struct
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

from kbroker.network.connection import Connection


def accepted_pair() -> tuple[socket.socket, socket.socket, tuple]:
    """(the accepted server end, non-blocking; the client end; the client's address)."""
    listener = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(listener.getsockname())
    server_sock, peer = listener.accept()
    listener.close()
    server_sock.setblocking(False)
    return server_sock, client, peer


@contextmanager
def connection_on_loopback(dispatch: Callable[..., Any] | None = None,
                           forget: Callable[[Connection], None] = lambda conn: None, *,
                           server_send_buffer: int | None = None, client_receive_buffer: int | None = None,
                           **server_attributes: Any,
                           ) -> Iterator[tuple[asyncio.AbstractEventLoop, Connection, socket.socket, socket.socket]]:
    """(loop, the Connection on the accepted end, the client end, the accepted end) on a new event loop that the
    test runs itself; the server the Connection sees has ``dispatch``, ``forget`` and ``server_attributes``.
    Small buffers make sends stop short. Everything is closed afterwards."""
    loop = asyncio.new_event_loop()
    server_sock, client, peer = accepted_pair()
    if server_send_buffer is not None:
        server_sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, server_send_buffer)
    if client_receive_buffer is not None:
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, client_receive_buffer)
    server = SimpleNamespace(loop=loop, max_request_bytes=1 << 20, dispatch=dispatch, forget=forget,
                             **server_attributes)
    conn = Connection(server, server_sock, peer)
    try:
        yield loop, conn, client, server_sock
    finally:
        conn.close()
        client.close()
        loop.close()


class RecordingDispatch:
    """A server's dispatch that notes (time, correlation id) of each request it is handed and answers what
    ``answers`` holds for that correlation id, else an empty ApiVersions answer."""

    def __init__(self) -> None:
        self.dispatched: list[tuple[float, int]] = []
        self.answers: dict[int, object] = {}

    def __call__(self, header: Any, body: Any, conn: Connection) -> object:
        self.dispatched.append((time.monotonic(), header.correlation_id))
        return self.answers.get(header.correlation_id, {"error_code": 0, "api_keys": []})


def read_frame(sock: socket.socket, timeout: float = 5.0) -> bytes:
    """The body of the next size-prefixed frame on a blocking socket; EOFError when it closes first."""
    sock.settimeout(timeout)
    head = b""
    while len(head) < 4:
        more = sock.recv(4 - len(head))
        if not more:
            raise EOFError
        head += more
    size = struct.unpack(">i", head)[0]
    body = b""
    while len(body) < size:
        body += sock.recv(size - len(body))
    return body
