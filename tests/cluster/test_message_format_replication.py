"""A topic switched to message.format.version 0.10.0 on three brokers over ZooKeeper: followers copy
the mixed log (v2 batches, then magic-1 messages) byte for byte, and a follower that becomes leader
after the leader is killed serves both formats and goes on storing magic 1."""
from __future__ import annotations

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from kbroker._core import records
from zk_compat import layout

from .conftest import wait_until
from .helpers import consume_all, partition_state, segment_bytes, wait_until_served


def _magics(data: bytes) -> list[int]:
    headers, whole, status = records.scan_batches(data, verify_crc=True)
    assert (whole, status) == (len(data), 0)
    return [h.magic for h in headers]


def _produce(bootstrap: str, topic: str, start: int, count: int, codec: str) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "compression.type": codec,
                  "message.timeout.ms": 30000})
    failures: list = []
    for i in range(start, start + count):
        p.produce(topic, key=b"k%d" % (i % 5), value=b"m%d" % i, on_delivery=lambda e, m: e and failures.append(e))
        if i % 50 == 0:
            p.poll(0)
    assert p.flush(40) == 0 and not failures, failures


def _identical(cluster, topic: str) -> bytes:
    leader = cluster.brokers[partition_state(cluster, topic, 0).leader]
    wait_until(lambda: all(segment_bytes(b, topic, 0) == segment_bytes(leader, topic, 0)
                           for b in cluster.brokers.values() if b.running),
               timeout=30, message=f"{topic}-0 identical on every running replica")
    return segment_bytes(leader, topic, 0)


def test_followers_copy_a_mixed_format_log_and_take_over(cluster):
    topic = "mfv-replicated"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 3, config={"min.insync.replicas": "2"})])[topic].result(15)
    wait_until(lambda: (s := layout.get_partition_state(cluster.store, topic, 0)) and len(s[0].isr) == 3,
               message=f"{topic}: an ISR of 3")
    wait_until_served(cluster, topic, 1, 3)

    _produce(cluster.bootstrap, topic, 0, 300, "none")
    entries = [ConfigEntry("message.format.version", "0.10.0", incremental_operation=AlterConfigOpType.SET)]
    for future in admin.incremental_alter_configs(
            [ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=entries)]).values():
        future.result(15)
    # The other brokers take the change from ZooKeeper's /config/changes, as Kafka's do: the producer goes on
    # writing until the leader stores magic 1.
    leader = cluster.brokers[partition_state(cluster, topic, 0).leader]
    sent = 300
    while _magics(segment_bytes(leader, topic, 0))[-1] != 1:
        assert sent < 600, "the leader never took message.format.version=0.10.0"
        _produce(cluster.bootstrap, topic, sent, 10, "none")
        sent += 10
    _produce(cluster.bootstrap, topic, sent, 600 - sent, "gzip")
    _produce(cluster.bootstrap, topic, 600, 100, "none")

    data = _identical(cluster, topic)
    magics = _magics(data)
    assert magics[0] == 2 and magics[-1] == 1 and magics == sorted(magics, reverse=True)
    got = consume_all(cluster.bootstrap, topic, 1, 700)[0]
    assert got == [(i, b"m%d" % i) for i in range(700)]

    old_leader = partition_state(cluster, topic, 0).leader
    cluster.brokers[old_leader].kill()
    wait_until(lambda: partition_state(cluster, topic, 0).leader not in (old_leader, -1), timeout=30,
               message="a follower elected leader")
    _produce(cluster.bootstrap, topic, 700, 100, "lz4")
    new_leader = cluster.brokers[partition_state(cluster, topic, 0).leader]
    assert _magics(segment_bytes(new_leader, topic, 0))[-1] == 1, "the new leader stores magic 1 too"
    got = consume_all(cluster.bootstrap, topic, 1, 800)[0]
    assert got == [(i, b"m%d" % i) for i in range(800)]

    cluster.brokers[old_leader].start()  # recovers its mixed log, then catches up as a follower
    wait_until(lambda: len(partition_state(cluster, topic, 0).isr) == 3, timeout=40,
               message="the old leader back in the ISR")
    assert _identical(cluster, topic)[:len(data)] == data
