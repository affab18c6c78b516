"""Bad input on raw sockets, while a well-behaved client keeps working on the same broker.

Each case talks to the broker over a plain socket (requests built with
``kbroker.protocol.encode_request``, or by hand where the codec would refuse) and checks the
answer Kafka gives: the connection closed, or a specific error code. Meanwhile a ``Witness``
(a confluent-kafka producer and consumer on a topic of its own) produces and consumes without
pause; every case checks that it made progress during and after the bad input and never saw an
error, and the last test restarts the broker and finds every message it had acknowledged.
"""
from __future__ import annotations

import random
import socket
import struct
import threading

import pytest

from kbroker.protocol import SUPPORTED_VERSIONS, decode_request, decode_response, encode_request

from ..oracles.batch_oracle import build_batch
from .clients import DEADLINE, wait_for
from .helpers import create_topic

MAX_REQUEST = 104857600  # socket.request.max.bytes (the default)
TIMEOUT = 10.0
TARGET = "bad-input"  # the topic the bad requests aim at
WITNESS = "witness"


# -- the well-behaved client ----------------------------------------------------------------


class Witness:
    """Produces one message every few milliseconds (acks=all) and consumes them, each on a thread."""

    def __init__(self, bootstrap: str) -> None:
        from confluent_kafka import Consumer, Producer

        self.errors: list[str] = []
        self.acked: list[tuple[int, int]] = []      # (message number, offset)
        self.consumed: list[tuple[int, bytes]] = []  # (offset, value)
        self.stopping = threading.Event()
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0,
                                  "enable.idempotence": True, "error_cb": self._error})
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "witness", "enable.auto.commit": False,
                                  "auto.offset.reset": "earliest", "fetch.wait.max.ms": 50, "error_cb": self._error})
        self.threads = [threading.Thread(target=self._produce, daemon=True, name="witness-produce"),
                        threading.Thread(target=self._consume, daemon=True, name="witness-consume")]
        for t in self.threads:
            t.start()

    def _error(self, err) -> None:
        self.errors.append(str(err))

    def _produce(self) -> None:
        n = 0
        while not self.stopping.is_set():
            def done(err, msg, n=n):
                if err is not None:
                    self.errors.append(f"delivery of {n}: {err}")
                else:
                    self.acked.append((n, msg.offset()))
            self.producer.produce(WITNESS, value=b"witness-%08d" % n, partition=0, on_delivery=done)
            n += 1
            self.producer.poll(0.01)
        self.producer.flush(DEADLINE)
        self.producer = None  # librdkafka's handle goes with the last reference

    def _consume(self) -> None:
        from confluent_kafka import OFFSET_BEGINNING, TopicPartition

        self.consumer.assign([TopicPartition(WITNESS, 0, OFFSET_BEGINNING)])
        while not self.stopping.is_set():
            for m in self.consumer.consume(num_messages=500, timeout=0.05):
                if m.error():
                    self.errors.append(f"consume: {m.error()}")
                else:
                    self.consumed.append((m.offset(), m.value()))
        self.consumer.close()

    def progressing(self, what: str, count: int = 10) -> None:
        """Wait until it has produced and consumed ``count`` more messages; no error on the way."""
        acked, consumed = len(self.acked), len(self.consumed)
        wait_for(lambda: len(self.acked) >= acked + count and len(self.consumed) >= consumed + count,
                 timeout=DEADLINE, what=f"the witness to go on {what}")
        assert not self.errors, f"the witness saw errors {what}: {self.errors}"

    def stop(self) -> None:
        self.stopping.set()
        for t in self.threads:
            t.join(DEADLINE)
        assert not self.errors, self.errors
        values = [v for _, v in self.consumed]
        offsets = [o for o, _ in self.consumed]
        assert offsets == list(range(len(offsets))), "the witness consumed offsets out of order or twice"
        assert len(set(values)) == len(values)


@pytest.fixture(scope="module")
def witness(module_broker):
    create_topic(module_broker.bootstrap, WITNESS, 1)
    create_topic(module_broker.bootstrap, TARGET, 2)
    w = Witness(module_broker.bootstrap)
    w.progressing("at start")
    yield w
    w.stop()


@pytest.fixture
def raw(module_broker, witness):
    """A raw connection factory; each case ends with the witness going on after it."""
    socks = []

    def connect() -> socket.socket:
        s = socket.create_connection((module_broker.host, module_broker.port), timeout=TIMEOUT)
        socks.append(s)
        return s

    yield connect
    for s in socks:
        s.close()
    witness.progressing("after the bad input")
    assert module_broker.running


# -- wire helpers -------------------------------------------------------------------------------


def request(s: socket.socket, api_key: int, version: int, body, correlation_id: int = 1) -> None:
    s.sendall(encode_request(api_key, version, correlation_id, "raw-test", body))


def raw_header(api_key: int, version: int, correlation_id: int = 1, client_id: bytes = b"raw-test") -> bytes:
    return struct.pack(">hhih", api_key, version, correlation_id, len(client_id)) + client_id


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def recv_exactly(s: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = s.recv(n - len(out))
        if not chunk:
            raise ConnectionError(f"closed after {len(out)} of {n} bytes")
        out += chunk
    return bytes(out)


def response(s: socket.socket, api_key: int, version: int, correlation_id: int = 1):
    (size,) = struct.unpack(">i", recv_exactly(s, 4))
    corr, body = decode_response(api_key, version, recv_exactly(s, size))
    assert corr == correlation_id
    return body


def assert_closed(s: socket.socket, timeout: float = TIMEOUT) -> None:
    """The broker closes the connection (EOF or reset) without sending anything."""
    s.settimeout(timeout)
    try:
        data = s.recv(65536)
    except ConnectionResetError:
        return
    except TimeoutError:
        raise AssertionError(f"the connection was still open after {timeout}s") from None
    assert data == b"", f"expected the connection closed, got {data[:60]!r}"


def assert_open(s: socket.socket) -> None:
    """The connection still works: an ApiVersions round trip on it."""
    request(s, 18, 0, {}, correlation_id=77)
    body = response(s, 18, 0, correlation_id=77)
    assert body.error_code == 0


def produce_body(acks: int, partitions: dict[int, bytes], topic: str = TARGET) -> dict:
    return {"transactional_id": None, "acks": acks, "timeout_ms": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": p, "records": r} for p, r in partitions.items()]}]}


def batch(n: int = 3, tag: bytes = b"ok") -> bytes:
    return build_batch([(b"k%d" % i, tag + b"-%d" % i, [("h", b"v")]) for i in range(n)])


def partition_results(body) -> dict[int, object]:
    return {p.index: p for t in body.responses for p in t.partition_responses}


def high_watermarks(s: socket.socket, topic: str = TARGET, partitions=(0, 1)) -> dict[int, int]:
    request(s, 2, 1, {"replica_id": -1, "topics": [{"name": topic, "partitions": [
        {"partition_index": p, "timestamp": -1} for p in partitions]}]}, correlation_id=9)
    body = response(s, 2, 1, correlation_id=9)
    return {p.partition_index: p.offset for t in body.topics for p in t.partitions}


def broker_peak_rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise AssertionError("no VmHWM")


# -- the cases ----------------------------------------------------------------------------------


def test_random_bytes(raw, witness):
    rng = random.Random(1234)
    # a stream of noise: its first four bytes, read as a size, are out of range
    noise = bytes([0xF3]) + rng.randbytes(4095)
    s = raw()
    s.sendall(noise)
    assert_closed(s)
    # framed noise: sizes are right, headers and bodies are garbage; the broker closes or answers,
    # and survives either way
    for _ in range(60):
        s = raw()
        payload = rng.randbytes(rng.randint(0, 300))
        try:
            s.sendall(frame(payload))
            s.settimeout(TIMEOUT)
            s.recv(65536)  # an answer or EOF, not a hang
        except (ConnectionResetError, BrokenPipeError):
            pass
        s.close()
    witness.progressing("during the noise")


def test_mutated_requests(raw, witness, module_broker):
    """Valid requests with a few bytes changed: decoding and handling must fail cleanly."""
    rng = random.Random(99)
    valid = [
        encode_request(3, 9, 1, "raw", {"topics": [{"name": TARGET}], "allow_auto_topic_creation": False,
                                        "include_topic_authorized_operations": False}),
        encode_request(0, 7, 1, "raw", produce_body(1, {0: batch(2, b"mut")})),
        encode_request(1, 11, 1, "raw", {"replica_id": -1, "max_wait_ms": 10, "min_bytes": 1, "max_bytes": 1 << 20,
                                         "isolation_level": 0, "session_id": 0, "session_epoch": -1, "topics": [
                                             {"topic": TARGET, "partitions": [{"partition": 0, "fetch_offset": 0,
                                                                               "partition_max_bytes": 1 << 20}]}],
                                         "forgotten_topics_data": [], "rack_id": ""}),
        encode_request(2, 5, 1, "raw", {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": TARGET, "partitions": [{"partition_index": 0, "timestamp": -2}]}]}),
        encode_request(18, 3, 1, "raw", {"client_software_name": "raw", "client_software_version": "1.0"}),
    ]
    for _ in range(150):
        data = bytearray(rng.choice(valid))
        for _ in range(rng.randint(1, 4)):
            pos = rng.randrange(4, len(data))  # keep the size prefix: the frame is complete
            data[pos] = rng.randrange(256)
        s = raw()
        try:
            s.sendall(data)
            s.settimeout(2.0)
            s.recv(65536)  # an answer, or EOF for what cannot be decoded
        except (ConnectionResetError, BrokenPipeError):
            pass
        except TimeoutError:
            # silence is right only for a request that is valid and waits: a long poll, or acks=0
            header, body = decode_request(memoryview(data)[4:])
            assert (header.api_key == 1 and body.max_wait_ms > 2000) or (header.api_key == 0 and body.acks == 0), \
                f"no answer to {header} {body}"
        s.close()
    witness.progressing("during mutated requests")
    assert module_broker.running


def test_frame_larger_than_max_is_refused_before_allocation(raw, witness, module_broker):
    pid = module_broker.proc.pid
    before = broker_peak_rss_kb(pid)
    s = raw()
    s.sendall(struct.pack(">i", MAX_REQUEST + 1))  # only the size: the broker must not wait for more
    assert_closed(s)
    s = raw()
    s.sendall(struct.pack(">i", 2**31 - 1))
    assert_closed(s)
    s = raw()
    s.sendall(struct.pack(">i", -5))
    assert_closed(s)
    witness.progressing("after oversized frames")
    assert broker_peak_rss_kb(pid) - before < 50_000, "the broker allocated the refused frame"


def test_truncated_frames(raw, witness):
    # a small frame cut short: the broker waits for the rest, serving others meanwhile
    full = encode_request(3, 1, 1, "raw", {"topics": [{"name": TARGET}]})
    s = raw()
    s.sendall(full[:len(full) // 2])
    witness.progressing("while a small frame is incomplete")
    s.close()
    # a big frame (received straight into its own buffer) cut short
    big = encode_request(0, 7, 1, "raw", produce_body(1, {0: batch(1, b"x" * 2_000_000)}))
    s = raw()
    s.sendall(big[:1_000_000])
    witness.progressing("while a big frame is incomplete")
    s.close()
    # nothing of the cut request was applied
    s = raw()
    before = high_watermarks(s)
    assert_open(s)
    assert high_watermarks(s) == before


def test_unknown_api_key(raw):
    for key in (999, 32000, -1, 58):  # 58 = Envelope: a 2.8 ZooKeeper-mode broker does not serve it
        s = raw()
        s.sendall(frame(raw_header(key, 0) + b"\x00" * 16))
        assert_closed(s)


def test_unsupported_version(raw):
    for key, version in ((3, 13), (3, 99), (0, 10), (1, -1), (8, 100)):
        assert version not in range(SUPPORTED_VERSIONS[key][0], SUPPORTED_VERSIONS[key][1] + 1)
        s = raw()
        assert_open(s)  # a working connection...
        s.sendall(frame(raw_header(key, version) + b"\x00" * 32))
        assert_closed(s)  # ...that the unsupported version closes


def test_api_versions_too_new(raw):
    s = raw()
    s.sendall(frame(raw_header(18, 99, correlation_id=41) + b"\x00" * 8))
    body = response(s, 18, 0, correlation_id=41)  # a v0 body, whatever version was asked
    assert body.error_code == 35
    low, high = SUPPORTED_VERSIONS[18]
    assert [(k.api_key, k.min_version, k.max_version) for k in body.api_keys] == [(18, low, high)]
    # the connection stays usable: the client retries with a version it now knows
    request(s, 18, high, {"client_software_name": "raw-test", "client_software_version": "1.0"}, correlation_id=42)
    body = response(s, 18, high, correlation_id=42)
    assert body.error_code == 0
    assert {k.api_key for k in body.api_keys} >= {0, 1, 2, 3, 18}


def test_corrupt_batch(raw):
    s = raw()
    before = high_watermarks(s)
    corrupt = bytearray(batch(3, b"corrupt"))
    corrupt[-3] ^= 0xFF  # a record byte: the CRC no longer matches
    for version in (3, 7, 9):
        request(s, 0, version, produce_body(-1, {0: bytes(corrupt), 1: batch(3)}), correlation_id=version)
        results = partition_results(response(s, 0, version, correlation_id=version))
        assert results[0].error_code == 2  # CORRUPT_MESSAGE, in that partition only
        assert results[1].error_code == 0 and results[1].base_offset == before[1] + 3 * [3, 7, 9].index(version)
    assert high_watermarks(s) == {0: before[0], 1: before[1] + 9}


def test_produce_to_missing_partition(raw):
    s = raw()
    before = high_watermarks(s)
    request(s, 0, 7, produce_body(-1, {7: batch(), 1: batch()}))
    results = partition_results(response(s, 0, 7))
    assert results[7].error_code == 3  # UNKNOWN_TOPIC_OR_PARTITION
    assert results[1].error_code == 0 and results[1].base_offset == before[1]
    assert_open(s)


def test_invalid_required_acks(raw):
    s = raw()
    before = high_watermarks(s)
    request(s, 0, 7, produce_body(5, {0: batch(), 1: batch()}))
    results = partition_results(response(s, 0, 7))
    assert {p: r.error_code for p, r in results.items()} == {0: 21, 1: 21}  # INVALID_REQUIRED_ACKS
    assert high_watermarks(s) == before
    assert_open(s)


def test_metadata_for_illegal_topic_names(raw, module_broker):
    """Auto-creation refuses an illegal name with INVALID_TOPIC_EXCEPTION (17) for that topic;
    the other topics of the request are answered and the connection stays open."""
    s = raw()
    names = ["bad\x15name", "name-é", "x" * 250, TARGET]
    for version in (1, 4, 9):
        body = {"topics": [{"name": n} for n in names], "allow_auto_topic_creation": True,
                "include_topic_authorized_operations": False}
        request(s, 3, version, body, correlation_id=version)
        answer = response(s, 3, version, correlation_id=version)
        assert [(t.name, t.error_code) for t in answer.topics] == [
            ("bad\x15name", 17), ("name-é", 17), ("x" * 250, 17), (TARGET, 0)]
    assert_open(s)
    assert not list(module_broker.dirs.glob("bad*name*"))


def test_fetch_byte_limits(raw):
    """A first batch larger than the fetch's max_bytes comes whole (KIP-74) and the partitions
    after it get no records; a negative partition limit is an error for that partition. Answered,
    never closed."""
    s = raw()
    start = high_watermarks(s)
    big = build_batch([(b"big", b"x" * 50_000)])
    request(s, 0, 7, produce_body(-1, {0: big, 1: big}))
    assert {p: r.error_code for p, r in partition_results(response(s, 0, 7)).items()} == {0: 0, 1: 0}

    def fetch(max_bytes: int, partition_max: int) -> dict:
        request(s, 1, 11, {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": max_bytes,
                           "isolation_level": 0, "session_id": 0, "session_epoch": -1, "topics": [
                               {"topic": TARGET, "partitions": [
                                   {"partition": p, "fetch_offset": start[p], "partition_max_bytes": partition_max}
                                   for p in (0, 1)]}],
                           "forgotten_topics_data": [], "rack_id": ""}, correlation_id=11)
        body = response(s, 1, 11, correlation_id=11)
        return {p.partition_index: (p.error_code, bytes(p.records or b""))
                for t in body.responses for p in t.partitions}

    got = fetch(1000, 1 << 20)
    assert got[0][0] == 0 and len(got[0][1]) == len(big)  # the whole batch, offsets assigned
    assert got[1] == (0, b"")
    got = fetch(1 << 20, -1)
    assert got == {0: (-1, b""), 1: (-1, b"")}  # UNKNOWN_SERVER_ERROR, as Kafka's log read refuses it
    assert_open(s)


def test_fetch_session_ids(raw):
    """KIP-227 as Kafka's FetchManager: a full fetch (epoch 0 or -1) naming a session closes it,
    whether the broker knows it or not, and epoch 0 opens a new one. kafka-python sends (old id,
    epoch 0) after a lost connection or a broker restart; an error there would be repeated forever."""
    s = raw()

    def fetch(session_id: int, epoch: int, partitions=(0, 1)):
        request(s, 1, 11, {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
                           "isolation_level": 0, "session_id": session_id, "session_epoch": epoch, "topics": [
                               {"topic": TARGET, "partitions": [
                                   {"partition": p, "fetch_offset": 0, "partition_max_bytes": 1 << 16}
                                   for p in partitions]}] if partitions else [],
                           "forgotten_topics_data": [], "rack_id": ""}, correlation_id=12)
        return response(s, 1, 11, correlation_id=12)

    first = fetch(0, 0)
    assert first.error_code == 0 and first.session_id > 0
    assert fetch(first.session_id, 1, ()).error_code == 0  # incremental
    assert fetch(first.session_id, 5, ()).error_code == 71  # INVALID_FETCH_SESSION_EPOCH
    again = fetch(first.session_id, 0)  # "close mine and start over", as after a reconnect
    assert again.error_code == 0 and again.session_id not in (0, first.session_id)
    assert fetch(first.session_id, 2, ()).error_code == 70  # closed: FETCH_SESSION_ID_NOT_FOUND
    assert fetch(again.session_id, 1, ()).error_code == 0
    unknown = fetch(987654, 0)  # an id from before a restart
    assert unknown.error_code == 0 and unknown.session_id not in (0, again.session_id)
    final = fetch(again.session_id, -1)  # close, and answer without a session
    assert final.error_code == 0 and final.session_id == 0
    assert {p.partition_index for t in final.responses for p in t.partitions} == {0, 1}
    assert fetch(again.session_id, 2, ()).error_code == 70
    assert fetch(0, 3, ()).error_code == 70  # an incremental fetch needs a session


def test_nothing_acknowledged_is_lost(module_broker, witness):
    """Stop the witness, restart the broker, and read back every message it had acknowledged."""
    witness.stop()
    acked = dict(witness.acked)
    assert len(acked) > 100
    module_broker.restart()
    from .clients import DRIVERS
    got = DRIVERS["confluent"].read(module_broker.bootstrap, WITNESS, [0], len(acked))
    by_offset = {r.offset: r.value for r in got}
    for n, offset in acked.items():
        assert by_offset.get(offset) == b"witness-%08d" % n, f"acknowledged message {n} at offset {offset} is lost"
    assert len(got) == len(acked), "the log holds messages nobody acknowledged, or duplicates"
    witness.stopping.set()
