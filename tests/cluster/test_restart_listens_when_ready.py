"""A ZooKeeper-mode broker restarted after SIGKILL refuses connections until it can answer them (issue 30).

Restarted at once, the broker recovers its logs (no clean-shutdown marker), then waits for its previous process's
registration (/brokers/ids/<id>) to expire with that session (up to zookeeper.session.timeout.ms, 18 s by default)
before it registers and reads the cluster. It used to listen from the end of recovery on and hold every request
until it had started, so librdkafka's first ApiVersions went unanswered until it timed out (10 s) instead of being
refused and retried. Kafka 2.8 binds its socket server after LogManager.startup and registers at once (a
registration of another session fails its startup rather than waiting). Now the port is bound after recovery (so
reserved, and known for the registration) and listens only once the broker serves: a connect before then is
refused (ECONNREFUSED), the first accepted one is answered at once, and a librdkafka client started with the
broker gets its metadata right after it serves.
"""
from __future__ import annotations

import errno
import os
import re
import socket
import struct
import threading
import time
from datetime import datetime

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from .conftest import Cluster

TOPIC = "restart-ready"
PARTITIONS = 2
MESSAGES = 12_000  # 10 KB each: about 120 MB in 64 KiB segments (some 1900; recovery takes 1-2 s), none flushed
# How long the previous process's registration outlives it: longer than recovery takes, so that the restarted
# broker still finds it held (recovery took 11 s here on a machine loaded by other test runs, past a 10 s timeout)
SESSION_TIMEOUT_MS = "20000"
DEADLINE = 60.0
ANSWER_WITHIN_S = 3.0  # an accepted connection's ApiVersions answer (milliseconds once the broker serves)
# librdkafka (confluent-kafka 2.16) tried its refused bootstrap connection again every 50 ms here and had its
# metadata 0.05-0.1 s after the broker served; the bound leaves room for a loaded machine
METADATA_AFTER_SERVING_S = 5.0
API_VERSIONS_V0 = struct.pack(">hhih", 18, 0, 7, 5) + b"probe"
STAMP = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\]")


class Probe(threading.Thread):
    """Connects every 50 ms until an answer comes: each attempt's time and outcome, ``refused`` (ECONNREFUSED) or
    ``answered`` after how long; an accepted connection left without an answer for 10 s is ``silent``."""

    def __init__(self, host: str, port: int) -> None:
        super().__init__(daemon=True)
        self.address = (host, port)
        self.attempts: list[tuple[float, str, float]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            started = time.time()
            sock = socket.socket()
            sock.settimeout(10.0)
            try:
                sock.connect(self.address)
            except OSError as exc:
                outcome = "refused" if exc.errno == errno.ECONNREFUSED else f"connect failed: {exc}"
                self.attempts.append((started, outcome, 0.0))
                sock.close()
                time.sleep(0.05)
                continue
            try:
                sock.sendall(struct.pack(">i", len(API_VERSIONS_V0)) + API_VERSIONS_V0)
                outcome = "answered" if sock.recv(4) else "closed"
            except TimeoutError:
                outcome = "silent"
            except OSError as exc:
                outcome = f"failed: {exc}"
            finally:
                sock.close()
            self.attempts.append((started, outcome, time.time() - started))
            if outcome == "answered":
                return


def fill(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1, config={"segment.bytes": str(64 << 10)})],
                        operation_timeout=DEADLINE)[TOPIC].result(DEADLINE)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 32_000,
                         "queue.buffering.max.kbytes": 256_000, "enable.idempotence": False})
    value = os.urandom(10_000)
    acked: list[int] = []
    for i in range(MESSAGES):
        while True:
            try:
                producer.produce(TOPIC, value=value, partition=i % PARTITIONS,
                                 on_delivery=lambda err, msg: acked.append(0 if err is None else 1))
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(DEADLINE) == 0
    assert len(acked) == MESSAGES and not any(acked)


def stamped(log: str, text: str) -> float:
    """The wall-clock time of the first line of ``log`` holding ``text``."""
    for line in log.splitlines():
        found = STAMP.match(line)
        if found and text in line:
            return datetime.strptime(found.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
    raise AssertionError(f"no line with {text!r} in the broker log")


def test_restart_after_crash_refuses_connections_until_it_serves(zookeeper_server, tmp_path):
    cluster = Cluster(zookeeper_server, tmp_path, size=1,
                      overrides={"zookeeper.session.timeout.ms": SESSION_TIMEOUT_MS})
    (broker,) = cluster.brokers.values()
    try:
        broker.start()
        fill(broker.bootstrap)
        broker.kill()  # SIGKILL: no clean-shutdown marker, the registration's session left to expire

        probe = Probe(broker.host, broker.port)
        metadata_at: list[float] = []
        client = AdminClient({"bootstrap.servers": broker.bootstrap})  # librdkafka's defaults

        def ask_metadata() -> None:
            found = client.list_topics(timeout=DEADLINE)
            metadata_at.append(time.time())
            assert TOPIC in found.topics
        asker = threading.Thread(target=ask_metadata, daemon=True)
        log_start = broker.log_path.stat().st_size
        probe.start()
        asker.start()
        broker.start()  # returns once it serves
        probe.join(DEADLINE)
        asker.join(DEADLINE)
        probe.stop.set()

        log = broker.log_path.read_bytes()[log_start:].decode(errors="replace")
        recovering = stamped(log, "no clean shutdown marker, recovering")
        waited = stamped(log, "is held by another session")
        serving = stamped(log, "started in ZooKeeper mode")

        attempts = probe.attempts
        refused = [t for t, outcome, _ in attempts if outcome == "refused"]
        assert [a for a in attempts if a[1] not in ("refused", "answered")] == [], attempts[-5:]
        # the first accepted connection is answered at once: nothing was left to wait for the broker's start
        (first_accepted,) = [a for a in attempts if a[1] == "answered"]
        assert first_accepted[2] < ANSWER_WITHIN_S, first_accepted
        assert recovering < waited < stamped(log, "listening on") <= serving, log[-4000:]
        # refused while recovering (before the port was even bound) and while waiting to register (bound)
        assert any(recovering < t < waited for t in refused) and any(waited < t < serving - 0.1 for t in refused), (
            recovering, waited, serving, attempts[:3], attempts[-3:])

        assert metadata_at, "librdkafka got no metadata"
        assert metadata_at[0] - serving < METADATA_AFTER_SERVING_S, (metadata_at[0] - serving, serving)

        # recovery kept every acknowledged record
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "restart-ready"})
        try:
            ends = [consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=DEADLINE)[1]
                    for p in range(PARTITIONS)]
        finally:
            consumer.close()
        assert sum(ends) == MESSAGES
    finally:
        cluster.stop()
