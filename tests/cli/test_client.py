"""The admin client in-process: version negotiation, both sides of version-dependent requests,
consumer assignment bytes, and one-line failures (refused, silent, hanging-up brokers)."""
from __future__ import annotations

import socket
import struct
import threading

import pytest
from confluent_kafka import Consumer, TopicPartition as CkTopicPartition

from kbroker.protocol import API_KEYS, SUPPORTED_VERSIONS
from kbroker.tools.client import AdminClient, ConnectError, KafkaApiError, TopicPartition, decode_consumer_assignment

from .conftest import free_port

# the oldest version of each API whose shape the client handles differently
OLDEST = {"Metadata": 1, "ListOffsets": 0, "FindCoordinator": 0, "DescribeGroups": 0, "OffsetFetch": 2,
          "ListGroups": 0, "DescribeConfigs": 0, "CreateTopics": 0, "DeleteTopics": 0, "CreatePartitions": 0}


def _string(s: str) -> bytes:
    return struct.pack(">h", len(s)) + s.encode()


def test_decode_consumer_assignment():
    data = (struct.pack(">h", 1) + struct.pack(">i", 2)
            + _string("a") + struct.pack(">iii", 2, 0, 2)
            + _string("bb") + struct.pack(">ii", 1, 7)
            + struct.pack(">i", 3) + b"xyz")  # user data
    assert decode_consumer_assignment(data) == [TopicPartition("a", 0), TopicPartition("a", 2),
                                                TopicPartition("bb", 7)]
    assert decode_consumer_assignment(data[:-12]) == [TopicPartition("a", 0), TopicPartition("a", 2)]
    assert decode_consumer_assignment(b"") == [] and decode_consumer_assignment(None) == []


def test_versions_are_the_overlap(broker):
    with AdminClient(broker.bootstrap) as admin:
        conn = admin.connection()
        assert conn.versions[API_KEYS["Metadata"]] == SUPPORTED_VERSIONS[API_KEYS["Metadata"]]
        assert all(SUPPORTED_VERSIONS[k][0] <= lo <= hi <= SUPPORTED_VERSIONS[k][1]
                   for k, (lo, hi) in conn.versions.items())


@pytest.fixture(scope="module")
def committed_group(broker):
    """A topic with 2 partitions and 3 records in partition 1, and an Empty group that committed 2 there."""
    from .conftest import run_cli
    topic, group = "cli-client-topic", "cli-client-group"
    r = run_cli("topics", "--bootstrap-server", broker.bootstrap, "--create", "--topic", topic, "--partitions", "2",
                "--config", "retention.bytes=123456")
    assert r.returncode == 0, r.stderr
    from confluent_kafka import Producer
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for _ in range(3):
        producer.produce(topic, value=b"x", partition=1)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    consumer.commit(offsets=[CkTopicPartition(topic, 1, 2)], asynchronous=False)
    consumer.close()
    return topic, group


@pytest.mark.parametrize("oldest", [False, True], ids=["newest", "oldest"])
def test_calls_at_newest_and_oldest_versions(broker, committed_group, oldest, unique):
    topic, group = committed_group
    with AdminClient(broker.bootstrap, timeout=10) as admin:
        conn = admin.connection()
        if oldest:
            for name, v in OLDEST.items():
                lo, hi = conn.versions[API_KEYS[name]]
                assert lo <= v <= hi
                conn.versions[API_KEYS[name]] = (lo, v)
        assert topic in [t.name for t in admin.list_topics()]
        meta = admin.metadata([topic, "cli-client-absent"])
        by_name = {t.name: t for t in meta.topics}
        assert len(by_name[topic].partitions) == 2 and by_name["cli-client-absent"].error_code == 3
        assert "cli-client-absent" not in [t.name for t in admin.list_topics()]  # not auto-created

        offsets = admin.list_offsets([TopicPartition(topic, 0), TopicPartition(topic, 1), TopicPartition(topic, 9)])
        assert offsets[TopicPartition(topic, 0)] == 0 and offsets[TopicPartition(topic, 1)] == 3
        assert isinstance(offsets[TopicPartition(topic, 9)], KafkaApiError)
        assert offsets[TopicPartition(topic, 9)].name == "UNKNOWN_TOPIC_OR_PARTITION"

        assert admin.fetch_offsets(group) == {TopicPartition(topic, 1): 2}
        described = admin.describe_group(group)
        assert (described.group_state, described.members) == ("Empty", [])
        assert admin.describe_group("cli-client-nobody").group_state == "Dead"
        assert group in [g.group_id for g in admin.list_groups()]

        configs = admin.describe_topic_configs([topic])[topic]
        assert [(c.name, c.value) for c in configs.configs if not c.is_default] == [("retention.bytes", "123456")]

        name = unique("lifecycle")
        assert [r.error_code for r in admin.create_topics([{"name": name, "num_partitions": 1,
                                                             "replication_factor": 1}])] == [0]
        again = admin.create_topics([{"name": name, "num_partitions": 1, "replication_factor": 1}])
        assert [KafkaApiError(r.error_code).name for r in again] == ["TOPIC_ALREADY_EXISTS"]
        assert [r.error_code for r in admin.create_partitions({name: 2})] == [0]
        assert len(admin.metadata([name]).topics[0].partitions) == 2
        assert [r.error_code for r in admin.delete_topics([name])] == [0]
        assert admin.metadata([name]).topics[0].error_code == 3


def test_connection_refused():
    port = free_port()
    with pytest.raises(ConnectError) as e:
        AdminClient(f"127.0.0.1:{port}").metadata()
    assert str(e.value) == f"cannot connect to 127.0.0.1:{port}: connection refused"


def _fake_broker(behaviour):
    """A listening socket whose one connection gets `behaviour(conn)`; returns (port, thread)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)

    def serve():
        with server:
            conn, _ = server.accept()
            with conn:
                behaviour(conn)
    t = threading.Thread(target=serve, daemon=True)
    t.start()
    return server.getsockname()[1], t


def test_a_silent_broker_times_out():
    done = threading.Event()
    port, t = _fake_broker(lambda conn: done.wait(10))
    try:
        with pytest.raises(ConnectError) as e:
            AdminClient(f"127.0.0.1:{port}", timeout=0.5).metadata()
        assert str(e.value) == f"no answer from 127.0.0.1:{port} to the ApiVersions request within 0.5 s"
    finally:
        done.set()
        t.join(5)


def test_a_broker_hanging_up():
    port, t = _fake_broker(lambda conn: conn.recv(100))
    with pytest.raises(ConnectError) as e:
        AdminClient(f"127.0.0.1:{port}", timeout=5).metadata()
    assert str(e.value) == f"127.0.0.1:{port} closed the connection during the ApiVersions request"
    t.join(5)


def test_a_wrong_correlation_id():
    def reply(conn):
        conn.recv(1000)
        conn.sendall(struct.pack(">iih", 6, 12345, 0))
        conn.recv(100)
    port, t = _fake_broker(reply)
    with pytest.raises(ConnectError) as e:
        AdminClient(f"127.0.0.1:{port}", timeout=5).metadata()
    assert str(e.value) == f"127.0.0.1:{port} answered correlation id 12345 to request 1"
    t.join(5)
