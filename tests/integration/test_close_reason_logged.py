"""A connection the broker closes for a request it cannot serve leaves a line in the broker log
saying why (at INFO, as Kafka's SocketServer reports it): the client only sees the socket close."""
from __future__ import annotations

import socket
import struct
import time

from tests.integration.conftest import BrokerProcess


def _send_and_wait_close(broker: BrokerProcess, api_key: int, version: int, body: bytes = b"") -> None:
    client_id = b"close-test"
    header = struct.pack(">hhih", api_key, version, 4242, len(client_id)) + client_id
    frame = header + body
    with socket.create_connection((broker.host, broker.port), timeout=10) as sock:
        sock.sendall(struct.pack(">i", len(frame)) + frame)
        assert sock.recv(4) == b""  # closed without an answer


def _wait_for_line(broker: BrokerProcess, *needles: str) -> str:
    deadline = time.monotonic() + 10
    while True:
        lines = [line for line in broker.log().splitlines() if all(n in line for n in needles)]
        if lines:
            return lines[-1]
        assert time.monotonic() < deadline, f"no log line with {needles}:\n{broker.log()[-3000:]}"
        time.sleep(0.05)


def test_unsupported_version_is_logged_with_the_api_and_version(module_broker: BrokerProcess):
    _send_and_wait_close(module_broker, 3, 99)  # Metadata v99
    line = _wait_for_line(module_broker, "Metadata v99 is not supported")
    assert " INFO " in line and "closing the connection from /127.0.0.1:" in line


def test_unknown_api_key_is_logged(module_broker: BrokerProcess):
    _send_and_wait_close(module_broker, 999, 0)
    line = _wait_for_line(module_broker, "unknown api key 999")
    assert " INFO " in line and "closing the connection from /127.0.0.1:" in line


def test_malformed_body_is_logged(module_broker: BrokerProcess):
    # Metadata v1: a topics array claiming 1000 entries in a body of four bytes
    _send_and_wait_close(module_broker, 3, 1, struct.pack(">i", 1000))
    line = _wait_for_line(module_broker, "closing the connection from /127.0.0.1:", "malformed")
    assert " INFO " in line
