"""AlterIsr (56), which a Kafka 2.8 ZooKeeper-mode broker advertises and its active controller serves
(KafkaController.processAlterIsr): raw requests, as a partition leader would send them, to the
controller and to another broker of a three-broker cluster over a real ZooKeeper."""
from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.cluster.conftest import Cluster, wait_until
from tests.cluster.helpers import wait_until_served
from tests.raw_client import request
from zk_compat import layout

NONE, UNKNOWN_TOPIC_OR_PARTITION, NOT_CONTROLLER = 0, 3, 41
FENCED_LEADER_EPOCH, STALE_BROKER_EPOCH, INVALID_UPDATE_VERSION = 74, 77, 95


@pytest.fixture(scope="module")
def cluster(zookeeper_server, tmp_path_factory) -> Iterator[Cluster]:
    c = Cluster(zookeeper_server, tmp_path_factory.mktemp("alter-isr"))
    try:
        c.start()
        admin = AdminClient({"bootstrap.servers": c.bootstrap})
        for topic in ("isr-a", "isr-b"):
            admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=-1,
                                          replica_assignment=[[1, 2]])])[topic].result(30)
            wait_until_served(c, topic, 1, 2, timeout=30)
        yield c
    finally:
        c.stop()


def _controller(cluster: Cluster) -> int:
    found = layout.get_controller_id(cluster.store)
    assert found is not None
    return found


def _epoch(cluster: Cluster, broker_id: int) -> int:
    return cluster.store.get(f"/brokers/ids/{broker_id}")[1].czxid


def _alter(cluster: Cluster, to: int, broker_id: int, broker_epoch: int, partitions: dict[str, dict]):
    body = {"broker_id": broker_id, "broker_epoch": broker_epoch, "topics": [
        {"name": topic, "partitions": [dict(p, partition_index=0)]} for topic, p in partitions.items()]}
    return request(cluster.brokers[to].bootstrap, 56, 0, body)


def _answers(response) -> dict[str, tuple]:
    return {t.name: (p.error_code, p.leader_id, p.leader_epoch, list(p.isr), p.current_isr_version)
            for t in response.topics for p in t.partitions}


def test_refusals(cluster: Cluster):
    controller = _controller(cluster)
    other = next(b for b in cluster.brokers if b != controller)
    state, stat = layout.get_partition_state(cluster.store, "isr-a", 0)
    ask = {"leader_epoch": state.leader_epoch, "new_isr": [1], "current_isr_version": stat.version}
    assert _alter(cluster, other, 1, _epoch(cluster, 1), {"isr-a": ask}).error_code == NOT_CONTROLLER
    stale = _alter(cluster, controller, 1, _epoch(cluster, 1) - 1, {"isr-a": ask})
    assert (stale.error_code, stale.topics) == (STALE_BROKER_EPOCH, [])

    answer = _alter(cluster, controller, 1, _epoch(cluster, 1), {
        "isr-a": dict(ask, current_isr_version=stat.version + 5),             # the znode moved on
        "isr-b": dict(ask, leader_epoch=-1),                                   # an older leader epoch
        "isr-none": ask})
    assert answer.error_code == NONE
    codes = {name: a[0] for name, a in _answers(answer).items()}
    assert codes == {"isr-a": INVALID_UPDATE_VERSION, "isr-b": FENCED_LEADER_EPOCH,
                     "isr-none": UNKNOWN_TOPIC_OR_PARTITION}
    assert layout.get_partition_state(cluster.store, "isr-a", 0) == (state, stat)  # nothing written

    same = _alter(cluster, controller, state.leader, _epoch(cluster, state.leader),
                  {"isr-a": dict(ask, new_isr=list(state.isr))})
    assert _answers(same) == {"isr-a": (NONE, state.leader, state.leader_epoch, list(state.isr), stat.version)}


def test_a_change_is_written_and_announced(cluster: Cluster):
    controller = _controller(cluster)
    state, stat = layout.get_partition_state(cluster.store, "isr-b", 0)
    leader = state.leader
    answer = _alter(cluster, controller, leader, _epoch(cluster, leader), {
        "isr-b": {"leader_epoch": state.leader_epoch, "new_isr": [leader], "current_isr_version": stat.version}})
    assert _answers(answer) == {"isr-b": (NONE, leader, state.leader_epoch, [leader], stat.version + 1)}
    written, written_stat = layout.get_partition_state(cluster.store, "isr-b", 0)
    assert (written.leader, written.isr, written_stat.version) == (leader, [leader], stat.version + 1)

    def metadata_shows_it() -> bool:  # the controller's UpdateMetadata, after the ISR change notification
        md = AdminClient({"bootstrap.servers": cluster.brokers[3].bootstrap}).list_topics("isr-b", timeout=10)
        return list(md.topics["isr-b"].partitions[0].isrs) == [leader]
    wait_until(metadata_shows_it, 30, "broker 3's Metadata to show the new ISR")
