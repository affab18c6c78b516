"""CreateTopics and DeleteTopics of 100 topics at once on a 3-broker cluster that already holds 500 (issue 31):
each answers within the clients' default timeouts (librdkafka's and Kafka's AdminClient: 30 s for a request's
own timeout_ms), with every topic created (led, on every broker's Metadata) or deleted (on none).

Before topics were written in batches, each topic was a few ZooKeeper round trips queued behind the cluster view's
reads: on a cluster of 400 topics a CreateTopics of 100 ran past librdkafka's 60 s."""
from __future__ import annotations

import time

from confluent_kafka.admin import AdminClient, NewTopic

from .conftest import wait_until

HELD = 500
BATCH = 100
DEFAULT_TIMEOUT_S = 30.0  # Kafka's request.timeout.ms; librdkafka answers with a 60 s socket timeout


def _create(admin: AdminClient, names: list[str], partitions: int, replication: int) -> float:
    started = time.monotonic()
    futures = admin.create_topics([NewTopic(n, num_partitions=partitions, replication_factor=replication)
                                   for n in names], operation_timeout=DEFAULT_TIMEOUT_S)
    for name, future in futures.items():
        assert future.result(2 * DEFAULT_TIMEOUT_S) is None, name
    return time.monotonic() - started


def test_a_hundred_topics_are_created_and_deleted_at_once_beside_five_hundred(cluster):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    held = [f"held-{i}" for i in range(HELD)]
    for i in range(0, HELD, BATCH):
        _create(admin, held[i:i + BATCH], 1, 1)
    new = [f"new-{i}" for i in range(BATCH)]
    seconds = _create(admin, new, 4, 3)
    assert seconds < DEFAULT_TIMEOUT_S, f"CreateTopics of {BATCH} answered in {seconds:.1f} s"
    for broker_id, broker in cluster.brokers.items():  # answered once visible: no wait here
        topics = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=10).topics
        missing = [n for n in held + new if n not in topics]
        assert not missing, f"broker {broker_id} does not list {missing[:5]}"
        unled = [(n, p.id) for n in new for p in topics[n].partitions.values() if p.leader < 0]
        assert len([n for n in new if len(topics[n].partitions) == 4]) == BATCH and not unled, unled[:5]

    started = time.monotonic()
    for name, future in admin.delete_topics(new, operation_timeout=DEFAULT_TIMEOUT_S).items():
        assert future.result(2 * DEFAULT_TIMEOUT_S) is None, name
    seconds = time.monotonic() - started
    assert seconds < DEFAULT_TIMEOUT_S, f"DeleteTopics of {BATCH} answered in {seconds:.1f} s"
    for broker_id, broker in cluster.brokers.items():
        topics = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=10).topics
        assert not set(new) & set(topics), f"broker {broker_id} still lists deleted topics"
        assert set(held) <= set(topics)
    wait_until(lambda: not set(new) & set(cluster.store.get_children("/brokers/topics")), 30,
               "the deleted topics gone from ZooKeeper")
