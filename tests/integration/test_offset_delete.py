"""OffsetDelete (47) through the admin clients of kafka-python and librdkafka (confluent-kafka's): a group whose
member subscribes to one topic keeps that topic's offsets (GROUP_SUBSCRIBED_TO_TOPIC) and loses
the others'; an unknown group is GROUP_ID_NOT_FOUND; an emptied group loses what it is asked to."""
from __future__ import annotations

import ctypes
from pathlib import Path

import confluent_kafka
import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition as CTP

from .clients import wait_for
from .conftest import _make_broker
from .helpers import create_topic

SUBSCRIBED, OTHER = "od-subscribed", "od-other"


def _consumer(bootstrap: str, group: str) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                     "auto.offset.reset": "earliest"})


def committed(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    c = _consumer(bootstrap, group)
    try:
        tps = [CTP(t, p) for t in (SUBSCRIBED, OTHER) for p in (0, 1)]
        return {(tp.topic, tp.partition): tp.offset for tp in c.committed(tps, 30) if tp.offset >= 0}
    finally:
        c.close()


@pytest.fixture(scope="module")
def topics(module_broker):
    for name in (SUBSCRIBED, OTHER):
        create_topic(module_broker.bootstrap, name, 2)
    return module_broker.bootstrap


@pytest.fixture
def active_group(topics, request):
    """A group with one live member subscribed to SUBSCRIBED and offsets on both topics."""
    group = f"od-{request.node.name}"
    member = _consumer(topics, group)
    member.subscribe([SUBSCRIBED])
    wait_for(lambda: member.poll(0.1) is None and bool(member.assignment()), what="an assignment")
    member.commit(offsets=[CTP(SUBSCRIBED, 0, 3), CTP(SUBSCRIBED, 1, 4), CTP(OTHER, 0, 5), CTP(OTHER, 1, 6)],
                  asynchronous=False)
    yield group, member
    member.close()


def test_kafka_python_delete_group_offsets(topics, active_group):
    from kafka import KafkaAdminClient, TopicPartition
    from kafka.errors import GroupIdNotFoundError, GroupSubscribedToTopicError, NoError

    group, member = active_group
    admin = KafkaAdminClient(bootstrap_servers=topics)
    try:
        result = admin.delete_group_offsets(group, [TopicPartition(SUBSCRIBED, 0), TopicPartition(OTHER, 1)])
        assert result == {TopicPartition(SUBSCRIBED, 0): GroupSubscribedToTopicError,
                          TopicPartition(OTHER, 1): NoError}
        assert committed(topics, group) == {(SUBSCRIBED, 0): 3, (SUBSCRIBED, 1): 4, (OTHER, 0): 5}
        with pytest.raises(GroupIdNotFoundError):
            admin.delete_group_offsets("od-no-such-group", [TopicPartition(OTHER, 0)])
        member.close()  # the group is Empty now: everything may go
        result = admin.delete_group_offsets(group, [TopicPartition(SUBSCRIBED, 0)])
        assert result == {TopicPartition(SUBSCRIBED, 0): NoError}
        assert committed(topics, group) == {(SUBSCRIBED, 1): 4, (OTHER, 0): 5}
    finally:
        admin.close()


class _PartitionList(ctypes.Structure):
    _fields_ = [("cnt", ctypes.c_int), ("size", ctypes.c_int), ("elems", ctypes.c_void_p)]


class _Partition(ctypes.Structure):
    _fields_ = [("topic", ctypes.c_char_p), ("partition", ctypes.c_int32), ("offset", ctypes.c_int64),
                ("metadata", ctypes.c_void_p), ("metadata_size", ctypes.c_size_t), ("opaque", ctypes.c_void_p),
                ("err", ctypes.c_int), ("_private", ctypes.c_void_p)]


def _librdkafka() -> ctypes.CDLL:
    """The librdkafka that confluent-kafka ships: its Python binding (2.16) has no
    delete_consumer_group_offsets, so its C admin call rd_kafka_DeleteConsumerGroupOffsets is used."""
    libs = Path(confluent_kafka.__file__).resolve().parent.parent / "confluent_kafka.libs"
    lib = ctypes.CDLL(str(next(libs.glob("librdkafka*.so*"))))
    vp = ctypes.c_void_p
    for name, restype, argtypes in [
        ("rd_kafka_conf_new", vp, []),
        ("rd_kafka_conf_set", ctypes.c_int, [vp, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]),
        ("rd_kafka_new", vp, [ctypes.c_int, vp, ctypes.c_char_p, ctypes.c_size_t]),
        ("rd_kafka_destroy", None, [vp]),
        ("rd_kafka_topic_partition_list_new", vp, [ctypes.c_int]),
        ("rd_kafka_topic_partition_list_add", vp, [vp, ctypes.c_char_p, ctypes.c_int32]),
        ("rd_kafka_topic_partition_list_destroy", None, [vp]),
        ("rd_kafka_DeleteConsumerGroupOffsets_new", vp, [ctypes.c_char_p, vp]),
        ("rd_kafka_DeleteConsumerGroupOffsets_destroy", None, [vp]),
        ("rd_kafka_DeleteConsumerGroupOffsets", None, [vp, ctypes.POINTER(vp), ctypes.c_size_t, vp, vp]),
        ("rd_kafka_queue_new", vp, [vp]),
        ("rd_kafka_queue_destroy", None, [vp]),
        ("rd_kafka_queue_poll", vp, [vp, ctypes.c_int]),
        ("rd_kafka_event_error", ctypes.c_int, [vp]),
        ("rd_kafka_event_destroy", None, [vp]),
        ("rd_kafka_event_DeleteConsumerGroupOffsets_result", vp, [vp]),
        ("rd_kafka_DeleteConsumerGroupOffsets_result_groups", ctypes.POINTER(vp),
         [vp, ctypes.POINTER(ctypes.c_size_t)]),
        ("rd_kafka_event_error_string", ctypes.c_char_p, [vp]),
        ("rd_kafka_group_result_error", vp, [vp]),
        ("rd_kafka_error_code", ctypes.c_int, [vp]),
        ("rd_kafka_group_result_partitions", ctypes.POINTER(_PartitionList), [vp]),
    ]:
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = restype, argtypes
    return lib


def librdkafka_delete_offsets(bootstrap: str, group: str, partitions: list[tuple[str, int]]
                              ) -> tuple[int, dict[tuple[str, int], int]]:
    """(group-level error, {(topic, partition): error}) as librdkafka's admin API reports them."""
    lib = _librdkafka()
    errstr = ctypes.create_string_buffer(512)
    conf = lib.rd_kafka_conf_new()
    assert lib.rd_kafka_conf_set(conf, b"bootstrap.servers", bootstrap.encode(), errstr, 512) == 0, errstr.value
    rk = lib.rd_kafka_new(0, conf, errstr, 512)  # RD_KAFKA_PRODUCER; it owns conf from now on
    assert rk, errstr.value
    queue = lib.rd_kafka_queue_new(rk)
    try:
        plist = lib.rd_kafka_topic_partition_list_new(len(partitions))
        for topic, partition in partitions:
            lib.rd_kafka_topic_partition_list_add(plist, topic.encode(), partition)
        request = ctypes.c_void_p(lib.rd_kafka_DeleteConsumerGroupOffsets_new(group.encode(), plist))
        lib.rd_kafka_topic_partition_list_destroy(plist)
        lib.rd_kafka_DeleteConsumerGroupOffsets(rk, ctypes.byref(request), 1, None, queue)
        lib.rd_kafka_DeleteConsumerGroupOffsets_destroy(request)
        event = lib.rd_kafka_queue_poll(queue, 30_000)
        assert event, "no answer within 30 s"
        try:
            top = lib.rd_kafka_event_error(event)
            result = lib.rd_kafka_event_DeleteConsumerGroupOffsets_result(event)
            count = ctypes.c_size_t()
            groups = lib.rd_kafka_DeleteConsumerGroupOffsets_result_groups(result, ctypes.byref(count))
            if count.value == 0:  # a group-level error fails the request as a whole
                assert top, lib.rd_kafka_event_error_string(event)
                return top, {}
            error = lib.rd_kafka_group_result_error(groups[0])
            top = top or (lib.rd_kafka_error_code(error) if error else 0)
            answered = lib.rd_kafka_group_result_partitions(groups[0])
            out = {}
            if answered:
                elems = ctypes.cast(answered.contents.elems, ctypes.POINTER(_Partition))
                for i in range(answered.contents.cnt):
                    out[(elems[i].topic.decode(), elems[i].partition)] = elems[i].err
            return top, out
        finally:
            lib.rd_kafka_event_destroy(event)
    finally:
        lib.rd_kafka_queue_destroy(queue)
        lib.rd_kafka_destroy(rk)


def test_librdkafka_delete_consumer_group_offsets(topics, active_group):
    group, member = active_group
    top, codes = librdkafka_delete_offsets(topics, group, [(SUBSCRIBED, 1), (OTHER, 0)])
    assert (top, codes) == (0, {(SUBSCRIBED, 1): KafkaError.GROUP_SUBSCRIBED_TO_TOPIC, (OTHER, 0): 0})
    assert committed(topics, group) == {(SUBSCRIBED, 0): 3, (SUBSCRIBED, 1): 4, (OTHER, 1): 6}
    top, _ = librdkafka_delete_offsets(topics, "od-no-such-group", [(OTHER, 0)])
    assert top == KafkaError.GROUP_ID_NOT_FOUND
    member.close()  # its LeaveGroup empties the group: everything may go
    top, codes = librdkafka_delete_offsets(topics, group, [(SUBSCRIBED, 0), (SUBSCRIBED, 1), (OTHER, 1)])
    assert (top, codes) == (0, {(SUBSCRIBED, 0): 0, (SUBSCRIBED, 1): 0, (OTHER, 1): 0})
    assert committed(topics, group) == {}


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory):
    """Everyone may do anything no ACL names (librdkafka's trivup setup); the tests add DENYs."""
    yield from _make_broker(tmp_path_factory.mktemp("acl"), {
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "allow.everyone.if.no.acl.found": "true", "super.users": "User:admin"})


def _deny(bootstrap: str, rtype, name: str, op) -> None:
    from confluent_kafka.admin import AclBinding, AclPermissionType, AdminClient, ResourcePatternType

    acl = AclBinding(rtype, name, ResourcePatternType.LITERAL, "User:ANONYMOUS", "*", op, AclPermissionType.DENY)
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the answer is in
    for future in admin.create_acls([acl]).values():
        assert future.result(15) is None


def test_acls_delete_on_the_group_and_read_on_each_topic(acl_broker):
    from confluent_kafka.admin import AclOperation, ResourceType
    from kafka import KafkaAdminClient, TopicPartition
    from kafka.errors import GroupAuthorizationFailedError, NoError, TopicAuthorizationFailedError

    bootstrap, group, secret = acl_broker.bootstrap, "od-acl-group", "od-acl-secret"
    for name in (secret, OTHER):
        create_topic(bootstrap, name, 1)
    c = _consumer(bootstrap, group)
    c.commit(offsets=[CTP(secret, 0, 1), CTP(OTHER, 0, 2)], asynchronous=False)
    c.close()
    _deny(bootstrap, ResourceType.TOPIC, secret, AclOperation.READ)
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        result = wait_for(lambda: admin.delete_group_offsets(group, [TopicPartition(secret, 0),
                                                                     TopicPartition(OTHER, 0)]),
                          what="an OffsetDelete answer")
        assert result == {TopicPartition(secret, 0): TopicAuthorizationFailedError,
                          TopicPartition(OTHER, 0): NoError}
        _deny(bootstrap, ResourceType.GROUP, group, AclOperation.DELETE)
        with pytest.raises(GroupAuthorizationFailedError):
            admin.delete_group_offsets(group, [TopicPartition(secret, 0)])
    finally:
        admin.close()
