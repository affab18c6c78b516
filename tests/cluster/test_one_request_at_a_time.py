"""One request at a time per connection on a 3-broker cluster (offsets topic replication factor 3), as Kafka's
SocketServer serves a connection: a request is handled only once the previous one's response is sent, so a
request sent right behind one that waits for the ISR sees what that one did. Before, kbroker handled the
second request while the first still waited (answering in order but deciding out of order):

- librdkafka's consumer commits asynchronously, then asks ``committed()``: it read an older offset;
- an OffsetCommit then an OffsetFetch pipelined on one socket: the fetch answered the offset before it;
- a Produce with acks=all then a Fetch on one socket: the fetch did not return the records, the high
  watermark not having moved yet."""
from __future__ import annotations

import socket
import struct
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from bench.reliability.abuse import fetch_body, produce_body
from kbroker.log.batches import build_batch, iter_batches
from kbroker.protocol import decode_response, encode_request
from tests.cluster.conftest import Cluster, wait_until
from tests.cluster.helpers import wait_until_served

OFFSETS_PARTITIONS = 5  # fewer than Kafka's 50, for a fast start; replicated 3 ways as by default
RUNS = 20
MESSAGES = 50


@pytest.fixture(scope="module")
def cluster(zookeeper_server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(zookeeper_server, tmp_path_factory.mktemp("one-at-a-time"), overrides={
        "offsets.topic.replication.factor": "3", "offsets.topic.num.partitions": str(OFFSETS_PARTITIONS)})
    try:
        c.start()
        yield c
    finally:
        c.stop()


def create_topic(cluster: Cluster, name: str) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(name, 1, 3)])[name].result(30)
    wait_until_served(cluster, name, 1, 3, timeout=60)


def _exactly(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        more = sock.recv(n - len(out))
        assert more, "the broker closed the connection"
        out += more
    return bytes(out)


class Pipeline:
    """A raw socket that sends several requests at once and reads their answers in order."""

    def __init__(self, host: str, port: int) -> None:
        self.sock = socket.create_connection((host, port), 30)
        self.correlation = 0

    def send_all(self, *requests: tuple[int, int, dict]) -> list[Any]:
        frames, expected = [], []
        for api_key, version, body in requests:
            self.correlation += 1
            frames.append(bytes(encode_request(api_key, version, self.correlation, "pipeline", body)))
            expected.append((api_key, version, self.correlation))
        self.sock.sendall(b"".join(frames))  # one write: the broker reads them together
        answers = []
        for api_key, version, correlation in expected:
            size = struct.unpack(">i", _exactly(self.sock, 4))[0]
            got, body = decode_response(api_key, version, _exactly(self.sock, size))
            assert got == correlation
            answers.append(body)
        return answers

    def close(self) -> None:
        self.sock.close()


def coordinator_of(cluster: Cluster, group: str) -> tuple[str, int]:
    def ask() -> tuple[str, int] | None:
        conn = Pipeline(*_host_port(next(iter(cluster.brokers.values())).bootstrap))
        try:
            (answer,) = conn.send_all((10, 1, {"key": group, "key_type": 0}))
        finally:
            conn.close()
        return (answer.host, answer.port) if answer.error_code == 0 else None
    found = wait_until(ask, 60, f"a coordinator for {group}", interval=0.3)
    assert isinstance(found, tuple)
    return found


def _host_port(bootstrap: str) -> tuple[str, int]:
    host, port = bootstrap.rsplit(":", 1)
    return host, int(port)


def leader_of(cluster: Cluster, topic: str) -> tuple[str, int]:
    md = AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(topic, timeout=10)
    leader = md.topics[topic].partitions[0].leader
    return _host_port(cluster.brokers[leader].bootstrap)


def test_an_offset_fetch_pipelined_behind_a_commit_answers_the_committed_offset(cluster: Cluster) -> None:
    topic, group = f"commit-fetch-{uuid.uuid4().hex[:8]}", f"raw-{uuid.uuid4().hex[:8]}"
    create_topic(cluster, topic)
    conn = Pipeline(*coordinator_of(cluster, group))
    try:
        fetched = []
        for offset in range(1, RUNS + 1):
            commit = {"group_id": group, "generation_id": -1, "member_id": "", "retention_time_ms": -1,
                      "topics": [{"name": topic, "partitions": [
                          {"partition_index": 0, "committed_offset": offset, "committed_metadata": ""}]}]}
            ask = {"group_id": group, "topics": [{"name": topic, "partition_indexes": [0]}]}
            committed, answer = conn.send_all((8, 2, commit), (9, 2, ask))
            assert committed.topics[0].partitions[0].error_code == 0
            part = answer.topics[0].partitions[0]
            assert part.error_code == 0 and answer.error_code == 0
            fetched.append(part.committed_offset)
        assert fetched == list(range(1, RUNS + 1)), "an OffsetFetch answered before the commit ahead of it was done"
    finally:
        conn.close()


def test_a_fetch_pipelined_behind_an_acks_all_produce_returns_its_records(cluster: Cluster) -> None:
    topic = f"produce-fetch-{uuid.uuid4().hex[:8]}"
    create_topic(cluster, topic)
    conn = Pipeline(*leader_of(cluster, topic))
    try:
        for run in range(RUNS):
            records = bytes(build_batch([(None, f"value-{run}".encode(), int(time.time() * 1000))]))
            produced, fetched = conn.send_all((0, 7, produce_body(records, acks=-1, topic=topic)),
                                              (1, 11, fetch_body(run, topic=topic)))
            done = produced.responses[0].partition_responses[0]
            assert done.error_code == 0 and done.base_offset == run
            part = fetched.responses[0].partitions[0]
            assert part.error_code == 0
            assert part.high_watermark == run + 1, f"run {run}: the Fetch ran before the acks=all Produce was done"
            values = [r[5] for b in iter_batches(bytes(part.records or b"")) for r in b.records()]
            assert values == [f"value-{run}".encode()]
    finally:
        conn.close()


def test_librdkafka_reads_its_own_async_commits(cluster: Cluster) -> None:
    topic = f"async-commit-{uuid.uuid4().hex[:8]}"
    create_topic(cluster, topic)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(MESSAGES):
        producer.produce(topic, f"m{i}".encode(), partition=0)
    assert producer.flush(30) == 0
    coordinator_of(cluster, "warm-up")  # the offsets topic exists and is led before the first run
    seen = []
    for run in range(RUNS):
        consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"async-{run}-{uuid.uuid4().hex[:6]}",
                             "enable.auto.commit": False, "auto.offset.reset": "earliest"})
        try:
            # the group's coordinator found first (librdkafka holds commits until it knows it)
            (before,) = consumer.committed([TopicPartition(topic, 0)], timeout=30)
            assert before.offset < 0  # nothing committed yet
            consumer.assign([TopicPartition(topic, 0, 0)])
            got = 0
            deadline = time.monotonic() + 30
            while got < MESSAGES and time.monotonic() < deadline:
                msg = consumer.poll(0.5)
                if msg is None or msg.error():
                    continue
                got += 1
                consumer.commit(message=msg, asynchronous=True)
            assert got == MESSAGES
            (committed,) = consumer.committed([TopicPartition(topic, 0)], timeout=30)
            seen.append(committed.offset)
        finally:
            consumer.close()
    assert seen == [MESSAGES] * RUNS, f"committed() after async commits: {seen}"
