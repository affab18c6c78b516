"""__consumer_offsets is compacted like any compact topic: a commit storm on one group leaves the
partition small, and the group still reads its latest offsets after a restart."""
from __future__ import annotations

import time

from confluent_kafka import Consumer, TopicPartition

from kbroker.coordinator.group.offsets_log import partition_for

from .helpers import create_topic


def _size(broker, partition: int) -> int:
    directory = broker.dirs / f"__consumer_offsets-{partition}"
    return sum(p.stat().st_size for p in directory.glob("*.log"))


def test_commit_storm_leaves_the_offsets_partition_small(broker_factory):
    broker = broker_factory({"offsets.topic.segment.bytes": "65536", "log.cleaner.backoff.ms": "100",
                             "log.retention.check.interval.ms": "200", "offsets.topic.num.partitions": "5"})
    create_topic(broker.bootstrap, "stormed", 2)
    answered: list = []
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "storm", "enable.auto.commit": False,
                         "on_commit": lambda err, partitions: answered.append(err)})
    commits = 20_000
    for i in range(commits):
        consumer.commit(offsets=[TopicPartition("stormed", 0, i), TopicPartition("stormed", 1, 2 * i)],
                        asynchronous=True)
        if i % 1000 == 0:
            consumer.poll(0)
    # Every async commit answered before the last one: librdkafka retries a commit that failed on a loaded
    # machine, and a retry landing after the final commit would rightly be what the group keeps.
    deadline = time.monotonic() + 120
    while len(answered) < commits and time.monotonic() < deadline:
        consumer.poll(0.1)
    assert len(answered) == commits, f"{len(answered)} of {commits} async commits answered"
    consumer.commit(offsets=[TopicPartition("stormed", 0, commits), TopicPartition("stormed", 1, 2 * commits)],
                    asynchronous=False)
    consumer.close()
    partition = partition_for("storm", 5)
    written = commits * 2 * 60  # two offset records of ~60 bytes per commit, before compaction
    deadline = time.monotonic() + 60
    while _size(broker, partition) > written // 10 and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _size(broker, partition) <= written // 10, f"{_size(broker, partition)} bytes left of ~{written}"
    broker.restart()
    reader = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "storm", "enable.auto.commit": False})
    committed = reader.committed([TopicPartition("stormed", 0), TopicPartition("stormed", 1)], timeout=30)
    reader.close()
    assert [(tp.partition, tp.offset) for tp in committed] == [(0, commits), (1, 2 * commits)]
