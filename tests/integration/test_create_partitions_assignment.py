"""CreatePartitions with the client's own replica assignments on a single (embedded-store) broker: every
rule Kafka 2.8 checks (ZkAdminManager.createPartitions, AdminZkClient.validateReplicaAssignment) answers
INVALID_REPLICA_ASSIGNMENT with Kafka's message and changes nothing, validate_only writes nothing, and
a good assignment adds the partitions. Through raw requests (every error code and message exactly) and
confluent-kafka's AdminClient (what an application sees).

The broker used to ignore the assignments: each refusal below was answered 0 and added partitions."""
from __future__ import annotations

import pytest

from kbroker import errors
from tests.raw_client import metadata, request

from .clients import DEADLINE

TIMEOUT_MS = 30_000
INVALID_PARTITIONS = errors.InvalidPartitionsError.code
INVALID_REPLICA_ASSIGNMENT = errors.InvalidReplicaAssignmentError.code


def _create_topic(bootstrap: str, name: str, partitions: int) -> None:
    response = request(bootstrap, 19, 4, {"topics": [{"name": name, "num_partitions": partitions,
                                                      "replication_factor": 1, "assignments": [], "configs": []}],
                                          "timeout_ms": TIMEOUT_MS, "validate_only": False})
    assert [(t.name, t.error_code) for t in response.topics] == [(name, 0)], response


def _grow(bootstrap: str, name: str, count: int, assignments: list[list[int]] | None,
          validate_only: bool = False) -> tuple[int, str | None]:
    body = {"topics": [{"name": name, "count": count,
                        "assignments": None if assignments is None else [{"broker_ids": a} for a in assignments]}],
            "timeout_ms": TIMEOUT_MS, "validate_only": validate_only}
    (result,) = request(bootstrap, 37, 1, body).results
    assert result.name == name
    return result.error_code, result.error_message


def _partitions(bootstrap: str, name: str) -> list[tuple[int, int, list[int]]]:
    (topic,) = metadata(bootstrap, [name], version=5).topics
    assert topic.error_code == 0, topic
    return sorted((p.partition_index, p.leader_id, list(p.replica_nodes)) for p in topic.partitions)


@pytest.fixture(scope="module")
def broker_id(module_broker) -> int:
    (only,) = metadata(module_broker.bootstrap, [], version=5).brokers
    return only.node_id


def test_each_bad_assignment_is_refused_with_kafkas_message(module_broker, broker_id):
    bs, name = module_broker.bootstrap, "cpa-raw"
    me = broker_id
    _create_topic(bs, name, 1)
    cases = [
        # the count is checked first, as Kafka does: INVALID_PARTITIONS whatever the assignments say
        (1, [[99]], INVALID_PARTITIONS, "Topic already has 1 partitions."),
        (0, [[me]], INVALID_PARTITIONS, "Topic currently has 1 partitions, which is higher than the requested 0."),
        (2, [[me, 99], [98]], INVALID_REPLICA_ASSIGNMENT, "Unknown broker(s) in replica assignment: 99, 98."),
        (3, [[me]], INVALID_REPLICA_ASSIGNMENT, "Increasing the number of partitions by 2 but 1 assignments provided."),
        (2, [], INVALID_REPLICA_ASSIGNMENT, "Increasing the number of partitions by 1 but 0 assignments provided."),
        (2, [[me, me]], INVALID_REPLICA_ASSIGNMENT,
         f"Duplicate brokers not allowed in replica assignment: {me}, {me} for partition id 1."),
        (2, [[]], INVALID_REPLICA_ASSIGNMENT, "Cannot have replication factor of 0 for partition id 1."),
    ]
    for count, assignments, code, message in cases:
        for validate_only in (True, False):
            assert _grow(bs, name, count, assignments, validate_only) == (code, message), (count, assignments)
    assert _partitions(bs, name) == [(0, me, [me])]  # nothing was added by any of them


def test_validate_only_writes_nothing_and_a_good_assignment_adds_the_partitions(module_broker, broker_id):
    bs, name = module_broker.bootstrap, "cpa-good"
    me = broker_id
    _create_topic(bs, name, 1)
    assert _grow(bs, name, 3, [[me], [me]], validate_only=True) == (0, None)
    assert _partitions(bs, name) == [(0, me, [me])]
    assert _grow(bs, name, 3, [[me], [me]]) == (0, None)
    assert _partitions(bs, name) == [(0, me, [me]), (1, me, [me]), (2, me, [me])]
    # null assignments: the broker places them, as before
    assert _grow(bs, name, 4, None) == (0, None)
    assert [p for p, _, _ in _partitions(bs, name)] == [0, 1, 2, 3]


def test_confluent_admin_client_sees_each_refusal(module_broker, broker_id):
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewPartitions

    bs, name = module_broker.bootstrap, "cpa-confluent"
    me = broker_id
    _create_topic(bs, name, 1)
    admin = AdminClient({"bootstrap.servers": bs})

    def grow(count: int, assignment: list[list[int]], validate_only: bool = False) -> KafkaError | None:
        future = admin.create_partitions([NewPartitions(name, count, replica_assignment=assignment)],
                                         validate_only=validate_only, request_timeout=DEADLINE)[name]
        try:
            future.result(DEADLINE)
        except KafkaException as exc:
            return exc.args[0]
        return None

    for count, assignment, message in [
            (2, [[42]], "Unknown broker(s) in replica assignment: 42."),
            (3, [[me]], "Increasing the number of partitions by 2 but 1 assignments provided."),
            (2, [[me, me]], f"Duplicate brokers not allowed in replica assignment: {me}, {me} for partition id 1.")]:
        error = grow(count, assignment)
        assert error is not None, f"{assignment} was accepted"
        assert (error.code(), error.str()) == (KafkaError.INVALID_REPLICA_ASSIGNMENT, message)
    assert _partitions(bs, name) == [(0, me, [me])]

    assert grow(2, [[me]], validate_only=True) is None
    assert _partitions(bs, name) == [(0, me, [me])]
    assert grow(2, [[me]]) is None
    assert _partitions(bs, name) == [(0, me, [me]), (1, me, [me])]


def test_create_topics_refuses_assignments_of_different_replication_factors(module_broker, broker_id):
    """Kafka's validateTopicCreate: every partition of a new topic has as many replicas (the broker took
    [[me], [me, 5]] as far as its liveness check, which named broker 5 instead)."""
    name = "cpa-uneven"
    assignments = [{"partition_index": 0, "broker_ids": [broker_id]},
                   {"partition_index": 1, "broker_ids": [broker_id, 5]}]
    response = request(module_broker.bootstrap, 19, 4, {
        "topics": [{"name": name, "num_partitions": -1, "replication_factor": -1, "assignments": assignments,
                    "configs": []}], "timeout_ms": TIMEOUT_MS, "validate_only": False})
    assert [(t.name, t.error_code, t.error_message) for t in response.topics] == [
        (name, INVALID_REPLICA_ASSIGNMENT, "All partitions should have the same number of replicas")]
    (topic,) = metadata(module_broker.bootstrap, [name], version=5).topics
    assert topic.error_code == errors.UnknownTopicOrPartitionError.code
