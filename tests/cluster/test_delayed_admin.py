"""CreateTopics, CreatePartitions and DeleteTopics on a 3-broker ZooKeeper cluster answer only once the
change is visible: Metadata sent to every broker right after a successful answer shows the new topic with
every leader, the new partition count, or no topic at all (Kafka holds those answers in its purgatory,
DelayedCreatePartitions / DelayedDeleteTopics, until the metadata shows the change, or timeout_ms).

Each request goes to another broker in turn (the controller and the others), and each case runs several
rounds: the answer used to come before the controller's UpdateMetadata, a race a single round may miss."""
from __future__ import annotations

import uuid

from kbroker import errors
from tests.raw_client import metadata, request

from .conftest import wait_until

ROUNDS = 4
TIMEOUT_MS = 30_000


def _created(cluster, at: str, name: str, partitions: int, replication: int) -> None:
    response = request(at, 19, 4, {"topics": [{"name": name, "num_partitions": partitions,
                                               "replication_factor": replication, "assignments": [],
                                               "configs": []}],
                                   "timeout_ms": TIMEOUT_MS, "validate_only": False})
    assert [(t.name, t.error_code) for t in response.topics] == [(name, 0)], response


def _visible_everywhere(cluster, name: str, partitions: int) -> None:
    for broker_id, broker in cluster.brokers.items():
        answer = metadata(broker.bootstrap, [name], version=5).topics[0]
        assert answer.error_code == 0, f"broker {broker_id} answers {errors.for_code(answer.error_code).__name__}"
        assert sorted(p.partition_index for p in answer.partitions) == list(range(partitions)), \
            f"broker {broker_id} shows partitions {[p.partition_index for p in answer.partitions]}"
        assert all(p.error_code == 0 and p.leader_id >= 0 for p in answer.partitions), \
            f"broker {broker_id}: {[(p.partition_index, p.leader_id) for p in answer.partitions]}"


def test_metadata_shows_a_new_topic_on_every_broker_right_after_create_topics(cluster):
    brokers = list(cluster.brokers.values())
    for n in range(ROUNDS):
        name = f"made-{uuid.uuid4().hex[:8]}"
        _created(cluster, brokers[n % len(brokers)].bootstrap, name, 3, 2)
        _visible_everywhere(cluster, name, 3)


def test_metadata_shows_new_partitions_on_every_broker_right_after_create_partitions(cluster):
    brokers = list(cluster.brokers.values())
    for n in range(ROUNDS):
        name = f"grown-{uuid.uuid4().hex[:8]}"
        _created(cluster, brokers[0].bootstrap, name, 1, 2)
        _visible_everywhere(cluster, name, 1)
        at = brokers[n % len(brokers)].bootstrap
        response = request(at, 37, 1, {"topics": [{"name": name, "count": 2, "assignments": None}],
                                       "timeout_ms": TIMEOUT_MS, "validate_only": False})
        assert [(r.name, r.error_code) for r in response.results] == [(name, 0)], response
        _visible_everywhere(cluster, name, 2)


def test_no_broker_lists_a_topic_right_after_delete_topics(cluster):
    brokers = list(cluster.brokers.values())
    for n in range(ROUNDS):
        name = f"gone-{uuid.uuid4().hex[:8]}"
        _created(cluster, brokers[0].bootstrap, name, 2, 2)
        _visible_everywhere(cluster, name, 2)
        at = brokers[n % len(brokers)].bootstrap
        response = request(at, 20, 1, {"topic_names": [name], "timeout_ms": TIMEOUT_MS})
        assert [(r.name, r.error_code) for r in response.responses] == [(name, 0)], response
        for broker_id, broker in cluster.brokers.items():
            named = metadata(broker.bootstrap, [name], version=5).topics[0]
            assert named.error_code == errors.UnknownTopicOrPartitionError.code, \
                f"broker {broker_id} still answers {name} with {named.error_code} {len(named.partitions)} partitions"
            listed = [t.name for t in metadata(broker.bootstrap, None, version=5).topics]
            assert name not in listed, f"broker {broker_id} still lists {name}"


def test_no_wait_with_timeout_zero(cluster):
    """timeout_ms <= 0: the answer comes as soon as ZooKeeper has the change, as Kafka's (no delayed
    operation); the change still lands."""
    brokers = list(cluster.brokers.values())
    name = f"nowait-{uuid.uuid4().hex[:8]}"
    response = request(brokers[1].bootstrap, 19, 4, {"topics": [{"name": name, "num_partitions": 1,
                                                                 "replication_factor": 1, "assignments": [],
                                                                 "configs": []}],
                                                     "timeout_ms": 0, "validate_only": False})
    assert response.topics[0].error_code == 0
    wait_until(lambda: all(metadata(b.bootstrap, [name], version=5).topics[0].error_code == 0
                           for b in brokers), 30, "the topic on every broker")


def test_a_change_not_visible_within_timeout_ms_is_request_timed_out(cluster):
    """As Kafka's expired delayed operation: REQUEST_TIMED_OUT, and the change is made all the same (no
    UpdateMetadata reaches a broker within 1 ms of the ZooKeeper write)."""
    brokers = list(cluster.brokers.values())
    name = f"late-{uuid.uuid4().hex[:8]}"
    _created(cluster, brokers[0].bootstrap, name, 1, 2)
    response = request(brokers[2].bootstrap, 37, 1, {"topics": [{"name": name, "count": 3, "assignments": None}],
                                                     "timeout_ms": 1, "validate_only": False})
    assert [(r.name, r.error_code) for r in response.results] == [(name, errors.RequestTimedOutError.code)]
    wait_until(lambda: all(len(metadata(b.bootstrap, [name], version=5).topics[0].partitions) == 3
                           for b in brokers), 30, "the three partitions on every broker")
