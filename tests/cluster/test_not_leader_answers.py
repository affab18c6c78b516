"""A broker that knows a partition (its Metadata has it) but does not lead it answers every
partition-level API with NOT_LEADER_OR_FOLLOWER (6), as Kafka 2.8's ReplicaManager does
(getPartitionOrError: a partition the metadata cache knows but this broker does not host, and
Partition.leaderLogIfLocal on a follower): the client refreshes its metadata and retries at the leader.
UNKNOWN_TOPIC_OR_PARTITION (3) stays for partitions the cluster does not have. DescribeProducers is
answered by any replica with a log (Kafka's Partition.activeProducerState), so a follower answers it.

Partition ``nl-0`` is on brokers 2 (leader) and 3 (follower); broker 1 only knows it."""
from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from kbroker.log.batches import build_batch
from tests.cluster.conftest import Cluster, wait_until
from tests.cluster.helpers import wait_until_served
from tests.raw_client import request

NONE, UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER = 0, 3, 6
TOPIC = "nl"


@pytest.fixture(scope="module")
def cluster(zookeeper_server, tmp_path_factory) -> Iterator[Cluster]:
    c = Cluster(zookeeper_server, tmp_path_factory.mktemp("not-leader"),
                overrides={"auto.leader.rebalance.enable": "false"})
    try:
        c.start()
        admin = AdminClient({"bootstrap.servers": c.bootstrap})
        admin.create_topics([NewTopic(TOPIC, num_partitions=1, replication_factor=-1,
                                      replica_assignment=[[2, 3]])])[TOPIC].result(30)
        wait_until_served(c, TOPIC, 1, 2, timeout=30)
        yield c
    finally:
        c.stop()


def _codes(cluster: Cluster, broker_id: int, partition: int = 0) -> dict[str, int]:
    """The error code each partition-level API answers for nl-<partition> at broker ``broker_id``."""
    bootstrap = cluster.brokers[broker_id].bootstrap
    out = {}
    batch = bytes(build_batch([(None, b"v", 1_700_000_000_000)]))
    produced = request(bootstrap, 0, 8, {"transactional_id": None, "acks": 1, "timeout_ms": 10000, "topic_data": [
        {"name": TOPIC, "partition_data": [{"index": partition, "records": batch}]}]})
    out["Produce"] = produced.responses[0].partition_responses[0].error_code
    fetched = request(bootstrap, 1, 11, {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "session_id": 0,
                                         "session_epoch": -1, "topics": [{"topic": TOPIC, "partitions": [
                                             {"partition": partition, "fetch_offset": 0,
                                              "partition_max_bytes": 1024}]}], "forgotten_topics_data": []})
    out["Fetch"] = fetched.responses[0].partitions[0].error_code
    listed = request(bootstrap, 2, 5, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": TOPIC, "partitions": [{"partition_index": partition, "timestamp": -1}]}]})
    out["ListOffsets"] = listed.topics[0].partitions[0].error_code
    epochs = request(bootstrap, 23, 3, {"replica_id": -1, "topics": [
        {"topic": TOPIC, "partitions": [{"partition": partition, "leader_epoch": 0}]}]})
    out["OffsetForLeaderEpoch"] = epochs.topics[0].partitions[0].error_code
    deleted = request(bootstrap, 21, 1, {"timeout_ms": 10000, "topics": [
        {"name": TOPIC, "partitions": [{"partition_index": partition, "offset": 0}]}]})
    out["DeleteRecords"] = deleted.topics[0].partitions[0].error_code
    producers = request(bootstrap, 61, 0, {"topics": [{"name": TOPIC, "partition_indexes": [partition]}]})
    out["DescribeProducers"] = producers.topics[0].partitions[0].error_code
    markers = request(bootstrap, 27, 0, {"markers": [
        {"producer_id": 4242, "producer_epoch": 0, "transaction_result": False, "coordinator_epoch": 0,
         "topics": [{"name": TOPIC, "partition_indexes": [partition]}]}]})
    out["WriteTxnMarkers"] = markers.markers[0].topics[0].partitions[0].error_code
    return out


def test_a_broker_that_only_knows_the_partition(cluster: Cluster):
    assert _codes(cluster, 1) == {
        "Produce": NOT_LEADER_OR_FOLLOWER, "Fetch": NOT_LEADER_OR_FOLLOWER, "ListOffsets": NOT_LEADER_OR_FOLLOWER,
        "OffsetForLeaderEpoch": NOT_LEADER_OR_FOLLOWER, "DeleteRecords": NOT_LEADER_OR_FOLLOWER,
        "DescribeProducers": NOT_LEADER_OR_FOLLOWER, "WriteTxnMarkers": NOT_LEADER_OR_FOLLOWER}


def test_a_follower(cluster: Cluster):
    assert _codes(cluster, 3) == {
        "Produce": NOT_LEADER_OR_FOLLOWER, "Fetch": NOT_LEADER_OR_FOLLOWER, "ListOffsets": NOT_LEADER_OR_FOLLOWER,
        "OffsetForLeaderEpoch": NOT_LEADER_OR_FOLLOWER, "DeleteRecords": NOT_LEADER_OR_FOLLOWER,
        "DescribeProducers": NONE, "WriteTxnMarkers": NOT_LEADER_OR_FOLLOWER}


def test_a_partition_the_cluster_lacks(cluster: Cluster):
    codes = _codes(cluster, 1, partition=7)
    assert set(codes.values()) == {UNKNOWN_TOPIC_OR_PARTITION}, codes


def test_kafka_python_delete_records_follows_a_leader_move(cluster: Cluster):
    """kafka-python routes DeleteRecords by the leader its metadata names; right after a leader move
    that is the old leader. NOT_LEADER_OR_FOLLOWER makes it refresh and retry at the new one; the
    former UNKNOWN_TOPIC_OR_PARTITION failed the call."""
    from kafka import KafkaProducer, TopicPartition
    from kafka.admin import KafkaAdminClient

    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all")
    for i in range(10):
        producer.send(TOPIC, b"m%d" % i, partition=0)
    producer.flush(30)
    producer.close()
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        tp = TopicPartition(TOPIC, 0)
        before = admin._manager.run(admin._async_get_leader_for_partitions, [tp])
        assert {leader: set(ps) for leader, ps in before.items()} == {2: {tp}}
        # move leadership to broker 3: reassign to [3, 2] and elect the preferred leader
        admin.alter_partition_reassignments({tp: [3, 2]})

        def moved() -> bool:  # ELECTION_NOT_NEEDED (ignored) until the controller has the new order
            admin.elect_leaders(0, {TOPIC: [0]})
            return set(admin._manager.run(admin._async_get_leader_for_partitions, [tp])) == {3}
        wait_until(moved, 30, "broker 3 to lead nl-0", interval=0.5)
        # the client's view right after the move, once: the old leader (as a cached metadata would say)
        real = admin._async_get_leader_for_partitions
        stale = [before]

        async def first_stale(partitions):
            return stale.pop() if stale else await real(partitions)
        admin._async_get_leader_for_partitions = first_stale
        answer = admin.delete_records({tp: 4}, timeout_ms=30000)
        assert not stale, "the stale view was not used"
        assert answer[tp]["low_watermark"] == 4 and answer[tp]["error_code"] == 0
    finally:
        admin.close()
