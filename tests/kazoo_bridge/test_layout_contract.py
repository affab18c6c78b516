"""Kafka's ZooKeeper operations (zk_compat.layout) end to end on both stores: the bytes Kafka
writes, registration, controller election and fencing, topics and partition state."""
from __future__ import annotations

import json
import threading

import pytest

from kbroker.errors import TopicAlreadyExistsError
from zk_compat import layout
from zk_compat.layout import BrokerIdInUseError, ControllerMovedError
from zk_compat.store import BadVersionError, NodeExistsError
from zk_compat.znodes import (
    PERSISTENT_ZK_PATHS,
    BrokerIdZNode,
    BrokerInfo,
    ConfigEntityZNode,
    ControllerZNode,
    EndPoint,
    PartitionState,
    TopicPartitionStateZNode,
    TopicZNode,
)


def broker(broker_id: int, rack: str | None = None) -> BrokerInfo:
    return BrokerInfo.from_endpoints(broker_id, [EndPoint("PLAINTEXT", f"kafka{broker_id}", 9092, "PLAINTEXT")],
                                     timestamp_ms=1633958339380, rack=rack)


@pytest.fixture
def kafka(store):
    layout.ensure_persistent_paths(store)
    return store


def test_ensure_persistent_paths_is_idempotent_with_null_data(store):
    layout.ensure_persistent_paths(store)
    layout.ensure_persistent_paths(store)
    for path in PERSISTENT_ZK_PATHS:
        assert store.get(path)[0] is None
    assert store.get_children("/config") == ["brokers", "changes", "clients", "ips", "topics", "users"]


def test_register_broker_writes_kafkas_bytes_in_an_ephemeral_at_version_1(kafka):
    info = broker(1, rack="r1")
    epoch = layout.register_broker(kafka, info)
    data, stat = kafka.get("/brokers/ids/1")
    assert data == BrokerIdZNode.encode(info)
    assert json.loads(data)["host"] == "kafka1" and json.loads(data)["rack"] == "r1"
    assert stat.version == 1 and stat.ephemeral_owner == kafka.session_id and epoch == stat.czxid
    assert layout.register_broker(kafka, info) == epoch  # our own registration stands
    assert layout.get_all_brokers_and_epochs(kafka) == {1: (info, epoch)}


def test_register_broker_refuses_an_id_held_by_another_live_broker(backend, kafka):
    layout.register_broker(kafka, broker(1))
    other = backend.connect()
    with pytest.raises(BrokerIdInUseError, match=r"broker id 1 is already registered by another live broker"):
        layout.register_broker(other, broker(1))
    kafka.close()
    assert layout.register_broker(other, broker(1)) > 0  # free again once its session ended
    assert other.exists("/brokers/ids/1").ephemeral_owner == other.session_id
    other.close()


def test_register_broker_replaces_its_own_previous_sessions_node(backend, kafka):
    stale = backend.connect()
    layout.register_broker(stale, broker(4))
    epoch = layout.register_broker(kafka, broker(4), previous_session_id=stale.session_id)
    assert kafka.exists("/brokers/ids/4").ephemeral_owner == kafka.session_id
    assert kafka.exists("/brokers/ids/4").czxid == epoch
    stale.close()
    assert kafka.exists("/brokers/ids/4").ephemeral_owner == kafka.session_id


def test_broker_epochs_grow_with_each_registration(backend, kafka):
    first = layout.register_broker(kafka, broker(1))
    other = backend.connect()
    second = layout.register_broker(other, broker(2))
    assert second > first
    assert layout.get_all_brokers_and_epochs(kafka) == {1: (broker(1), first), 2: (broker(2), second)}
    other.close()


def test_cluster_id_and_broker_ids(backend, kafka):
    cluster_id = layout.get_or_create_cluster_id(kafka)
    other = backend.connect()
    assert layout.get_or_create_cluster_id(other) == cluster_id
    assert layout.generate_broker_id(kafka) == 1001
    assert layout.generate_broker_id(other) == 1002
    assert kafka.get("/brokers/seqid")[0] == b""
    other.close()


def test_controller_election_between_two_sessions_and_epoch_fencing(backend, kafka):
    epoch, epoch_zk_version = layout.register_controller_and_increment_epoch(kafka, 1, timestamp_ms=1633958339380)
    assert (epoch, epoch_zk_version) == (1, 1)
    assert kafka.get("/controller")[0] == ControllerZNode.encode(1, 1633958339380) == \
        b'{"version":1,"brokerid":1,"timestamp":"1633958339380"}'
    assert kafka.get("/controller_epoch")[0] == b"1"
    assert kafka.exists("/controller").ephemeral_owner == kafka.session_id
    other = backend.connect()
    with pytest.raises(ControllerMovedError):  # the loser
        layout.register_controller_and_increment_epoch(other, 2)
    assert layout.get_controller_id(other) == 1
    kafka.close()  # the controller's session ends: /controller goes with it
    assert layout.get_controller_id(other) is None
    epoch2, zk_version2 = layout.register_controller_and_increment_epoch(other, 2)
    assert (epoch2, zk_version2) == (2, 2)
    # the old controller's fencing token no longer works
    other.create("/brokers/topics/t/partitions/0/state", b"{}", makepath=True)
    with pytest.raises(ControllerMovedError):
        layout.set_partition_state(other, "t", 0, PartitionState(1, 1, [1], 1), 0,
                                   controller_epoch_zk_version=epoch_zk_version)
    assert layout.set_partition_state(other, "t", 0, PartitionState(2, 1, [2], 2), 0,
                                      controller_epoch_zk_version=zk_version2).version == 1
    layout.resign_controller(other, zk_version2)
    assert layout.get_controller_id(other) is None
    other.close()


def test_concurrent_elections_have_exactly_one_winner(backend, kafka):
    sessions = [kafka] + [backend.connect() for _ in range(4)]
    outcomes = {}

    def run(i, session):
        try:
            outcomes[i] = layout.register_controller_and_increment_epoch(session, i)
        except ControllerMovedError:
            outcomes[i] = None

    threads = [threading.Thread(target=run, args=(i, s)) for i, s in enumerate(sessions)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [i for i, result in outcomes.items() if result is not None]
    assert len(winners) == 1
    assert layout.get_controller_id(kafka) == winners[0]
    assert layout.get_controller_epoch(kafka)[0] == 1
    for s in sessions[1:]:
        s.close()


def test_create_topic_and_partition_state(kafka):
    topic_id = layout.create_topic(kafka, "orders", {0: [1, 2], 1: [2, 1]}, {"cleanup.policy": "compact"})
    data, _ = kafka.get("/brokers/topics/orders")
    assert data == TopicZNode.encode(layout.get_topic_assignment(kafka, "orders"))
    assert json.loads(data)["topic_id"] == topic_id and json.loads(data)["partitions"] == {"0": [1, 2], "1": [2, 1]}
    assert kafka.get("/config/topics/orders")[0] == ConfigEntityZNode.encode({"cleanup.policy": "compact"})
    with pytest.raises(TopicAlreadyExistsError):
        layout.create_topic(kafka, "orders", {0: [1]})

    _, zk_version = layout.register_controller_and_increment_epoch(kafka, 1)
    state = PartitionState(leader=1, leader_epoch=0, isr=[1, 2], controller_epoch=1)
    stat = layout.create_partition_state(kafka, "orders", 0, state, controller_epoch_zk_version=zk_version)
    assert stat.version == 0
    assert kafka.get("/brokers/topics/orders/partitions")[0] is None
    assert kafka.get("/brokers/topics/orders/partitions/0")[0] is None
    assert kafka.get("/brokers/topics/orders/partitions/0/state")[0] == TopicPartitionStateZNode.encode(state)
    assert layout.get_partition_state(kafka, "orders", 0) == (state, stat)
    with pytest.raises(NodeExistsError):
        layout.create_partition_state(kafka, "orders", 0, state)
    shrunk = PartitionState(1, 0, [1], 1)
    assert layout.set_partition_state(kafka, "orders", 0, shrunk, 0, controller_epoch_zk_version=zk_version).version == 1
    with pytest.raises(BadVersionError):  # a stale zkVersion loses the compare-and-set
        layout.set_partition_state(kafka, "orders", 0, state, 0)
    assert layout.get_partition_state(kafka, "orders", 0)[0] == shrunk

    layout.mark_topic_for_deletion(kafka, "orders")
    assert layout.get_topics_marked_for_deletion(kafka) == ["orders"]
    layout.delete_topic_znodes(kafka, "orders", controller_epoch_zk_version=zk_version)
    assert layout.get_all_topics(kafka) == [] and layout.get_topics_marked_for_deletion(kafka) == []
    assert kafka.exists("/config/topics/orders") is None


def test_config_change_notifications_are_sequential(kafka):
    first = layout.change_entity_config(kafka, "topics", "t", {"retention.ms": "1000"})
    second = layout.change_entity_config(kafka, "topics", "t", {"retention.ms": "2000"})
    assert first == "/config/changes/config_change_0000000000"
    assert second == "/config/changes/config_change_0000000001"
    assert kafka.get(second)[0] == b'{"version":2,"entity_path":"topics/t"}'
    assert layout.get_entity_config(kafka, "topics", "t") == {"retention.ms": "2000"}


def test_producer_id_blocks_never_overlap(backend, kafka):
    other = backend.connect()
    blocks = [layout.claim_producer_id_block(s, i) for i, s in enumerate([kafka, other, kafka])]
    assert [(b.block_start, b.block_end) for b in blocks] == [(0, 999), (1000, 1999), (2000, 2999)]
    other.close()
