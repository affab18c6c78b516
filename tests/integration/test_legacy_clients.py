"""Clients older than Kafka 0.11 against a real broker process: legacy message sets (Produce v0-2,
Fetch v0-3) over raw sockets and through pykafka 2.8, and ZooKeeper-stored offsets
(OffsetCommit/OffsetFetch v0) in the embedded store."""
from __future__ import annotations

import socket
import struct
import sys
import time
import types

import pytest

from kbroker.log import legacy
from kbroker.protocol import decode_response, encode_request
from zk_compat import layout
from zk_compat.embedded import EmbeddedServer

from .helpers import create_topic

TIMEOUT = 20.0


def import_pykafka():
    """pykafka 2.8 imports ``pkg_resources.parse_version``; setuptools >= 81 has no
    pkg_resources, so give it packaging's parse_version under that name."""
    try:
        import pkg_resources  # noqa: F401
    except ImportError:
        from packaging.version import parse

        shim = types.ModuleType("pkg_resources")
        shim.parse_version = parse
        sys.modules["pkg_resources"] = shim
    import pykafka

    return pykafka


# -- raw wire helpers ---------------------------------------------------------------------------

class Wire:
    def __init__(self, host: str, port: int) -> None:
        self.sock = socket.create_connection((host, port), timeout=TIMEOUT)
        self.correlation = 0

    def call(self, api_key: int, version: int, body: dict):
        self.correlation += 1
        self.sock.sendall(encode_request(api_key, version, self.correlation, "legacy-test", body))
        (size,) = struct.unpack(">i", self._exactly(4))
        corr, response = decode_response(api_key, version, self._exactly(size))
        assert corr == self.correlation
        return response

    def _exactly(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("closed")
            out += chunk
        return bytes(out)

    def close(self) -> None:
        self.sock.close()


def produce(wire: Wire, version: int, topic: str, records: bytes, acks: int = 1):
    body = {"acks": acks, "timeout_ms": 5000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": records}]}]}
    return wire.call(0, version, body).responses[0].partition_responses[0]


def fetch(wire: Wire, version: int, topic: str, offset: int, partition_max: int = 1 << 20, max_bytes: int = 1 << 20):
    body = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": max_bytes, "isolation_level": 0,
            "topics": [{"topic": topic, "partitions": [{"partition": 0, "fetch_offset": offset,
                                                         "partition_max_bytes": partition_max}]}]}
    return wire.call(1, version, body).responses[0].partitions[0]


def message_set(magic: int, values: list[bytes], codec: int = 0, ts: int = 1_650_000_000_000) -> bytes:
    recs = [legacy.LegacyRecord(-1, ts + i if magic else -1, b"k%d" % i, v) for i, v in enumerate(values)]
    if codec:
        return legacy.encode_wrapper(codec, recs, magic=magic, wrapper_offset=-1)
    return b"".join(legacy.encode_message(-1, r.key, r.value, magic=magic, timestamp=r.timestamp) for r in recs)


@pytest.fixture
def wire(module_broker):
    w = Wire(module_broker.host, module_broker.port)
    yield w
    w.close()


# -- Produce v0-2 / Fetch v0-3 over the wire ------------------------------------------------------

def test_produce_v0_v2_and_fetch_every_version(module_broker, wire):
    topic = "legacy-wire"
    create_topic(module_broker.bootstrap, topic)
    r0 = produce(wire, 0, topic, message_set(0, [b"a", b"b"]))
    assert (r0.error_code, r0.base_offset) == (0, 0)
    r1 = produce(wire, 1, topic, message_set(0, [b"c"], codec=legacy.GZIP))
    assert (r1.error_code, r1.base_offset) == (0, 2)
    r2 = produce(wire, 2, topic, message_set(1, [b"d", b"e", b"f"], codec=legacy.SNAPPY))
    assert (r2.error_code, r2.base_offset, r2.log_append_time_ms) == (0, 3, -1)
    r3 = produce(wire, 2, topic, message_set(1, [b"g"], codec=legacy.LZ4))
    assert (r3.error_code, r3.base_offset) == (0, 6)

    values = [b"a", b"b", b"c", b"d", b"e", b"f", b"g"]
    for version in range(4):
        part = fetch(wire, version, topic, 0)
        assert part.error_code == 0 and part.high_watermark == 7
        got = legacy.read_records(bytes(part.records))
        magic = 1 if version >= 2 else 0
        assert {r.magic for r in got} == {magic}
        assert [r.offset for r in got] == list(range(7))
        assert [r.value for r in got] == values
        assert [r.key for r in got] == [b"k0", b"k1", b"k0", b"k0", b"k1", b"k2", b"k0"]
        if magic:  # magic 0 had no timestamp: NO_TIMESTAMP kept through the magic-2 log
            assert [r.timestamp for r in got] == [-1, -1, -1] + [1_650_000_000_000 + i for i in range(3)] + [
                1_650_000_000_000]
    # from the middle of a stored batch: the records before the fetch offset are left out
    part = fetch(wire, 1, topic, 4)
    assert [r.offset for r in legacy.read_records(bytes(part.records))] == [4, 5, 6]
    # a modern fetch sees magic-2 batches: one per produce
    part = fetch(wire, 4, topic, 0)
    data = bytes(part.records)
    assert data[16] == 2
    assert [r.value for r in legacy.read_batches(data)] == values


def test_fetch_limits_whole_messages(module_broker, wire):
    topic = "legacy-limits"
    create_topic(module_broker.bootstrap, topic)
    assert produce(wire, 2, topic, message_set(1, [b"x" * 100] * 5)).error_code == 0
    one = len(legacy.encode_message(0, b"k0", b"x" * 100, magic=1, timestamp=0))
    part = fetch(wire, 2, topic, 0, partition_max=2 * one + 10)
    assert [r.offset for r in legacy.read_records(bytes(part.records))] == [0, 1]
    part = fetch(wire, 0, topic, 0, partition_max=10)  # smaller than one message: still one
    assert len(legacy.parse_entries(bytes(part.records))) == 1
    part = fetch(wire, 3, topic, 1, max_bytes=one)
    assert [r.offset for r in legacy.read_records(bytes(part.records))] == [1]


def test_corrupt_message_set_is_refused(module_broker, wire):
    topic = "legacy-corrupt"
    create_topic(module_broker.bootstrap, topic)
    bad = bytearray(message_set(1, [b"hello"]))
    bad[-1] ^= 0x55
    r = produce(wire, 2, topic, bytes(bad))
    assert r.error_code == 2 and r.base_offset == -1  # CORRUPT_MESSAGE
    assert produce(wire, 0, topic, message_set(0, [b"ok"])[:-2]).error_code == 2
    assert fetch(wire, 0, topic, 0).high_watermark == 0


def test_offset_commit_and_fetch_v0_use_the_embedded_zookeeper_store(broker):
    topic, group = "legacy-offsets", "zk-group"
    create_topic(broker.bootstrap, topic, partitions=2)
    w = Wire(broker.host, broker.port)
    try:
        body = {"group_id": group, "topics": [{"name": topic, "partitions": [
            {"partition_index": 0, "committed_offset": 42, "committed_metadata": "m"},
            {"partition_index": 1, "committed_offset": 7, "committed_metadata": None}]},
            {"name": "no-such-topic", "partitions": [{"partition_index": 0, "committed_offset": 1,
                                                        "committed_metadata": None}]}]}
        response = w.call(8, 0, body)
        codes = {(t.name, p.partition_index): p.error_code for t in response.topics for p in t.partitions}
        assert codes == {(topic, 0): 0, (topic, 1): 0, ("no-such-topic", 0): 3}
        fetched = w.call(9, 0, {"group_id": group, "topics": [{"name": topic, "partition_indexes": [0, 1, 5]}]})
        got = {p.partition_index: (p.committed_offset, p.error_code, p.metadata) for p in fetched.topics[0].partitions}
        assert got == {0: (42, 0, ""), 1: (7, 0, ""), 5: (-1, 3, "")}
        # v1 reads Kafka storage: nothing committed there
        v1 = w.call(9, 1, {"group_id": group, "topics": [{"name": topic, "partition_indexes": [0]}]})
        assert v1.topics[0].partitions[0].committed_offset == -1
        # a second commit moves it on
        body["topics"] = body["topics"][:1]
        body["topics"][0]["partitions"][0]["committed_offset"] = 43
        assert all(p.error_code == 0 for p in w.call(8, 0, body).topics[0].partitions)
    finally:
        w.close()
    broker.stop_cleanly()
    server = EmbeddedServer.in_log_dir(broker.dirs)
    try:
        store = server.connect()
        data, _ = store.get(f"/consumers/{group}/offsets/{topic}/0")
        assert data == b"43"
        assert layout.get_consumer_offset(store, group, topic, 1) == 7
    finally:
        server.close()
    broker.start()


# -- pykafka 2.8 ----------------------------------------------------------------------------------

def _consume(consumer, n: int) -> list:
    out = []
    deadline = time.monotonic() + TIMEOUT
    while len(out) < n and time.monotonic() < deadline:
        message = consumer.consume(block=False)
        if message is None:
            time.sleep(0.05)
            continue
        out.append(message)
    return out


@pytest.mark.parametrize("broker_version,compression", [
    ("0.9.0", 0),        # Produce v0 + Fetch v0, magic 0
    ("0.10.1", 0),       # ApiVersions, then Fetch v2, magic 1
    ("0.10.1", 1),       # gzip wrappers
])
def test_pykafka_produces_and_consumes(module_broker, broker_version, compression):
    pykafka = import_pykafka()
    from pykafka.common import OffsetType
    from pykafka.utils import VERSIONS_CACHE

    VERSIONS_CACHE.clear()  # pykafka caches the negotiated API versions per process
    topic = f"pykafka-{broker_version.replace('.', '')}-{compression}"
    create_topic(module_broker.bootstrap, topic, partitions=2)
    client = pykafka.KafkaClient(hosts=module_broker.bootstrap, broker_version=broker_version)
    t = client.topics[topic]
    values = [b"pykafka message %d" % i for i in range(50)]
    with t.get_sync_producer(compression=compression, min_queued_messages=1) as producer:
        for i, v in enumerate(values):
            producer.produce(v, partition_key=b"key-%d" % i)
    consumer = t.get_simple_consumer(consumer_group=f"g-{topic}".encode(), auto_offset_reset=OffsetType.EARLIEST,
                                     reset_offset_on_start=True, consumer_timeout_ms=2000)
    try:
        got = _consume(consumer, len(values))
        assert sorted(m.value for m in got) == sorted(values)
        by_partition: dict[int, list[int]] = {}
        for m in got:
            by_partition.setdefault(m.partition_id, []).append(m.offset)
        for offsets in by_partition.values():
            assert offsets == list(range(len(offsets)))  # original offsets, in order
        assert all(m.partition_key.startswith(b"key-") for m in got)
        if broker_version != "0.9.0":  # magic 1: pykafka stamps CreateTime
            assert all(m.timestamp > 1_600_000_000_000 for m in got)
        consumer.commit_offsets()
        committed = dict((p, r.offset) for p, r in consumer.fetch_offsets())
        assert sum(committed.values()) == len(values)
    finally:
        consumer.stop()
