"""Every version of the controller's requests a Kafka 2.8 broker serves (LeaderAndIsr 0-5, StopReplica
0-3, UpdateMetadata 0-7) is answered by a broker of a ZooKeeper cluster, not dropped with the
connection: a controller epoch older than the current one is STALE_CONTROLLER_EPOCH (11), in the
version's own answer shape. StopReplica v3 (KIP-570) refuses a stop whose leader epoch is not newer
than the replica's with FENCED_LEADER_EPOCH (74) and leaves the replica in place."""
from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.cluster.conftest import Cluster
from tests.cluster.helpers import partition_state, wait_until_served
from tests.raw_client import request
from zk_compat import layout

STALE_CONTROLLER_EPOCH, FENCED_LEADER_EPOCH = 11, 74
TOPIC = "ctl"


@pytest.fixture(scope="module")
def cluster(zookeeper_server, tmp_path_factory) -> Iterator[Cluster]:
    c = Cluster(zookeeper_server, tmp_path_factory.mktemp("control-versions"))
    try:
        c.start()
        admin = AdminClient({"bootstrap.servers": c.bootstrap})
        admin.create_topics([NewTopic(TOPIC, num_partitions=1, replication_factor=-1,
                                      replica_assignment=[[1, 2]])])[TOPIC].result(30)
        wait_until_served(c, TOPIC, 1, 2, timeout=30)
        yield c
    finally:
        c.stop()


def _state(version_has_topic: bool) -> dict:
    state = {"partition_index": 0, "controller_epoch": 0, "leader": 1, "leader_epoch": 0, "isr": [1, 2],
             "zk_version": 0, "replicas": [1, 2]}
    return dict(state, topic_name=TOPIC) if version_has_topic else state


@pytest.mark.parametrize("version", range(6))
def test_leader_and_isr_every_version(cluster: Cluster, version: int):
    body: dict = {"controller_id": 1, "controller_epoch": 0, "broker_epoch": -1, "live_leaders": []}
    if version < 2:
        body["ungrouped_partition_states"] = [_state(True)]
    else:
        body["topic_states"] = [{"topic_name": TOPIC, "topic_id": uuid.uuid4(), "partition_states": [_state(False)]}]
    answer = request(cluster.brokers[2].bootstrap, 4, version, body)
    assert answer.error_code == STALE_CONTROLLER_EPOCH
    assert (answer.partition_errors if version < 5 else answer.topics) == []


@pytest.mark.parametrize("version", range(8))
def test_update_metadata_every_version(cluster: Cluster, version: int):
    body: dict = {"controller_id": 1, "controller_epoch": 0, "broker_epoch": -1, "live_brokers": [
        {"id": 1, "v0_host": "127.0.0.1", "v0_port": 1, "rack": None, "endpoints": [
            {"port": 1, "host": "127.0.0.1", "listener": "PLAINTEXT", "security_protocol": 0}]}]}
    if version < 5:
        body["ungrouped_partition_states"] = [_state(True)]
    else:
        body["topic_states"] = [{"topic_name": TOPIC, "topic_id": uuid.uuid4(), "partition_states": [_state(False)]}]
    assert request(cluster.brokers[2].bootstrap, 6, version, body).error_code == STALE_CONTROLLER_EPOCH


@pytest.mark.parametrize("version", range(4))
def test_stop_replica_every_version(cluster: Cluster, version: int):
    body = {"controller_id": 1, "controller_epoch": 0, "broker_epoch": -1, "delete_partitions": False,
            "ungrouped_partitions": [{"topic_name": TOPIC, "partition_index": 0}],
            "topics": [{"name": TOPIC, "partition_indexes": [0]}],
            "topic_states": [{"topic_name": TOPIC, "partition_states": [
                {"partition_index": 0, "leader_epoch": 0, "delete_partition": False}]}]}
    answer = request(cluster.brokers[2].bootstrap, 5, version, body)
    assert (answer.error_code, answer.partition_errors) == (STALE_CONTROLLER_EPOCH, [])


def test_stop_replica_v3_fences_a_stale_leader_epoch(cluster: Cluster):
    found = layout.get_controller_epoch(cluster.store)
    assert found is not None
    controller_epoch = found[0]
    state = partition_state(cluster, TOPIC, 0)
    follower = cluster.brokers[2]
    answer = request(follower.bootstrap, 5, 3, {
        "controller_id": state.leader, "controller_epoch": controller_epoch, "broker_epoch": -1, "topic_states": [
            {"topic_name": TOPIC, "partition_states": [
                {"partition_index": 0, "leader_epoch": state.leader_epoch, "delete_partition": True}]}]})
    assert answer.error_code == 0
    assert [(p.topic_name, p.partition_index, p.error_code) for p in answer.partition_errors] == [
        (TOPIC, 0, FENCED_LEADER_EPOCH)]
    assert (follower.dirs / f"{TOPIC}-0").is_dir()  # neither stopped nor deleted
    wait_until_served(cluster, TOPIC, 1, 2, timeout=30)
