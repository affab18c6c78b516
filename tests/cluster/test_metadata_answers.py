"""Metadata answers against Kafka's (MetadataCache.getPartitionMetadata, KafkaApis.getTopicMetadata) at every
version, for a partition without a live leader and for one with a dead follower (3 brokers over a real
ZooKeeper), and for a topic being created on the embedded single broker (no ZooKeeper):

- no live leader: LEADER_NOT_AVAILABLE, leader -1, the last leader epoch; v0 lists only live replicas and
  ISR members, v1+ all of them, v5+ the dead ones in offline_replicas;
- a live leader with a dead follower: v0 REPLICA_NOT_AVAILABLE without the dead replica, v1+ no error;
- a topic being deleted is shown whole until the broker hears of it, then not at all;
- a topic whose partitions are not all served yet is not shown (UNKNOWN_TOPIC_OR_PARTITION, no partitions),
  never as error 0 with leaderless partitions.
"""
from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator

import pytest

from tests.integration.conftest import _make_broker
from tests.raw_client import metadata, request

from .conftest import wait_until

VERSIONS = range(0, 12)  # Metadata v0-11, Kafka 2.8's


def _create(bootstrap: str, name: str, assignment: dict[int, list[int]] | None = None, partitions: int = -1,
            timeout_ms: int = 30_000) -> None:
    assignments = [{"partition_index": p, "broker_ids": r} for p, r in (assignment or {}).items()]
    response = request(bootstrap, 19, 4, {"topics": [{"name": name, "num_partitions": partitions,
                                                      "replication_factor": -1 if assignment else 1,
                                                      "assignments": assignments, "configs": []}],
                                          "timeout_ms": timeout_ms, "validate_only": False}, timeout=120)
    assert response.topics[0].error_code == 0, response


@pytest.mark.parametrize("version", [4, 5, 7, 9, 11])
def test_a_topic_being_deleted_is_whole_or_unknown(cluster, version):
    """DeleteTopics without waiting (timeout_ms 0): until each broker hears of the deletion it shows the topic
    whole, then UNKNOWN_TOPIC_OR_PARTITION; never a topic with leaderless or missing partitions."""
    name = f"doomed-{version}-{uuid.uuid4().hex[:8]}"
    _create(cluster.brokers[1].bootstrap, name, partitions=4)
    response = request(cluster.brokers[2].bootstrap, 20, 1, {"topic_names": [name], "timeout_ms": 0})
    assert response.responses[0].error_code == 0
    seen = set()
    deadline = time.monotonic() + 60
    while len(seen) < len(cluster.brokers):
        assert time.monotonic() < deadline, f"brokers {sorted(seen)} only forgot {name}"
        for broker_id, broker in cluster.brokers.items():
            topic = metadata(broker.bootstrap, [name], version=version).topics[0]
            if topic.error_code == 3:
                assert topic.partitions == []
                seen.add(broker_id)
                continue
            assert broker_id not in seen, f"broker {broker_id} showed {name} again"
            assert topic.error_code == 0, topic
            assert [(p.partition_index, p.error_code) for p in topic.partitions] == [(i, 0) for i in range(4)]
            assert all(p.leader_id >= 0 for p in topic.partitions), topic


def test_offline_leader_and_dead_follower_at_every_version(cluster):
    at = cluster.brokers[1].bootstrap
    lone, pair = f"lone-{uuid.uuid4().hex[:8]}", f"pair-{uuid.uuid4().hex[:8]}"
    _create(at, lone, {0: [3]})
    _create(at, pair, {0: [2, 3]})
    cluster.brokers[3].stop()  # controlled shutdown: pair moves to broker 2, lone has nowhere to go

    def settled() -> bool:
        found = metadata(at, [lone, pair], version=1).topics
        return [(p.leader_id, list(p.isr_nodes)) for t in found for p in t.partitions] == [(-1, [3]), (2, [2])]
    wait_until(settled, 60, "lone offline and pair led by broker 2")
    epoch = metadata(at, [lone], version=7).topics[0].partitions[0].leader_epoch
    assert epoch >= 1  # the controller's offline election bumped it
    for version in VERSIONS:
        topics = metadata(at, [lone, pair], version=version).topics
        assert [t.error_code for t in topics] == [0, 0]
        offline, degraded = topics[0].partitions[0], topics[1].partitions[0]
        got = [(p.error_code, p.leader_id, list(p.replica_nodes), list(p.isr_nodes)) for p in (offline, degraded)]
        if version == 0:
            assert got == [(5, -1, [], []), (9, 2, [2], [2])], (version, got)
        else:
            assert got == [(5, -1, [3], [3]), (0, 2, [2, 3], [2])], (version, got)
        if version >= 5:
            assert [list(offline.offline_replicas), list(degraded.offline_replicas)] == [[3], [3]], version
        if version >= 7:
            assert offline.leader_epoch == epoch, version


@pytest.fixture(scope="module")
def single_broker(tmp_path_factory) -> Iterator:
    yield from _make_broker(tmp_path_factory.mktemp("single-metadata"))


@pytest.mark.parametrize("version", [1, 5, 9])
def test_a_topic_being_created_is_not_shown_with_leaderless_partitions(single_broker, version):
    """500 partitions are hosted a chunk at a time (the loop serves Metadata in between)."""
    name = f"wide-{version}-{uuid.uuid4().hex[:8]}"
    creating = threading.Thread(target=_create, args=(single_broker.bootstrap, name), kwargs={"partitions": 500})
    creating.start()
    answers = []
    deadline = time.monotonic() + 120
    try:
        while creating.is_alive() or not answers or answers[-1][0] != 0:
            topic = metadata(single_broker.bootstrap, [name], version=max(version, 4)).topics[0]
            led = sum(1 for p in topic.partitions if p.error_code == 0 and p.leader_id >= 0)
            answers.append((topic.error_code, len(topic.partitions), led))
            assert time.monotonic() < deadline, "the topic never appeared"
    finally:
        creating.join()
    assert set(answers) <= {(3, 0, 0), (0, 500, 500)}, sorted(set(answers))[:5]
