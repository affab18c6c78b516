"""One Kafka request to one broker over a plain socket, decoded with kbroker's own protocol tables: tests
that must speak to a chosen broker at a chosen API version (a client library picks both itself)."""
from __future__ import annotations

import socket
import struct
from typing import Any

from kbroker.protocol import decode_response, encode_request


def _read(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError("the broker closed the connection")
        out += chunk
    return bytes(out)


def request(bootstrap: str, api_key: int, version: int, body: dict, timeout: float = 60.0) -> Any:
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout) as sock:
        sock.sendall(encode_request(api_key, version, 7, "raw-test", body))
        size = struct.unpack(">i", _read(sock, 4))[0]
        correlation, response = decode_response(api_key, version, _read(sock, size))
    assert correlation == 7
    return response


def metadata(bootstrap: str, topics: list[str] | None, version: int = 1, auto_create: bool = False) -> Any:
    """Metadata of ``topics`` (None: all) as ``bootstrap`` answers it; auto-creation as asked (v4+; before
    v4 a broker with auto.create.topics.enable always creates)."""
    body: dict = {"topics": None if topics is None else [{"name": t} for t in topics],
                  "allow_auto_topic_creation": auto_create}
    return request(bootstrap, 3, version, body)
