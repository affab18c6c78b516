"""What kbroker advertises in ApiVersions, key by key, against what a Kafka 2.8 broker in ZooKeeper mode
advertises.

The table: apache/kafka 2.8 ``clients/src/main/resources/common/message/*Request.json`` (``validVersions``
of every API whose ``listeners`` include ``zkBroker``; KAFKA-12278 scoped them in 2.8), which is what
``DefaultApiVersionManager`` answers for a ZooKeeper broker (Envelope (58) only when forwarding is on, which
2.8 keeps internal), as recorded from a real 2.8 broker in kafka-python 3's
``kafka/protocol/broker_version_data.py`` (``BROKER_API_VERSIONS[(2, 8)]``).

Every key at exactly Kafka's range, none above: clients pick features by the versions advertised (kafka-python
takes a broker advertising ListOffsets v7 for a 3.0, librdkafka batches FindCoordinator from v4), so a version
Kafka 2.8 lacks makes a client treat the broker as a newer Kafka (issue 30).
"""
from __future__ import annotations

import pytest

from kbroker.handlers import load_all
from kbroker.handlers.api_versions import advertised

KAFKA_2_8_ZK_BROKER: dict[int, tuple[str, int, int]] = {
    0: ("Produce", 0, 9), 1: ("Fetch", 0, 12), 2: ("ListOffsets", 0, 6), 3: ("Metadata", 0, 11),
    4: ("LeaderAndIsr", 0, 5), 5: ("StopReplica", 0, 3), 6: ("UpdateMetadata", 0, 7),
    7: ("ControlledShutdown", 0, 3), 8: ("OffsetCommit", 0, 8), 9: ("OffsetFetch", 0, 7),
    10: ("FindCoordinator", 0, 3), 11: ("JoinGroup", 0, 7), 12: ("Heartbeat", 0, 4), 13: ("LeaveGroup", 0, 4),
    14: ("SyncGroup", 0, 5), 15: ("DescribeGroups", 0, 5), 16: ("ListGroups", 0, 4), 17: ("SaslHandshake", 0, 1),
    18: ("ApiVersions", 0, 3), 19: ("CreateTopics", 0, 7), 20: ("DeleteTopics", 0, 6), 21: ("DeleteRecords", 0, 2),
    22: ("InitProducerId", 0, 4), 23: ("OffsetForLeaderEpoch", 0, 4), 24: ("AddPartitionsToTxn", 0, 3),
    25: ("AddOffsetsToTxn", 0, 3), 26: ("EndTxn", 0, 3), 27: ("WriteTxnMarkers", 0, 1),
    28: ("TxnOffsetCommit", 0, 3), 29: ("DescribeAcls", 0, 2), 30: ("CreateAcls", 0, 2), 31: ("DeleteAcls", 0, 2),
    32: ("DescribeConfigs", 0, 4), 33: ("AlterConfigs", 0, 2), 34: ("AlterReplicaLogDirs", 0, 2),
    35: ("DescribeLogDirs", 0, 2), 36: ("SaslAuthenticate", 0, 2), 37: ("CreatePartitions", 0, 3),
    38: ("CreateDelegationToken", 0, 2), 39: ("RenewDelegationToken", 0, 2), 40: ("ExpireDelegationToken", 0, 2),
    41: ("DescribeDelegationToken", 0, 2), 42: ("DeleteGroups", 0, 2), 43: ("ElectLeaders", 0, 2),
    44: ("IncrementalAlterConfigs", 0, 1), 45: ("AlterPartitionReassignments", 0, 0),
    46: ("ListPartitionReassignments", 0, 0), 47: ("OffsetDelete", 0, 0), 48: ("DescribeClientQuotas", 0, 1),
    49: ("AlterClientQuotas", 0, 1), 50: ("DescribeUserScramCredentials", 0, 0),
    51: ("AlterUserScramCredentials", 0, 0), 56: ("AlterIsr", 0, 0), 57: ("UpdateFeatures", 0, 0),
    60: ("DescribeCluster", 0, 0), 61: ("DescribeProducers", 0, 0),
}


@pytest.fixture(scope="module")
def ours() -> dict[int, tuple[int, int]]:
    load_all()
    return {k["api_key"]: (k["min_version"], k["max_version"]) for k in advertised()}


@pytest.mark.parametrize("key", sorted(KAFKA_2_8_ZK_BROKER), ids=lambda k: f"{k}-{KAFKA_2_8_ZK_BROKER[k][0]}")
def test_advertised_as_kafka_2_8(ours, key: int):
    name, low, high = KAFKA_2_8_ZK_BROKER[key]
    assert key in ours, f"{name} ({key}) is advertised by Kafka 2.8 but not by kbroker"
    assert ours[key] == (low, high), f"{name} ({key}): kbroker v{ours[key]}, Kafka 2.8 v{low}-{high}"


def test_nothing_kafka_2_8_lacks(ours):
    assert sorted(set(ours) - set(KAFKA_2_8_ZK_BROKER)) == []


@pytest.mark.slow  # a broker process, imported inside the fixture
def test_the_wire_answer_is_the_table(module_broker_for_versions):
    """The same through a real broker: ApiVersions v3, as a client asks."""
    from tests.raw_client import request

    answer = request(module_broker_for_versions.bootstrap, 18, 3,
                     {"client_software_name": "kbroker-tests", "client_software_version": "1"})
    assert answer.error_code == 0
    got = {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys}
    assert got == {key: (low, high) for key, (_, low, high) in KAFKA_2_8_ZK_BROKER.items()}
    assert got[2] == (0, 6)  # ListOffsets: v7 (KIP-734) is Kafka 3.0's


@pytest.fixture(scope="module")
def module_broker_for_versions(tmp_path_factory):
    from tests.integration.conftest import _make_broker

    yield from _make_broker(tmp_path_factory.mktemp("versions"))
