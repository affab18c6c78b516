"""Helpers shared by the cluster tests: a partition's state in ZooKeeper, reading a topic back
whole, and a replica's segment bytes."""
from __future__ import annotations

import time

from confluent_kafka import Consumer, TopicPartition

from zk_compat import layout


def partition_state(cluster, topic: str, partition: int):
    found = layout.get_partition_state(cluster.store, topic, partition)
    assert found is not None
    return found[0]


def consume_all(bootstrap: str, topic: str, partitions: int, expected: int, timeout: float = 60) -> dict:
    """partition -> [(offset, value)] from offset 0 until ``expected`` records, then 2 s more:
    anything beyond what was expected would be a duplicate."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{topic}-{time.time_ns()}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "topic.metadata.refresh.interval.ms": 1000})
    got: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(partitions)}
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        deadline = time.monotonic() + timeout
        while sum(map(len, got.values())) < expected and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            got[msg.partition()].append((msg.offset(), msg.value()))
        quiet = time.monotonic() + 2
        while time.monotonic() < quiet:
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                got[msg.partition()].append((msg.offset(), msg.value()))
    finally:
        consumer.close()
    return got


def segment_bytes(broker, topic: str, partition: int) -> bytes:
    directory = broker.dirs / f"{topic}-{partition}"
    return b"".join(p.read_bytes() for p in sorted(directory.glob("*.log")))


def wait_until_served(cluster, topic: str, partitions: int, isr: int, timeout: float = 20) -> None:
    """Every broker's Metadata shows each partition with a leader and ``isr`` in-sync replicas:
    the controller's LeaderAndIsr/UpdateMetadata have arrived, not just the znodes."""
    from confluent_kafka.admin import AdminClient

    deadline = time.monotonic() + timeout
    for broker in cluster.brokers.values():
        if not broker.running:
            continue
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        while True:
            md = admin.list_topics(topic, timeout=10).topics.get(topic)
            if md is not None and not md.error and len(md.partitions) == partitions and all(
                    p.leader >= 0 and len(p.isrs) == isr for p in md.partitions.values()):
                break
            if time.monotonic() > deadline:
                raise AssertionError(f"{topic}: not served with a leader and {isr} in-sync replicas "
                                     f"by broker {broker.port} within {timeout}s")
            time.sleep(0.1)
