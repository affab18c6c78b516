"""The empty group id, as Kafka 2.8 treats it: FindCoordinator answers its coordinator, and
OffsetCommit/OffsetFetch store and read its offsets (Kafka keeps them working for old clients that
commit without a group), while the membership APIs refuse it with INVALID_GROUP_ID. FindCoordinator
used to refuse it, so a client committing under the empty group never found where to."""
from __future__ import annotations

from tests.raw_client import request

from .helpers import create_topic

FIND_COORDINATOR, OFFSET_COMMIT, OFFSET_FETCH, JOIN_GROUP = 10, 8, 9, 11
INVALID_GROUP_ID = 24


def test_the_empty_group_id_finds_its_coordinator_and_keeps_offsets(broker):
    create_topic(broker.bootstrap, "empty-group", 2)
    for version in (0, 1, 2, 3):
        answer = request(broker.bootstrap, FIND_COORDINATOR, version, {"key": "", "key_type": 0})
        assert (answer.error_code, answer.node_id, answer.port) == (0, 0, broker.port), answer

    commit = request(broker.bootstrap, OFFSET_COMMIT, 2, {
        "group_id": "", "generation_id": -1, "member_id": "", "retention_time_ms": -1,
        "topics": [{"name": "empty-group", "partitions": [
            {"partition_index": 0, "committed_offset": 7, "committed_metadata": "m"},
            {"partition_index": 1, "committed_offset": 9, "committed_metadata": None}]}]})
    assert [(p.partition_index, p.error_code) for t in commit.topics for p in t.partitions] == [(0, 0), (1, 0)]
    fetched = request(broker.bootstrap, OFFSET_FETCH, 3, {
        "group_id": "", "topics": [{"name": "empty-group", "partition_indexes": [0, 1]}]})
    assert fetched.error_code == 0
    assert [(p.partition_index, p.committed_offset, p.error_code) for t in fetched.topics for p in t.partitions] \
        == [(0, 7, 0), (1, 9, 0)]

    joined = request(broker.bootstrap, JOIN_GROUP, 5, {
        "group_id": "", "session_timeout_ms": 10000, "rebalance_timeout_ms": 10000, "member_id": "",
        "group_instance_id": None, "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b""}]})
    assert joined.error_code == INVALID_GROUP_ID, joined


def test_an_empty_transactional_id_is_still_refused(broker):
    answer = request(broker.bootstrap, FIND_COORDINATOR, 1, {"key": "", "key_type": 1})
    assert answer.error_code == 42, answer  # INVALID_REQUEST
