"""Kafka's ZooKeeper operations (zk_compat.layout) end to end on every store: the bytes Kafka
writes, registration, cluster and broker ids, controller election and fencing, topics, partition
state, configs, notifications, producer-id blocks and ZooKeeper-era consumer offsets."""
from __future__ import annotations

import base64
import json
import random
import re
import threading

import pytest

from tests.store_contract.backends import CountingStore
from zk_compat import layout
from zk_compat.errors import (
    InvalidReplicaAssignmentError,
    InvalidTopicError,
    TopicAlreadyExistsError,
    TopicAlreadyMarkedForDeletionError,
    UnknownTopicOrPartitionError,
)
from zk_compat.layout import BrokerIdInUseError, ControllerMovedError
from zk_compat.store import BadVersionError, NodeExistsError
from zk_compat.znodes import (
    PERSISTENT_ZK_PATHS,
    BrokerIdZNode,
    BrokerInfo,
    ConfigEntityChangeNotificationSequenceZNode,
    ConfigEntityZNode,
    ControllerZNode,
    EndPoint,
    PartitionState,
    ProducerIdBlock,
    TopicAssignment,
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


def in_threads(work, *args_per_thread) -> None:
    """Run ``work(*args)`` for each args tuple, each in a thread of its own, all at once."""
    threads = [threading.Thread(target=work, args=args) for args in args_per_thread]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def test_ensure_persistent_paths_is_idempotent_with_null_data(store):
    layout.ensure_persistent_paths(store)
    layout.ensure_persistent_paths(store)
    for path in PERSISTENT_ZK_PATHS:
        assert store.get(path)[0] is None
    assert store.get_children("/config") == ["brokers", "changes", "clients", "ips", "topics", "users"]


# --- brokers -------------------------------------------------------------------------------------

def test_register_broker_writes_kafkas_bytes_in_an_ephemeral_at_version_1(kafka):
    info = broker(1, rack="r1")
    epoch = layout.register_broker(kafka, info)
    data, stat = kafka.get("/brokers/ids/1")
    assert data == BrokerIdZNode.encode(info)
    assert json.loads(data)["host"] == "kafka1" and json.loads(data)["rack"] == "r1"
    assert stat.version == 1 and stat.ephemeral_owner == kafka.session_id and epoch == stat.czxid
    assert layout.register_broker(kafka, info) == epoch  # our own registration stands
    assert layout.get_all_brokers(kafka) == {1: info}
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


def test_generated_broker_ids_start_above_reserved_max_in_every_session(backend, kafka):
    other = backend.connect()
    assert layout.generate_broker_id(kafka) == 1001
    assert layout.generate_broker_id(other) == 1002
    assert kafka.get("/brokers/seqid")[0] == b""
    other.close()


def test_generate_broker_id_creates_seqid_if_missing(store):
    assert layout.generate_broker_id(store, reserved_broker_max_id=5) == 6


# --- cluster id ----------------------------------------------------------------------------------

def test_cluster_id_is_created_once_in_kafkas_format(backend, kafka):
    cluster_id = layout.get_or_create_cluster_id(kafka, rng=random.Random(1))
    assert re.fullmatch(r"[A-Za-z0-9_-]{22}", cluster_id)
    raw = base64.urlsafe_b64decode(cluster_id + "==")
    assert len(raw) == 16 and raw[6] >> 4 == 4  # a version 4 UUID
    other = backend.connect()
    assert layout.get_or_create_cluster_id(other) == cluster_id
    other.close()
    assert kafka.get("/cluster/id")[0] == b'{"version":"1","id":"%s"}' % cluster_id.encode()


# --- controller ----------------------------------------------------------------------------------

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
    sessions = [kafka] + [backend.connect() for _ in range(5)]
    outcomes = {}

    def run(i, session):
        try:
            outcomes[i] = layout.register_controller_and_increment_epoch(session, i)
        except ControllerMovedError:
            outcomes[i] = None

    in_threads(run, *enumerate(sessions))
    winners = [i for i, result in outcomes.items() if result is not None]
    assert len(winners) == 1
    assert layout.get_controller_id(kafka) == winners[0]
    assert layout.get_controller_epoch(kafka)[0] == 1
    for s in sessions[1:]:
        s.close()


def test_resign_controller_deletes_the_znode(kafka):
    _, zk_version = layout.register_controller_and_increment_epoch(kafka, 3)
    layout.resign_controller(kafka, zk_version)
    assert kafka.exists("/controller") is None


def test_enable_feature_versioning(kafka):
    assert layout.enable_feature_versioning(kafka).status == 1
    assert kafka.get("/feature")[0] == b'{"features":{},"version":1,"status":1}'
    kafka.set("/feature", b'{"version":1,"status":0,"features":{}}')
    layout.enable_feature_versioning(kafka)
    assert kafka.exists("/feature").version == 2
    layout.enable_feature_versioning(kafka)
    assert kafka.exists("/feature").version == 2  # already enabled: untouched


# --- topics --------------------------------------------------------------------------------------

def test_create_topic_writes_assignment_and_config_like_admin_zk_client(kafka):
    topic_id = layout.create_topic(kafka, "orders", {0: [1, 2], 1: [2, 1]}, {"retention.ms": "1000"},
                                   rng=random.Random(3))
    assert re.fullmatch(r"[A-Za-z0-9_-]{22}", topic_id)
    data, _ = kafka.get("/brokers/topics/orders")
    assert data == TopicZNode.encode(TopicAssignment({0: [1, 2], 1: [2, 1]}, topic_id=topic_id))
    assert data == TopicZNode.encode(layout.get_topic_assignment(kafka, "orders"))
    assert json.loads(data)["topic_id"] == topic_id and json.loads(data)["partitions"] == {"0": [1, 2], "1": [2, 1]}
    assert kafka.get("/config/topics/orders")[0] == ConfigEntityZNode.encode({"retention.ms": "1000"}) == \
        b'{"version":1,"config":{"retention.ms":"1000"}}'
    assert kafka.get_children("/config/changes") == []  # creation writes no change notification
    assignment = layout.get_topic_assignment(kafka, "orders")
    assert assignment.partitions == {0: [1, 2], 1: [2, 1]} and assignment.topic_id == topic_id
    assert layout.get_topic_assignments(kafka) == {"orders": assignment}
    assert layout.get_all_topics(kafka) == ["orders"]


def test_create_topic_without_configs_still_writes_the_config_node(kafka):
    layout.create_topic(kafka, "t", {0: [1]})
    assert kafka.get("/config/topics/t")[0] == b'{"version":1,"config":{}}'


def test_create_topic_refusals(kafka):
    layout.create_topic(kafka, "my.topic", {0: [1]})
    with pytest.raises(TopicAlreadyExistsError):
        layout.create_topic(kafka, "my.topic", {0: [1]})
    with pytest.raises(InvalidTopicError, match="collides"):
        layout.create_topic(kafka, "my_topic", {0: [1]})
    with pytest.raises(InvalidTopicError):
        layout.create_topic(kafka, "bad/name", {0: [1]})
    with pytest.raises(InvalidReplicaAssignmentError, match="consecutive"):
        layout.create_topic(kafka, "t1", {1: [1]})
    with pytest.raises(InvalidReplicaAssignmentError, match="Duplicate"):
        layout.create_topic(kafka, "t2", {0: [1, 1]})
    with pytest.raises(InvalidReplicaAssignmentError, match="same number"):
        layout.create_topic(kafka, "t3", {0: [1, 2], 1: [1]})
    assert kafka.exists("/config/topics/t1") is None  # nothing written on refusal


def test_topic_deletion_requests(kafka):
    with pytest.raises(UnknownTopicOrPartitionError):
        layout.mark_topic_for_deletion(kafka, "nope")
    layout.create_topic(kafka, "gone", {0: [1]})
    layout.create_partition_state(kafka, "gone", 0, PartitionState(1, 0, [1], 1))
    layout.mark_topic_for_deletion(kafka, "gone")
    assert kafka.get("/admin/delete_topics/gone")[0] is None
    with pytest.raises(TopicAlreadyMarkedForDeletionError):
        layout.mark_topic_for_deletion(kafka, "gone")
    with pytest.raises(TopicAlreadyExistsError):
        layout.create_topic(kafka, "gone", {0: [1]})
    assert layout.get_topics_marked_for_deletion(kafka) == ["gone"]
    layout.delete_topic_znodes(kafka, "gone")
    for path in ("/brokers/topics/gone", "/config/topics/gone", "/admin/delete_topics/gone"):
        assert kafka.exists(path) is None
    layout.create_topic(kafka, "gone", {0: [1]})  # the name is free again


def test_many_topics_are_created_in_three_round_trips_each_refused_alone(kafka):
    """CreateTopics' whole request (layout.create_topics): one listing of topics and of deletion requests, every
    config node in one pipelined round, every topic node in another; each refusal is that topic's alone, and the
    znodes are create_topic's."""
    layout.create_topic(kafka, "old.one", {0: [1]})
    layout.create_topic(kafka, "doomed", {0: [1]})
    layout.mark_topic_for_deletion(kafka, "doomed")
    counted = CountingStore(kafka)
    wanted = [layout.NewTopicZNodes(f"t{i}", {0: [1, 2], 1: [2, 1]}, {"retention.ms": str(i)}) for i in range(50)]
    refused = [layout.NewTopicZNodes("old.one", {0: [1]}), layout.NewTopicZNodes("old_one", {0: [1]}),
               layout.NewTopicZNodes("doomed", {0: [1]}), layout.NewTopicZNodes("bad/name", {0: [1]}),
               layout.NewTopicZNodes("gaps", {1: [1]}), layout.NewTopicZNodes("t7", {0: [1]}),
               layout.NewTopicZNodes("x.y", {0: [1]}), layout.NewTopicZNodes("x_y", {0: [1]})]
    outcomes = layout.create_topics(counted, wanted + refused, rng=random.Random(1))
    assert counted.calls == {"get_children": 2, "multi_pipelined": 2}
    ids, errors = outcomes[:50], outcomes[50:]
    assert all(isinstance(i, str) and re.fullmatch(r"[A-Za-z0-9_-]{22}", i) for i in ids)
    assert [type(e) for e in errors] == [TopicAlreadyExistsError, InvalidTopicError, TopicAlreadyExistsError,
                                         InvalidTopicError, InvalidReplicaAssignmentError, TopicAlreadyExistsError,
                                         str, InvalidTopicError]
    for i, topic_id in enumerate(ids):
        assert kafka.get(f"/brokers/topics/t{i}")[0] == TopicZNode.encode(
            TopicAssignment({0: [1, 2], 1: [2, 1]}, topic_id=topic_id))
        assert kafka.get(f"/config/topics/t{i}")[0] == ConfigEntityZNode.encode({"retention.ms": str(i)})
    for name in ("old_one", "bad/name", "gaps", "x_y"):
        assert kafka.exists(f"/config/topics/{name}") is None  # nothing written on refusal
    assert layout.get_topic_assignment(kafka, "old.one").partitions == {0: [1]}


def test_a_left_over_config_node_is_overwritten_by_a_batch_creation(kafka):
    kafka.create("/config/topics/again", ConfigEntityZNode.encode({"cleanup.policy": "compact"}))
    assert isinstance(layout.create_topics(kafka, [layout.NewTopicZNodes("again", {0: [1]})])[0], str)
    assert kafka.get("/config/topics/again")[0] == ConfigEntityZNode.encode({})


def test_many_topics_are_marked_for_deletion_in_two_round_trips(kafka):
    for name in ("a", "b", "c"):
        layout.create_topic(kafka, name, {0: [1]})
    layout.mark_topic_for_deletion(kafka, "c")
    counted = CountingStore(kafka)
    outcomes = layout.mark_topics_for_deletion(counted, ["a", "nope", "b", "c", "a"])
    assert counted.calls == {"get_children": 1, "multi_pipelined": 1}
    assert [type(o) for o in outcomes] == [type(None), UnknownTopicOrPartitionError, type(None),
                                           TopicAlreadyMarkedForDeletionError, TopicAlreadyMarkedForDeletionError]
    assert sorted(layout.get_topics_marked_for_deletion(kafka)) == ["a", "b", "c"]


def test_a_topics_partition_states_are_created_in_one_fenced_multi(kafka):
    """The controller's write for a new topic (Kafka's createTopicPartitionStatesRaw, pipelined): every state in
    one round trip; where a controller before us created some, the rest are created one by one; a stale
    controller epoch writes nothing."""
    layout.create_topic(kafka, "wide", {p: [1, 2] for p in range(4)})
    _, zk_version = layout.register_controller_and_increment_epoch(kafka, 1)
    states = {p: PartitionState(leader=1, leader_epoch=0, isr=[1, 2], controller_epoch=1) for p in range(4)}
    with pytest.raises(ControllerMovedError):
        layout.create_partition_states(kafka, "wide", states, controller_epoch_zk_version=zk_version + 1)
    assert kafka.exists("/brokers/topics/wide/partitions") is None
    layout.create_partition_state(kafka, "wide", 2, states[2], controller_epoch_zk_version=zk_version)
    assert layout.create_partition_states(kafka, "wide", states, controller_epoch_zk_version=zk_version) == [0, 1, 3]
    assert layout.create_partition_states(kafka, "wide", states, controller_epoch_zk_version=zk_version) == []
    layout.create_topic(kafka, "fresh", {p: [1] for p in range(3)})
    fresh = {p: PartitionState(1, 0, [1], 1) for p in range(3)}
    assert layout.create_partition_states(kafka, "fresh", fresh, controller_epoch_zk_version=zk_version) == [0, 1, 2]
    for topic, expected in (("wide", states), ("fresh", fresh)):
        for p, state in expected.items():
            assert kafka.get(f"/brokers/topics/{topic}/partitions/{p}")[0] is None
            assert layout.get_partition_state(kafka, topic, p)[0] == state


def test_many_topics_znodes_are_deleted_in_one_pipelined_round(kafka):
    """The controller's deletion of many topics: each topic's znodes in one fenced multi built from the partitions
    it knows, all sent at once; a topic whose znodes differ (states never created, or a partition unknown to
    the caller) is still deleted whole; a stale controller epoch deletes nothing."""
    _, zk_version = layout.register_controller_and_increment_epoch(kafka, 1)
    for topic in ("a", "b", "c"):
        layout.create_topic(kafka, topic, {0: [1], 1: [1]})
        layout.mark_topic_for_deletion(kafka, topic)
    for topic in ("a", "c"):
        layout.create_partition_states(kafka, topic, {p: PartitionState(1, 0, [1], 1) for p in (0, 1)},
                                       controller_epoch_zk_version=zk_version)
    known = {"a": [0, 1], "b": [0, 1], "c": [0]}  # b has no states yet; c's partition 1 is unknown to the caller
    with pytest.raises(ControllerMovedError):
        layout.delete_topics_znodes(kafka, known, controller_epoch_zk_version=zk_version + 1)
    assert layout.get_all_topics(kafka) == ["a", "b", "c"]
    assert layout.delete_topics_znodes(kafka, known, controller_epoch_zk_version=zk_version) == ["a", "b", "c"]
    assert layout.get_all_topics(kafka) == [] and layout.get_topics_marked_for_deletion(kafka) == []
    for topic in ("a", "b", "c"):
        assert kafka.exists(f"/config/topics/{topic}") is None


def test_set_topic_assignment_for_added_partitions(kafka):
    layout.create_topic(kafka, "t", {0: [1, 2]}, topic_id="hT3mGhJ5R0ui7eYU2nUb0Q")
    current = layout.get_topic_assignment(kafka, "t")
    added = layout.assign_replicas_for_new_partitions(current.partitions, [1, 2, 3], 3)
    grown = TopicAssignment({**current.partitions, **added}, topic_id=current.topic_id)
    layout.set_topic_assignment(kafka, "t", grown, expected_version=0)
    assert layout.get_topic_assignment(kafka, "t").partitions == {0: [1, 2], 1: [2, 3], 2: [3, 1]}
    with pytest.raises(BadVersionError):
        layout.set_topic_assignment(kafka, "t", grown, expected_version=0)


# --- partition state -----------------------------------------------------------------------------

def test_partition_state_from_creation_to_the_controllers_deletion_of_the_topic(kafka):
    layout.create_topic(kafka, "orders", {0: [1, 2], 1: [2, 1]})
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
    stat = layout.set_partition_state(kafka, "orders", 0, shrunk, 0, controller_epoch_zk_version=zk_version)
    assert stat.version == 1
    with pytest.raises(BadVersionError):  # a stale zkVersion loses the compare-and-set
        layout.set_partition_state(kafka, "orders", 0, state, 0)
    assert layout.get_partition_state(kafka, "orders", 0)[0] == shrunk
    assert layout.get_partition_state(kafka, "orders", 9) is None

    layout.mark_topic_for_deletion(kafka, "orders")
    assert layout.get_topics_marked_for_deletion(kafka) == ["orders"]
    layout.delete_topic_znodes(kafka, "orders", controller_epoch_zk_version=zk_version)
    assert layout.get_all_topics(kafka) == [] and layout.get_topics_marked_for_deletion(kafka) == []
    assert kafka.exists("/config/topics/orders") is None


# --- configs -------------------------------------------------------------------------------------

def test_change_entity_config_writes_node_then_a_sequential_notification(kafka):
    path = layout.change_entity_config(kafka, "topics", "orders", {"cleanup.policy": "compact"})
    assert path == "/config/changes/config_change_0000000000"
    assert ConfigEntityChangeNotificationSequenceZNode.decode(kafka.get(path)[0]) == "topics/orders"
    assert layout.get_entity_config(kafka, "topics", "orders") == {"cleanup.policy": "compact"}
    second = layout.change_entity_config(kafka, "topics", "orders", {})
    assert second == "/config/changes/config_change_0000000001"
    assert kafka.get(second)[0] == b'{"version":2,"entity_path":"topics/orders"}'
    assert layout.get_entity_config(kafka, "topics", "orders") == {}
    assert kafka.get_children("/config/changes") == ["config_change_0000000000", "config_change_0000000001"]


def test_user_and_client_entities_are_sanitized_except_default(kafka):
    path = layout.change_entity_config(kafka, "users", "CN=alice/clients/app 1", {"producer_byte_rate": "1024"})
    assert kafka.exists("/config/users/CN%3Dalice/clients/app%201") is not None
    assert json.loads(kafka.get(path)[0])["entity_path"] == "users/CN%3Dalice/clients/app%201"
    layout.set_entity_config(kafka, "clients", "<default>", {"consumer_byte_rate": "1"})
    assert kafka.exists("/config/clients/<default>") is not None
    assert layout.get_entity_config(kafka, "users", "CN=alice/clients/app 1") == {"producer_byte_rate": "1024"}
    assert layout.get_entity_config(kafka, "brokers", "7") == {}


# --- notifications, producer ids, consumer offsets -----------------------------------------------

def test_broker_notifications(kafka):
    path = layout.create_log_dir_event_notification(kafka, 3)
    assert path == "/log_dir_event_notification/log_dir_event_0000000000"
    assert kafka.get(path)[0] == b'{"version":1,"broker":3,"event":1}'
    path = layout.create_isr_change_notification(kafka, [("t", 0)])
    assert kafka.get(path)[0] == b'{"version":1,"partitions":[{"topic":"t","partition":0}]}'


def test_producer_id_blocks_never_overlap(backend, kafka):
    other = backend.connect()
    assert layout.claim_producer_id_block(kafka, 1) == ProducerIdBlock(1, 0, 999)
    assert layout.claim_producer_id_block(other, 2) == ProducerIdBlock(2, 1000, 1999)
    assert kafka.get("/latest_producer_id_block")[0] == \
        b'{"version":1,"broker":2,"block_start":"1000","block_end":"1999"}'
    assert layout.claim_producer_id_block(kafka, 1) == ProducerIdBlock(1, 2000, 2999)
    other.close()


def test_concurrent_producer_id_claims(backend, kafka):
    sessions = [backend.connect() for _ in range(4)]
    blocks = []
    lock = threading.Lock()

    def claim(session, broker_id):
        for _ in range(10):
            block = layout.claim_producer_id_block(session, broker_id)
            with lock:
                blocks.append(block)

    in_threads(claim, *((s, i) for i, s in enumerate(sessions)))
    starts = sorted(b.block_start for b in blocks)
    assert starts == list(range(0, 40_000, 1000))
    for s in sessions:
        s.close()


def test_offset_commit_v0_rewrites_even_the_same_offset(kafka):
    stat = layout.commit_consumer_offset(kafka, "app", "orders", 0, 1234)
    assert kafka.get("/consumers/app/offsets/orders/0")[0] == b"1234"
    again = layout.commit_consumer_offset(kafka, "app", "orders", 0, 1234)
    assert again.version == stat.version + 1 and again.mtime >= stat.mtime and again.mzxid > stat.mzxid
    assert layout.get_consumer_offset(kafka, "app", "orders", 0) == 1234
    assert layout.get_consumer_offset(kafka, "app", "orders", 1) is None
    assert kafka.get("/consumers/app")[0] is None
