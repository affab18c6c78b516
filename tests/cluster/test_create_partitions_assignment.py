"""CreatePartitions with the client's replica assignments on three broker processes over a real ZooKeeper,
and ``kbroker topics --replica-assignment`` (kafka-topics.sh's option) for --create and --alter.

- A new partition asked on [3, 1] (confluent-kafka's AdminClient) shows on every broker, right after
  the answer, with replicas [3, 1] and leader 3; a producer and a consumer go through it.
- The rules only a multi-broker topic can break (a replication factor other than the topic's) and the
  others, sent to each broker in turn, answer INVALID_REPLICA_ASSIGNMENT with Kafka's message and add
  nothing; validate_only adds nothing either.

The broker used to ignore the assignments: the new partition went where the broker's own placement put
it, and every refusal below was answered 0 with partitions added."""
from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewPartitions

from kbroker import errors
from tests.raw_client import metadata, request

from .helpers import consume_all, wait_until_served

REPO = Path(__file__).resolve().parents[2]
TIMEOUT_MS = 30_000
INVALID_REPLICA_ASSIGNMENT = errors.InvalidReplicaAssignmentError.code


def _create(cluster, name: str, assignment: list[list[int]]) -> None:
    body = {"topics": [{"name": name, "num_partitions": -1, "replication_factor": -1, "configs": [],
                        "assignments": [{"partition_index": i, "broker_ids": r} for i, r in enumerate(assignment)]}],
            "timeout_ms": TIMEOUT_MS, "validate_only": False}
    response = request(cluster.brokers[1].bootstrap, 19, 4, body)
    assert [(t.name, t.error_code) for t in response.topics] == [(name, 0)], response
    wait_until_served(cluster, name, len(assignment), len(assignment[0]), timeout=30)


def _shown(bootstrap: str, name: str) -> list[tuple[int, int, list[int]]]:
    """(partition, leader, replicas) as this broker's Metadata shows them."""
    (topic,) = metadata(bootstrap, [name], version=5).topics
    assert topic.error_code == 0, topic
    return sorted((p.partition_index, p.leader_id, list(p.replica_nodes)) for p in topic.partitions)


def _shown_everywhere(cluster, name: str) -> list[tuple[int, int, list[int]]]:
    views = {broker_id: _shown(b.bootstrap, name) for broker_id, b in cluster.brokers.items()}
    first = views[min(views)]
    assert all(view == first for view in views.values()), views
    return first


def test_a_new_partition_lands_on_the_assigned_brokers_and_carries_records(cluster):
    name = f"placed-{uuid.uuid4().hex[:8]}"
    _create(cluster, name, [[1, 2]])
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_partitions([NewPartitions(name, 2, replica_assignment=[[3, 1]])],
                            request_timeout=60)[name].result(60)
    # the answer waits until every broker shows the new partition led
    assert _shown_everywhere(cluster, name) == [(0, 1, [1, 2]), (1, 3, [3, 1])]

    wait_until_served(cluster, name, 2, 2, timeout=30)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True})
    values = [f"v{i}".encode() for i in range(20)]
    delivered: list = []
    for value in values:
        producer.produce(name, value=value, partition=1, on_delivery=lambda err, msg: delivered.append(err))
    assert producer.flush(60) == 0
    assert delivered == [None] * len(values)
    got = consume_all(cluster.bootstrap, name, 2, len(values))
    assert got[1] == list(enumerate(values)) and got[0] == []


def test_bad_assignments_are_refused_on_every_broker(cluster):
    name = f"refused-{uuid.uuid4().hex[:8]}"
    _create(cluster, name, [[1, 2], [2, 3]])
    cases = [
        (3, [[3]], "Inconsistent replication factor between partitions, partition 0 has 2 while partitions [2] "
                   "have replication factors [1], respectively."),
        (4, [[3, 1], [1, 2, 3]], "Inconsistent replication factor between partitions, partition 0 has 2 while "
                                 "partitions [3] have replication factors [3], respectively."),
        (3, [[4, 1]], "Unknown broker(s) in replica assignment: 4."),
        (3, [[3, 1], [1, 2]], "Increasing the number of partitions by 1 but 2 assignments provided."),
        (3, [[3, 3]], "Duplicate brokers not allowed in replica assignment: 3, 3 for partition id 2."),
    ]
    brokers = list(cluster.brokers.values())
    for n, (count, assignment, message) in enumerate(cases):
        body = {"topics": [{"name": name, "count": count, "assignments": [{"broker_ids": a} for a in assignment]}],
                "timeout_ms": TIMEOUT_MS, "validate_only": False}
        (result,) = request(brokers[n % len(brokers)].bootstrap, 37, 2, body).results
        assert (result.error_code, result.error_message) == (INVALID_REPLICA_ASSIGNMENT, message), assignment

    body = {"topics": [{"name": name, "count": 3, "assignments": [{"broker_ids": [3, 1]}]}],
            "timeout_ms": TIMEOUT_MS, "validate_only": True}
    (result,) = request(brokers[2].bootstrap, 37, 2, body).results
    assert (result.error_code, result.error_message) == (0, None)
    assert _shown_everywhere(cluster, name) == [(0, 1, [1, 2]), (1, 2, [2, 3])]


def _topics_cli(cluster, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kbroker.cli", "topics", "--bootstrap-server", cluster.bootstrap,
                           *args], cwd=REPO, capture_output=True, text=True, timeout=90, stdin=subprocess.DEVNULL)


def test_topics_cli_replica_assignment_for_create_and_alter(cluster):
    """kafka-topics.sh's --replica-assignment: partitions by commas, replicas by colons; with --alter the
    list covers every partition and the ones the topic has are left out of the request."""
    name = f"cli-placed-{uuid.uuid4().hex[:8]}"
    made = _topics_cli(cluster, "--create", "--topic", name, "--replica-assignment", "1:2,2:3,3:1")
    assert (made.returncode, made.stdout, made.stderr) == (0, f"Created topic {name}.\n", "")
    wait_until_served(cluster, name, 3, 2, timeout=30)
    assert _shown_everywhere(cluster, name) == [(0, 1, [1, 2]), (1, 2, [2, 3]), (2, 3, [3, 1])]

    grown = _topics_cli(cluster, "--alter", "--topic", name, "--partitions", "5",
                        "--replica-assignment", "1:2,2:3,3:1,3:2,1:3")
    assert (grown.returncode, grown.stdout, grown.stderr) == (0, "", "")
    assert _shown_everywhere(cluster, name) == [(0, 1, [1, 2]), (1, 2, [2, 3]), (2, 3, [3, 1]),
                                                (3, 3, [3, 2]), (4, 1, [1, 3])]

    # the broker's refusal of what is left after the existing partitions is the command's error
    refused = _topics_cli(cluster, "--alter", "--topic", name, "--partitions", "7",
                          "--replica-assignment", "1:2,2:3,3:1,3:2,1:3,2:1")
    assert refused.returncode == 1, refused
    assert "Increasing the number of partitions by 2 but 1 assignments provided." in refused.stderr
    assert "(INVALID_REPLICA_ASSIGNMENT)" in refused.stderr
