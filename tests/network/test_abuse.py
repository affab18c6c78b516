"""Hostile sockets against a real broker process: it keeps serving a well-behaved client and its
memory stays bounded (bench/reliability/abuse.py runs the same scenarios bigger and prints the figures).

Memory bounds are on the broker's peak RSS over its RSS just before the abuse (VmHWM, reset through
/proc/PID/clear_refs). The broker at rest is ~55 MB; each bound below says what it allows and what
the broken code cost, so the bound is generous yet fails the regression.
"""
from __future__ import annotations

import os
import resource
import socket
import ssl
import struct
import time
from collections.abc import Iterator
from contextlib import closing

import pytest

from bench.reliability.abuse import (
    HOST,
    WIDE,
    Broker,
    Prober,
    closed_by_peer,
    connect,
    create_topic,
    fetch_body,
    metadata_request,
    produce_body,
    raise_nofile,
    running_broker,
    still_open,
    wait_until,
)
from kbroker.log.batches import build_batch
from kbroker.protocol import decode_response, encode_request
from kbroker.tools.client import Connection

MiB = 1 << 20
MAX_REQUEST = 104857600  # socket.request.max.bytes (the default)
IDLE_MS = 4000           # connections.max.idle.ms of the shared broker: long next to a 1 byte/s loris
WAIT = 60.0              # generous bound for anything eventual on a loaded 2-core machine


@pytest.fixture(scope="module")
def broker() -> Iterator[Broker]:
    with running_broker({"connections.max.idle.ms": str(IDLE_MS), "message.max.bytes": str(8 * MiB)}) as b:
        create_topic(b.bootstrap)
        yield b


@pytest.fixture
def prober(broker: Broker) -> Iterator[Prober]:
    with Prober(broker.bootstrap, timeout=WAIT) as p:
        assert p.wait_served(5), p.summary()
        yield p
    assert not p.errors, p.errors[:3]


def start_abuse(broker: Broker) -> float:
    """The RSS now (MB), and the peak measured from now on."""
    broker.reset_peak()
    return broker.rss_mb()


def read_frame(s: socket.socket) -> bytes:
    def exactly(n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            data = s.recv(n - len(buf))
            assert data, "the broker closed the connection"
            buf += data
        return bytes(buf)
    return exactly(struct.unpack(">i", exactly(4))[0])


def test_frame_sizes_around_the_limit(broker: Broker, prober: Prober) -> None:
    """Kafka refuses a size past socket.request.max.bytes (or negative) by closing the connection;
    up to the limit inclusive it waits for the body."""
    for size, refused in ((MAX_REQUEST - 1, False), (MAX_REQUEST, False), (MAX_REQUEST + 1, True),
                          (2**31 - 1, True), (-1, True), (-2**31, True)):
        s = connect(broker.port)
        try:
            s.sendall(struct.pack(">i", size))
            assert closed_by_peer(s, WAIT if refused else 1.0) is refused, size
        finally:
            s.close()
    assert prober.wait_served(5)


def test_a_claimed_frame_costs_what_arrived_not_what_was_claimed(broker: Broker, prober: Prober) -> None:
    """Regression (failed before: the broker allocated and zeroed the claimed size when the 4 bytes
    arrived, 10 x 100 MB = 1 GB here). Bound: 200 MB over the RSS before, which 10 claimers that
    sent 64 KiB each cannot reach unless the claimed sizes are allocated."""
    baseline = start_abuse(broker)
    socks = []
    try:
        for _ in range(10):
            s = connect(broker.port)
            s.sendall(struct.pack(">i", MAX_REQUEST - 1) + b"\0" * 65536)
            socks.append(s)
        assert prober.wait_served(10)
        assert all(still_open(s) for s in socks)  # waiting for the rest, as it should
        grown = broker.peak_mb() - baseline
        assert grown < 200, f"peak RSS grew {grown:.0f} MB for 640 KiB received"
    finally:
        for s in socks:
            s.close()


def test_big_frames_arriving_in_pieces_are_received_whole(broker: Broker) -> None:
    """The big-frame buffer grows as bytes arrive: a 5 MB Produce sent in uneven pieces with pauses
    (so it crosses several growths) lands byte-exact."""
    value = os.urandom(5 * MiB)
    frame = encode_request(0, 7, 7, "pieces", produce_body(bytes(build_batch([(b"k", value, 1)]))))
    s = connect(broker.port)
    try:
        pos, step = 0, 1000
        while pos < len(frame):
            s.sendall(frame[pos:pos + step])
            pos += step
            step = step * 3 + 7
            time.sleep(0.01)
        s.settimeout(WAIT)
        _, body = decode_response(0, 7, read_frame(s))
        part = body.responses[0].partition_responses[0]
        assert part.error_code == 0
    finally:
        s.close()
    host, port = broker.bootstrap.rsplit(":", 1)
    conn = Connection(host, int(port), timeout=WAIT)
    try:
        fetched = conn.send(1, fetch_body(part.base_offset, 8 * MiB), version=11)
    finally:
        conn.close()
    assert value in bytes(fetched.responses[0].partitions[0].records)


def test_slow_loris_connections_do_not_starve_others(broker: Broker, prober: Prober) -> None:
    """200 connections each sending a Metadata request one byte a second: the others are served,
    a byte a second keeps a connection from being idle (as in Kafka, any read is activity), a
    finished request is answered, and silence past connections.max.idle.ms closes them."""
    request = metadata_request(1)
    baseline = start_abuse(broker)
    socks = [connect(broker.port) for _ in range(200)]
    try:
        served = len(prober.latencies)
        for i in range(6):  # 6 s: longer than IDLE_MS
            tick = time.monotonic()
            for s in socks:
                s.send(request[i:i + 1])
            time.sleep(max(0.0, 1.0 - (time.monotonic() - tick)))
        assert len(prober.latencies) > served, "nobody else was served during the slow loris"
        assert all(still_open(s) for s in socks), "a connection sending a byte a second was closed as idle"
        # one of them finishes its request: it is answered
        socks[0].sendall(request[6:])
        socks[0].settimeout(WAIT)
        correlation_id, _ = decode_response(3, 1, read_frame(socks[0]))
        assert correlation_id == 1
        # the rest go silent: closed after connections.max.idle.ms
        assert wait_until(lambda: not any(still_open(s) for s in socks[1:]), WAIT), "silent connections stayed open"
        grown = broker.peak_mb() - baseline
        # 200 partial requests: at most a 64 KiB scratch each (13 MB) plus their objects
        assert grown < 200, f"peak RSS grew {grown:.0f} MB for 200 slow connections"
    finally:
        for s in socks:
            s.close()


def test_thousands_of_idle_connections(broker: Broker, prober: Prober) -> None:
    """Regression (failed before: every connection owned a 64 KiB receive scratch from the start,
    3000 x 64 KiB = 190 MB of idle connections). Bound: 32 KiB of peak RSS per connection (96 MB),
    measured ~4 KiB now; the kernel's socket buffers are not in the RSS."""
    connections = 3000
    raise_nofile(connections + 1024)
    assert broker.fd_limit() > connections + 500, "the broker's open-files limit is too low for this test"
    fds_before = broker.open_fds()
    baseline = start_abuse(broker)
    socks = []
    try:
        for _ in range(connections):
            socks.append(connect(broker.port))
        assert wait_until(lambda: broker.open_fds() >= fds_before + connections, WAIT), broker.open_fds()
        assert prober.wait_served(10)
        with closing(Connection(HOST, broker.port, timeout=WAIT)) as fresh:  # a new client is still let in and served
            fresh.send(3, {"topics": []}, version=1)
        grown = broker.peak_mb() - baseline
        assert grown < connections * 32 / 1024, f"peak RSS grew {grown:.0f} MB for {connections} idle connections"
        # connections.max.idle.ms closes them all
        assert wait_until(lambda: broker.open_fds() < fds_before + 50, WAIT), broker.open_fds()
    finally:
        for s in socks:
            s.close()


def test_a_client_that_never_reads_is_not_buffered_without_bound(broker: Broker, prober: Prober) -> None:
    """Regression (failed before: responses left the in-flight count once encoded, so reading went
    on and every Fetch response of a client that never reads was kept, 8000 x 60 KiB = 470 MB).
    Bound: 200 MB over the RSS before; the per-connection backlog is 4 MB now."""
    host, port = broker.bootstrap.rsplit(":", 1)
    with closing(Connection(host, int(port), timeout=WAIT)) as seed:
        seed.send(0, produce_body(bytes(build_batch([(None, os.urandom(60 * 1024), 1)]))), version=7)
    baseline = start_abuse(broker)
    s = connect(broker.port, rcvbuf=4096)
    try:
        s.settimeout(1.0)
        frames = b"".join(encode_request(1, 11, i, "hoarder", fetch_body(0)) for i in range(8000))
        try:
            s.sendall(frames)
        except TimeoutError:
            pass  # the broker stopped reading: that is the point
        served = len(prober.latencies)
        assert prober.wait_served(20)
        assert len(prober.latencies) > served
        grown = broker.peak_mb() - baseline
        assert grown < 200, f"peak RSS grew {grown:.0f} MB for a client that never reads"
        # once it reads, responses come in order
        s.settimeout(WAIT)
        for i in range(100):
            assert struct.unpack(">i", read_frame(s)[:4])[0] == i
    finally:
        s.close()


def test_responses_held_behind_a_long_poll_are_not_all_read_in_at_once(broker: Broker, prober: Prober) -> None:
    """Regression (failed before: when a long-poll Fetch at the head of the line ended, every
    response queued behind it had its segment ranges read into memory at once, 99 Fetches of 50
    partitions x 60 KiB = 290 MB from one connection). Bound: 150 MB over the RSS before; the
    backlog is 4 MB plus one response now. Then every response arrives, in order."""
    partitions = 50
    create_topic(broker.bootstrap, WIDE, partitions)
    create_topic(broker.bootstrap, "quiet")
    with closing(Connection(HOST, broker.port, timeout=WAIT)) as seed:
        records = bytes(build_batch([(None, os.urandom(60 * 1024), 1)]))
        seed.send(0, produce_body(records, topic=WIDE, partitions=partitions), version=7)
    head = encode_request(1, 11, 0, "held", fetch_body(0, topic="quiet", max_wait_ms=2000, min_bytes=MiB))
    behind = b"".join(encode_request(1, 11, i, "held", fetch_body(0, topic=WIDE, partitions=partitions))
                      for i in range(1, 100))
    baseline = start_abuse(broker)
    s = connect(broker.port, rcvbuf=4096)
    try:
        s.sendall(head + behind)
        time.sleep(3.0)  # the long poll ends after 2 s
        grown = broker.peak_mb() - baseline
        assert grown < 150, f"peak RSS grew {grown:.0f} MB for 99 responses held behind a long poll"
        s.settimeout(WAIT)
        for i in range(100):
            frame = read_frame(s)
            assert struct.unpack(">i", frame[:4])[0] == i
        assert len(frame) > partitions * 60 * 1024  # the last one carries every partition's record
    finally:
        s.close()
    assert prober.wait_served(5)


def test_a_slow_reader_taking_a_large_backlog_is_not_idle(broker: Broker) -> None:
    """Regression (failed before: only a write that emptied the whole backlog counted as activity,
    so a client reading 12 MB of responses at 1.6 MB/s was closed as idle after
    connections.max.idle.ms, 4 s here, while bytes were moving). As in Kafka, every write is activity."""
    partitions = 50
    create_topic(broker.bootstrap, WIDE, partitions)
    with closing(Connection(HOST, broker.port, timeout=WAIT)) as seed:
        records = bytes(build_batch([(None, os.urandom(60 * 1024), 1)]))
        seed.send(0, produce_body(records, topic=WIDE, partitions=partitions), version=7)
    s = connect(broker.port)
    try:
        s.sendall(b"".join(encode_request(1, 11, i, "slow", fetch_body(0, topic=WIDE, partitions=partitions))
                           for i in range(4)))
        s.settimeout(WAIT)
        got, started = 0, time.monotonic()
        while got < 4 * partitions * 60 * 1024:
            data = s.recv(64 * 1024)
            assert data, f"closed after {got} bytes and {time.monotonic() - started:.1f} s of steady reading"
            got += len(data)
            time.sleep(0.04)
        assert time.monotonic() - started > IDLE_MS / 1000  # the reading outlasted the idle bound
    finally:
        s.close()


def test_the_broker_raises_its_open_files_limit_to_the_hard_one(tmp_path) -> None:
    """As the JVM does for Kafka: started with a soft limit of 1024 under a hard 8192, the broker
    runs with 8192, so thousands of clients are not refused at 1024. (It kept 1024 before.)"""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 8192:
        pytest.skip(f"this process's hard open-files limit is {hard}")
    with running_broker(nofile=(1024, 8192)) as b:
        assert b.fd_limit() == 8192


# -- limits: brokers of their own ------------------------------------------------------------------


def two_listeners() -> dict[str, str]:
    """A client listener next to the inter-broker one (which Kafka exempts from max.connections)."""
    return {"listener.security.protocol.map": "CLIENT:PLAINTEXT,INTERNAL:PLAINTEXT",
            "inter.broker.listener.name": "INTERNAL"}


def listeners_on(b: Broker, first: str = "CLIENT", second: str = "INTERNAL") -> int:
    """``first`` on the broker's port and ``second`` on a free one, returned."""
    with socket.socket() as spare:
        spare.bind((HOST, 0))
        port = spare.getsockname()[1]
    b.overrides["listeners"] = f"{first}://{HOST}:{b.port},{second}://{HOST}:{port}"
    return port


def has_data(s: socket.socket) -> bool:
    s.setblocking(False)
    try:
        return bool(s.recv(1, socket.MSG_PEEK))
    except BlockingIOError:
        return False
    finally:
        s.setblocking(True)


def api_versions(s: socket.socket, correlation_id: int, timeout: float) -> bool:
    """True if an ApiVersions request on ``s`` is answered within ``timeout``."""
    s.sendall(encode_request(18, 0, correlation_id, "limits", {}))
    s.settimeout(timeout)
    try:
        return struct.unpack(">i", read_frame(s)[:4])[0] == correlation_id
    except (TimeoutError, AssertionError, ConnectionError):
        return False


def test_max_connections_per_ip_closes_the_extra_connections(tmp_path) -> None:
    """Kafka's max.connections.per.ip: a connection past the limit is closed at once; a freed slot
    lets the next one in; max.connections.per.ip.overrides raises it for one address.
    (The broker ignored both keys before.)"""
    b = Broker(tmp_path, {**two_listeners(), "max.connections.per.ip": "4",
                          "max.connections.per.ip.overrides": "127.0.0.2:6"})
    listeners_on(b)
    b.start()
    try:
        socks: list[socket.socket] = []
        deadline = time.monotonic() + WAIT
        while len(socks) < 4 and time.monotonic() < deadline:  # the readiness check's connection may linger
            s = connect(b.port)
            if api_versions(s, 1, WAIT):
                socks.append(s)
            else:
                s.close()
                time.sleep(0.1)
        assert len(socks) == 4
        extra = connect(b.port)
        assert closed_by_peer(extra, WAIT)
        extra.close()
        socks.pop().close()
        assert wait_until(lambda: api_versions(connect(b.port), 2, 5.0), WAIT)  # a slot came free
        # another address has an override of 6
        others = []
        for _ in range(6):
            o = socket.create_connection((HOST, b.port), source_address=("127.0.0.2", 0))
            others.append(o)
            assert api_versions(o, 3, WAIT)
        seventh = socket.create_connection((HOST, b.port), source_address=("127.0.0.2", 0))
        assert closed_by_peer(seventh, WAIT)
        for s in socks + others + [seventh]:
            s.close()
        assert "max.connections.per.ip" in b.log()
    finally:
        b.stop()


def test_max_connections_holds_new_connections_until_one_closes(tmp_path) -> None:
    """Kafka's max.connections: past it, new client connections wait to be accepted until one
    closes; the inter-broker listener is let in regardless. (The broker ignored the key before.)"""
    b = Broker(tmp_path, {**two_listeners(), "max.connections": "6"})
    internal_port = listeners_on(b)
    b.start()  # its own readiness check used one connection, closed since
    try:
        socks = [connect(b.port) for _ in range(10)]  # accepted in order, as slots allow
        # the first 5 are let in (a 6th slot may still be the readiness check's, closing)
        assert all(api_versions(s, 1, WAIT) for s in socks[:5])
        for s in socks[6:]:
            s.sendall(encode_request(18, 0, 1, "limits", {}))
        time.sleep(2.0)
        assert not any(has_data(s) for s in socks[6:]), "more than max.connections were served"
        with closing(Connection(HOST, internal_port, timeout=WAIT)) as internal:  # the protected listener
            internal.send(3, {"topics": []}, version=1)
        waiting = socks[-1]
        for s in socks[:5]:
            s.close()
        waiting.settimeout(WAIT)
        assert struct.unpack(">i", read_frame(waiting)[:4])[0] == 1  # accepted at last, its request answered
        for s in socks:
            s.close()
    finally:
        b.stop()


def test_running_out_of_file_descriptors_is_survived(broker: Broker, prober: Prober) -> None:
    """Regression (failed before: accept failing with EMFILE left the listener readable, so the loop
    retried at once, forever: a CPU spinning and a warning per try, thousands a second). Now accepting
    pauses and retries every 100 ms with one warning per 10 s; connected clients go on being served,
    and the waiting connections are accepted once descriptors free up."""
    pid = broker.pid
    soft, hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)
    log_before = len(broker.log())
    fds = broker.open_fds()
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (fds + 20, hard))
    socks = []
    try:
        for _ in range(200):  # well past the 20 free, whatever earlier tests still hold while closing
            socks.append(connect(broker.port))
        # a request waits in the last one from the start, so once accepted it is never idle
        socks[-1].sendall(encode_request(18, 0, 9, "limits", {}))
        served = len(prober.latencies)
        time.sleep(2.0)
        assert prober.wait_served(10)
        assert len(prober.latencies) > served
        warnings = broker.log()[log_before:].count("accept failed")
        assert 1 <= warnings <= 10, f"{warnings} 'accept failed' lines"
    finally:
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (soft, hard))
    try:
        socks[-1].settimeout(WAIT)  # accepted once there were descriptors again, its request answered
        assert struct.unpack(">i", read_frame(socks[-1])[:4])[0] == 9
    finally:
        for s in socks:
            s.close()


def test_big_frames_over_tls_grow_as_they_arrive(tmp_path) -> None:
    """The TLS read path grows big-frame buffers the same way: a 5 MB Produce sent over TLS in
    uneven pieces lands whole, and 5 TLS peers claiming 100 MB each cost far less than 500 MB."""
    from tests.security.conftest import tls_settings
    from tests.security.pki import make_pki

    pki = make_pki(tmp_path / "pki")
    b = Broker(tmp_path, {**tls_settings(pki), "message.max.bytes": str(8 * MiB)})
    ssl_port = listeners_on(b, "PLAINTEXT", "SSL")
    b.start()
    context = ssl.create_default_context(cafile=str(pki.ca))
    context.check_hostname = False

    def tls_connect() -> ssl.SSLSocket:
        s = context.wrap_socket(socket.create_connection((HOST, ssl_port), timeout=WAIT))
        s.settimeout(WAIT)
        return s
    try:
        create_topic(b.bootstrap)
        value = os.urandom(5 * MiB)
        frame = encode_request(0, 7, 7, "tls-pieces", produce_body(bytes(build_batch([(b"k", value, 1)]))))
        s = tls_connect()
        try:
            pos, step = 0, 1000
            while pos < len(frame):
                s.sendall(frame[pos:pos + step])
                pos += step
                step = step * 3 + 7
                time.sleep(0.01)
            _, body = decode_response(0, 7, read_frame(s))
            part = body.responses[0].partition_responses[0]
            assert part.error_code == 0
        finally:
            s.close()
        with closing(Connection(HOST, b.port, timeout=WAIT)) as conn:
            fetched = conn.send(1, fetch_body(part.base_offset, 8 * MiB), version=11)
        assert value in bytes(fetched.responses[0].partitions[0].records)
        baseline = start_abuse(b)
        claimers = [tls_connect() for _ in range(5)]
        try:
            for c in claimers:
                c.sendall(struct.pack(">i", MAX_REQUEST - 1) + b"\0" * 65536)
            time.sleep(1.0)
            with closing(Connection(HOST, b.port, timeout=WAIT)) as conn:
                conn.send(3, {"topics": []}, version=1)
            grown = b.peak_mb() - baseline
            assert grown < 200, f"peak RSS grew {grown:.0f} MB for 5 TLS claimers that sent 64 KiB each"
        finally:
            for c in claimers:
                c.close()
    finally:
        b.stop()
