"""Every API version kbroker advertises above Kafka 2.8.0's maximum must behave as Kafka's does at
that version. ``ABOVE_2_8`` is the audit (what each extra version adds, checked below against a
real broker); advertising a new version above 2.8 without adding it here fails the first test.
"""
from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from kbroker.protocol import SUPPORTED_VERSIONS
from tests.raw_client import request

# Kafka 2.8.0's ApiVersions (ZooKeeper broker): the max version of each key it advertises.
KAFKA_2_8_MAX = {
    0: 9, 1: 12, 2: 6, 3: 11, 4: 5, 5: 3, 6: 7, 7: 3, 8: 8, 9: 7, 10: 3, 11: 7, 12: 4, 13: 4, 14: 5, 15: 5,
    16: 4, 17: 1, 18: 3, 19: 7, 20: 6, 21: 2, 22: 4, 23: 4, 24: 3, 25: 3, 26: 3, 27: 1, 28: 3, 29: 2, 30: 2,
    31: 2, 32: 4, 33: 2, 34: 2, 35: 2, 36: 2, 37: 3, 38: 2, 39: 2, 40: 2, 41: 2, 42: 2, 43: 2, 44: 1, 45: 0,
    46: 0, 47: 0, 48: 1, 49: 1, 50: 0, 51: 0, 56: 0, 57: 0, 60: 0, 61: 0,
}

# key: (our max, what the versions above 2.8 add; each is exercised by a test below)
ABOVE_2_8 = {
    2: (7, "ListOffsets v7 (3.0, KIP-734): timestamp -3 asks for the record with the largest timestamp"),
    3: (12, "Metadata v12 (3.1, KIP-516): topics may be named by id (name null); unknown ids get "
            "UNKNOWN_TOPIC_ID; response topic names nullable"),
    9: (8, "OffsetFetch v8 (3.0, KIP-709): several groups in one request, each with its own error"),
    10: (4, "FindCoordinator v4 (3.0, KIP-699): several coordinator keys in one request, per-key errors"),
}


def test_every_version_above_2_8_is_audited():
    above = {key: high for key, (low, high) in SUPPORTED_VERSIONS.items() if high > KAFKA_2_8_MAX.get(key, -1)}
    assert above == {key: high for key, (high, _) in ABOVE_2_8.items()}, (
        "an API version above Kafka 2.8's is advertised without an audit entry (or an audited one changed)")


# -- the extra versions against a real broker ------------------------------------------------------

@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    from tests.integration.conftest import _make_broker

    yield from _make_broker(Path(tmp_path_factory.mktemp("audit")))


def call(broker, api_key: int, version: int, body: dict):
    return request(broker.bootstrap, api_key, version, body)


def _topic(broker, name: str, partitions: int = 2) -> None:
    from tests.integration.helpers import create_topic

    create_topic(broker.bootstrap, name, partitions)


def test_metadata_v12_by_topic_id(broker):
    _topic(broker, "audit-by-id")
    named = call(broker, 3, 12, {"topics": [{"topic_id": uuid.UUID(int=0), "name": "audit-by-id"}],
                                 "allow_auto_topic_creation": False, "include_topic_authorized_operations": False})
    topic_id = named.topics[0].topic_id
    assert named.topics[0].error_code == 0 and topic_id.int != 0

    unknown = uuid.uuid4()
    by_id = call(broker, 3, 12, {"topics": [{"topic_id": topic_id, "name": None}, {"topic_id": unknown, "name": None}],
                                 "allow_auto_topic_creation": True, "include_topic_authorized_operations": False})
    found = {t.topic_id: t for t in by_id.topics}
    assert set(found) == {topic_id, unknown}
    assert found[topic_id].error_code == 0 and found[topic_id].name == "audit-by-id"
    assert sorted(p.partition_index for p in found[topic_id].partitions) == [0, 1]
    assert found[unknown].error_code == 100 and found[unknown].name is None and not found[unknown].partitions


def test_offset_fetch_v8_several_groups(broker):
    from confluent_kafka import Consumer, TopicPartition

    _topic(broker, "audit-offsets")
    for group, offset in (("audit-g1", 5), ("audit-g2", 7)):
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
        try:
            consumer.commit(offsets=[TopicPartition("audit-offsets", 1, offset)], asynchronous=False)
        finally:
            consumer.close()
    response = call(broker, 9, 8, {"groups": [
        {"group_id": "audit-g1", "topics": [{"name": "audit-offsets", "partition_indexes": [0, 1]}]},
        {"group_id": "audit-g2", "topics": None},
        {"group_id": "audit-none", "topics": None}], "require_stable": False})
    groups = {g.group_id: g for g in response.groups}
    assert [g.error_code for g in response.groups] == [0, 0, 0]
    g1 = {p.partition_index: p.committed_offset for t in groups["audit-g1"].topics for p in t.partitions}
    assert g1 == {0: -1, 1: 5}
    g2 = {(t.name, p.partition_index): p.committed_offset for t in groups["audit-g2"].topics for p in t.partitions}
    assert g2 == {("audit-offsets", 1): 7}
    assert not groups["audit-none"].topics


def test_find_coordinator_v4_several_keys(broker):
    response = call(broker, 10, 4, {"key_type": 0, "coordinator_keys": ["audit-a", "audit-b"]})
    assert [c.key for c in response.coordinators] == ["audit-a", "audit-b"]
    for c in response.coordinators:
        assert (c.error_code, c.node_id, c.port) == (0, 0, broker.port)
