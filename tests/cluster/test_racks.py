"""Rack-aware replica placement (Kafka's assignReplicasToBrokers with racks): with broker.rack set
on every broker, each partition's replicas span as many racks as the replication factor allows."""
from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from zk_compat import layout

from .conftest import Cluster, wait_until

RACKS = {1: "rack-a", 2: "rack-b", 3: "rack-b"}


@pytest.fixture(scope="module")
def cluster(zookeeper_server, tmp_path_factory) -> Iterator[Cluster]:
    c = Cluster(zookeeper_server, tmp_path_factory.mktemp("racks"))
    for broker_id, rack in RACKS.items():
        c.brokers[broker_id].overrides["broker.rack"] = rack
    try:
        c.start()
        yield c
    finally:
        c.stop()


def test_replicas_spread_over_racks(cluster):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("racked", num_partitions=6, replication_factor=2)])["racked"].result(15)
    admin.create_partitions([NewPartitions("racked", 9)])["racked"].result(15)
    assignment = wait_until(lambda: (a := layout.get_topic_assignment(cluster.store, "racked")) and
                            len(a.partitions) == 9 and a, message="9 partitions")
    for partition, replicas in assignment.partitions.items():
        assert {RACKS[r] for r in replicas} == {"rack-a", "rack-b"}, (partition, replicas)
    md = admin.list_topics(timeout=10)
    assert {b.id for b in md.brokers.values()} == {1, 2, 3}
