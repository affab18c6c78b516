"""One request at a time on every kind of listener (PLAINTEXT, SSL, SASL_SSL), as Kafka's SocketServer serves a
connection: a Produce pipelined behind a long-poll Fetch of the same partition on one connection is handled only
once the Fetch has answered, so the Fetch waits its whole max_wait_ms and returns nothing. Before, kbroker
handled the Produce at once and its records ended the Fetch early: the later request decided the earlier one."""
from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterator
from typing import Any

import pytest

from bench.reliability.abuse import fetch_body, produce_body
from kbroker.log.batches import build_batch
from kbroker.protocol import decode_response, encode_request
from kbroker.tools.client import AdminClient
from tests.integration.conftest import free_port
from tests.security.conftest import TlsBroker, client_ssl_context, run_broker
from tests.security.pki import Pki
from tests.security.sasl_helpers import JAAS

MAX_WAIT_MS = 1500


@pytest.fixture(scope="module")
def broker(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsBroker]:
    b = TlsBroker(tmp_path_factory.mktemp("one-at-a-time-listeners"), pki)
    b.sasl_ssl_port = free_port()  # type: ignore[attr-defined]
    b.overrides.update({
        "listeners": f"PLAINTEXT://{b.host}:{b.port},SSL://{b.host}:{b.ssl_port},"
                     f"SASL_SSL://{b.host}:{b.sasl_ssl_port}",  # type: ignore[attr-defined]
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": JAAS})
    yield from run_broker(b)  # type: ignore[misc]


class Conn:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.corr = 0

    def send(self, *requests: tuple[int, int, dict]) -> list[int]:
        frames, ids = [], []
        for api_key, version, body in requests:
            self.corr += 1
            frames.append(bytes(encode_request(api_key, version, self.corr, "one-at-a-time", body)))
            ids.append(self.corr)
        self.sock.sendall(b"".join(frames))
        return ids

    def answer(self, api_key: int, version: int, corr: int) -> Any:
        got, body = decode_response(api_key, version, self._exactly(struct.unpack(">i", self._exactly(4))[0]))
        assert got == corr
        return body

    def _exactly(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            more = self.sock.recv(n - len(out))
            assert more, "the broker closed the connection"
            out += more
        return bytes(out)


def connect(broker: TlsBroker, pki: Pki, listener: str) -> Conn:
    port = {"PLAINTEXT": broker.port, "SSL": broker.ssl_port,
            "SASL_SSL": broker.sasl_ssl_port}[listener]  # type: ignore[attr-defined]
    sock = socket.create_connection((broker.host, port), timeout=30)
    if listener != "PLAINTEXT":
        sock = client_ssl_context(pki).wrap_socket(sock, server_hostname="localhost")
    conn = Conn(sock)
    if listener == "SASL_SSL":
        (corr,) = conn.send((17, 1, {"mechanism": "PLAIN"}))
        assert conn.answer(17, 1, corr).error_code == 0
        (corr,) = conn.send((36, 1, {"auth_bytes": b"\0alice\0alice-secret"}))
        assert conn.answer(36, 1, corr).error_code == 0
    return conn


@pytest.mark.parametrize("listener", ["PLAINTEXT", "SSL", "SASL_SSL"])
def test_a_produce_behind_a_long_poll_on_one_connection_waits_for_it(broker: TlsBroker, pki: Pki,
                                                                       listener: str) -> None:
    topic = f"behind-{listener.lower()}"
    with AdminClient(broker.bootstrap) as admin:
        admin.create_topics([{"name": topic, "num_partitions": 1, "replication_factor": 1, "configs": []}])
    conn = connect(broker, pki, listener)
    try:
        records = bytes(build_batch([(None, b"late", int(time.time() * 1000))]))
        started = time.monotonic()
        fetch_id, produce_id = conn.send((1, 11, fetch_body(0, topic=topic, max_wait_ms=MAX_WAIT_MS, min_bytes=1)),
                                         (0, 7, produce_body(records, acks=1, topic=topic)))
        fetched = conn.answer(1, 11, fetch_id).responses[0].partitions[0]
        waited = time.monotonic() - started
        produced = conn.answer(0, 7, produce_id).responses[0].partition_responses[0]
        assert produced.error_code == 0 and produced.base_offset == 0
        assert fetched.error_code == 0 and fetched.high_watermark == 0 and not fetched.records, \
            "the Produce behind the Fetch was handled while the Fetch waited"
        assert waited >= MAX_WAIT_MS / 1000 * 0.9
    finally:
        conn.sock.close()
