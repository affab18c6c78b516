"""A connected loopback TCP pair for tests that drive a Connection by hand."""
from __future__ import annotations

import socket


def accepted_pair() -> tuple[socket.socket, socket.socket, tuple]:
    """(the accepted server end, non-blocking; the client end; the client's address)."""
    listener = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(listener.getsockname())
    server_sock, peer = listener.accept()
    listener.close()
    server_sock.setblocking(False)
    return server_sock, client, peer
