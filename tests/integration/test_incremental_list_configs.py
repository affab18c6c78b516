"""IncrementalAlterConfigs APPEND / SUBTRACT on list-typed configs, as Kafka's ConfigAdminManager does them,
through confluent-kafka's and kafka-python's admin clients against one real broker:

- the old list is the topic's override, else the key's (static) default; APPEND adds only values not there
  yet, SUBTRACT removes the given values (an absent one changes nothing), and the result may be the empty list;
- ``cleanup.policy=""`` is valid (DescribeConfigs shows ""), and such a log is neither deleted by retention
  nor compacted;
- APPEND / SUBTRACT on a key that is not a list is INVALID_CONFIG.
"""
from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from tests.integration.conftest import _make_broker

THROTTLE_KEYS = ("leader.replication.throttled.replicas", "follower.replication.throttled.replicas")


@pytest.fixture(scope="module")
def list_broker(tmp_path_factory) -> Iterator:
    # a quick retention pass, so a log that retention would delete from shows it within a few seconds
    yield from _make_broker(tmp_path_factory.mktemp("list-configs"), {"log.retention.check.interval.ms": "200"})


def _admin(broker) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def _topic(admin: AdminClient, configs: dict[str, str] | None = None) -> str:
    name = f"lists-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(name, 1, 1, config=configs or {})])[name].result(30)
    return name


def _alter(admin: AdminClient, topic: str, key: str, value: str, op: AlterConfigOpType) -> None:
    resource = ConfigResource(ResourceType.TOPIC, topic,
                              incremental_configs=[ConfigEntry(key, value, incremental_operation=op)])
    admin.incremental_alter_configs([resource])[resource].result(30)


def _describe(admin: AdminClient, topic: str, key: str) -> str:
    resource = ConfigResource(ResourceType.TOPIC, topic)
    return admin.describe_configs([resource])[resource].result(30)[key].value


def test_subtract_of_the_last_policy_leaves_the_empty_list(list_broker):
    admin = _admin(list_broker)
    topic = _topic(admin, {"cleanup.policy": "delete"})
    _alter(admin, topic, "cleanup.policy", "delete", AlterConfigOpType.SUBTRACT)
    assert _describe(admin, topic, "cleanup.policy") == ""
    _alter(admin, topic, "cleanup.policy", "compact", AlterConfigOpType.APPEND)  # from the empty list
    assert _describe(admin, topic, "cleanup.policy") == "compact"


def test_append_and_subtract_on_cleanup_policy_follow_kafka(list_broker):
    admin = _admin(list_broker)
    topic = _topic(admin)  # no override: the old list is the default, delete
    _alter(admin, topic, "cleanup.policy", "compact", AlterConfigOpType.APPEND)
    assert set(_describe(admin, topic, "cleanup.policy").split(",")) == {"compact", "delete"}
    _alter(admin, topic, "cleanup.policy", "compact", AlterConfigOpType.APPEND)  # already there: unchanged
    assert set(_describe(admin, topic, "cleanup.policy").split(",")) == {"compact", "delete"}
    _alter(admin, topic, "cleanup.policy", "delete", AlterConfigOpType.SUBTRACT)
    assert _describe(admin, topic, "cleanup.policy") == "compact"
    _alter(admin, topic, "cleanup.policy", "delete", AlterConfigOpType.SUBTRACT)  # absent: unchanged
    assert _describe(admin, topic, "cleanup.policy") == "compact"
    fresh = _topic(admin)
    _alter(admin, fresh, "cleanup.policy", "delete", AlterConfigOpType.SUBTRACT)  # the default's only value
    assert _describe(admin, fresh, "cleanup.policy") == ""


def test_append_adds_at_the_end_and_lists_keep_their_order(list_broker):
    """Kafka's ValidList keeps a list as written and APPEND adds after the old values (ConfigAdminManager):
    APPEND compact to the default policy is delete,compact; a policy written compact,delete stays so."""
    admin = _admin(list_broker)
    topic = _topic(admin)
    _alter(admin, topic, "cleanup.policy", "compact", AlterConfigOpType.APPEND)
    assert _describe(admin, topic, "cleanup.policy") == "delete,compact"
    written = _topic(admin, {"cleanup.policy": "compact"})
    _alter(admin, written, "cleanup.policy", "delete", AlterConfigOpType.APPEND)
    assert _describe(admin, written, "cleanup.policy") == "compact,delete"
    reversed_order = _topic(admin, {"cleanup.policy": "delete, compact"})
    assert _describe(admin, reversed_order, "cleanup.policy") == "delete,compact"


@pytest.mark.parametrize("key", THROTTLE_KEYS)
def test_append_and_subtract_on_the_throttled_replica_lists(list_broker, key):
    admin = _admin(list_broker)
    topic = _topic(admin)
    assert _describe(admin, topic, key) == ""
    _alter(admin, topic, key, "0:1", AlterConfigOpType.APPEND)
    _alter(admin, topic, key, "1:2,0:1", AlterConfigOpType.APPEND)
    assert _describe(admin, topic, key) == "0:1,1:2"
    _alter(admin, topic, key, "0:1,5:5", AlterConfigOpType.SUBTRACT)
    assert _describe(admin, topic, key) == "1:2"
    _alter(admin, topic, key, "1:2", AlterConfigOpType.SUBTRACT)
    assert _describe(admin, topic, key) == ""
    with pytest.raises(KafkaException) as refused:  # Kafka's ThrottledReplicaListValidator
        _alter(admin, topic, key, "not-a-replica", AlterConfigOpType.APPEND)
    assert refused.value.args[0].name() == "INVALID_CONFIG"
    _alter(admin, topic, key, "*", AlterConfigOpType.APPEND)
    assert _describe(admin, topic, key) == "*"


@pytest.mark.parametrize("op", [AlterConfigOpType.APPEND, AlterConfigOpType.SUBTRACT])
def test_append_or_subtract_on_a_non_list_key_is_invalid_config(list_broker, op):
    admin = _admin(list_broker)
    topic = _topic(admin)
    with pytest.raises(KafkaException) as refused:
        _alter(admin, topic, "retention.ms", "1000", op)
    assert refused.value.args[0].name() == "INVALID_CONFIG"
    assert _describe(admin, topic, "retention.ms") == str(7 * 24 * 3600_000)


def test_kafka_python_subtract_to_the_empty_policy(list_broker):
    from kafka.admin import AlterConfigOp, ConfigResource as KpResource, ConfigResourceType, KafkaAdminClient

    admin = _admin(list_broker)
    topic = _topic(admin, {"cleanup.policy": "compact,delete"})
    kp = KafkaAdminClient(bootstrap_servers=list_broker.bootstrap, request_timeout_ms=30000)
    try:
        resource = KpResource(ConfigResourceType.TOPIC, topic,
                              configs={"cleanup.policy": (AlterConfigOp.SUBTRACT, "compact,delete")})
        kp.alter_configs([resource], incremental=True, raise_on_unknown=False)
    finally:
        kp.close()
    assert _describe(admin, topic, "cleanup.policy") == ""


def test_a_log_with_the_empty_policy_is_neither_deleted_nor_compacted(list_broker):
    """retention.ms=1 deletes every rolled segment of a ``delete`` log at the next retention pass; the same
    log with ``cleanup.policy=""`` keeps every record (and every key's every version: no compaction)."""
    admin = _admin(list_broker)
    settings = {"retention.ms": "1", "segment.bytes": "1024", "min.cleanable.dirty.ratio": "0.01",
                "segment.ms": "100"}
    empty = _topic(admin, {**settings, "cleanup.policy": ""})
    deleting = _topic(admin, {**settings, "cleanup.policy": "delete"})
    producer = Producer({"bootstrap.servers": list_broker.bootstrap, "linger.ms": 0})
    for topic in (empty, deleting):
        for i in range(60):
            producer.produce(topic, key=b"same-key", value=b"v%03d" % i + b"." * 100,
                             timestamp=int(time.time() * 1000) - 3600_000)
            producer.flush(30)
    consumer = Consumer({"bootstrap.servers": list_broker.bootstrap, "group.id": uuid.uuid4().hex})
    try:
        deadline = time.monotonic() + 30
        while consumer.get_watermark_offsets(TopicPartition(deleting, 0), timeout=10)[0] == 0:
            assert time.monotonic() < deadline, "retention never deleted from the delete-policy log"
            time.sleep(0.2)
        time.sleep(1.0)  # a few more retention and cleaner passes
        assert consumer.get_watermark_offsets(TopicPartition(empty, 0), timeout=10) == (0, 60)
        consumer.assign([TopicPartition(empty, 0, 0)])
        seen = 0
        while seen < 60:
            message = consumer.poll(10)
            assert message is not None, f"only {seen} of 60 records read back"
            assert message.error() is None and message.offset() == seen
            seen += 1
    finally:
        consumer.close()
