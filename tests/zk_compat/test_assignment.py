"""Replica assignment for new topics (Kafka's AdminUtils.assignReplicasToBrokers)."""
from __future__ import annotations

import itertools
import random
from collections import Counter

import pytest

from zk_compat.assignment import (
    BrokerMetadata,
    RackAwareMode,
    assign_replicas_for_new_partitions,
    assign_replicas_to_brokers,
    broker_metadatas,
    rack_alternated_brokers,
)
from zk_compat.errors import InvalidPartitionsError, InvalidReplicaAssignmentError, InvalidReplicationFactorError


def test_kafkas_own_example_with_a_fixed_start():
    assignment = assign_replicas_to_brokers(range(5), 10, 3, fixed_start_index=0)
    assert assignment == {0: [0, 1, 2], 1: [1, 2, 3], 2: [2, 3, 4], 3: [3, 4, 0], 4: [4, 0, 1],
                          5: [0, 2, 3], 6: [1, 3, 4], 7: [2, 4, 0], 8: [3, 0, 1], 9: [4, 1, 2]}


def test_seeded_random_is_deterministic_and_draws_start_then_shift():
    a = assign_replicas_to_brokers([1, 2, 3, 4], 8, 3, rng=random.Random(42))
    b = assign_replicas_to_brokers([1, 2, 3, 4], 8, 3, rng=random.Random(42))
    assert a == b
    draws = random.Random(42)
    start, shift = draws.randrange(4), draws.randrange(4)
    assert a[0][0] == [1, 2, 3, 4][start]
    first = start
    assert a[0][1] == [1, 2, 3, 4][(first + 1 + shift % 3) % 4]
    outcomes = {tuple(map(tuple, assign_replicas_to_brokers([1, 2, 3, 4], 8, 3, rng=random.Random(s)).values()))
                for s in range(20)}
    assert len(outcomes) > 1


@pytest.mark.parametrize("brokers, partitions, rf", [
    (3, 3, 3), (5, 10, 3), (6, 7, 2), (4, 9, 4), (1, 5, 1), (7, 50, 3), (10, 23, 5)])
def test_properties_of_rack_unaware_assignment(brokers, partitions, rf):
    for seed in range(10):
        assignment = assign_replicas_to_brokers(list(range(100, 100 + brokers)), partitions, rf,
                                                rng=random.Random(seed))
        assert sorted(assignment) == list(range(partitions))
        for replicas in assignment.values():
            assert len(replicas) == rf and len(set(replicas)) == rf  # no broker twice
        leaders = Counter(r[0] for r in assignment.values())
        counts = [leaders.get(b, 0) for b in range(100, 100 + brokers)]
        assert max(counts) - min(counts) <= 1  # leaders spread evenly
        if partitions % brokers == 0:
            replicas_per_broker = Counter(itertools.chain.from_iterable(assignment.values()))
            assert set(replicas_per_broker.values()) == {partitions * rf // brokers}


def test_followers_shift_every_round():
    assignment = assign_replicas_to_brokers(range(4), 8, 2, fixed_start_index=0)
    first_round = [assignment[p][1] - assignment[p][0] for p in range(4)]
    second_round = [assignment[p][1] - assignment[p][0] for p in range(4, 8)]
    assert [d % 4 for d in first_round] != [d % 4 for d in second_round]


def test_rack_alternated_broker_list():
    racks = {0: "rack1", 1: "rack1", 2: "rack1", 3: "rack2", 4: "rack2", 5: "rack2", 6: "rack3", 7: "rack3", 8: "rack3"}
    assert rack_alternated_brokers(racks) == [0, 3, 6, 1, 4, 7, 2, 5, 8]
    assert rack_alternated_brokers({5: "b", 0: "a", 1: "a", 2: "a"}) == [0, 5, 1, 2]


@pytest.mark.parametrize("racks, partitions, rf", [
    ({0: "r1", 1: "r2", 2: "r2", 3: "r3", 4: "r3", 5: "r1"}, 6, 3),
    ({0: "r1", 1: "r1", 2: "r2", 3: "r2"}, 12, 3),
    ({i: f"r{i % 3}" for i in range(9)}, 27, 3),
    ({i: f"r{i % 2}" for i in range(5)}, 10, 2),
])
def test_rack_aware_assignment_spreads_racks(racks, partitions, rf):
    metas = [BrokerMetadata(b, r) for b, r in sorted(racks.items())]
    rack_count = len(set(racks.values()))
    for seed in range(10):
        assignment = assign_replicas_to_brokers(metas, partitions, rf, rng=random.Random(seed))
        for replicas in assignment.values():
            assert len(set(replicas)) == rf
            assert len({racks[b] for b in replicas}) == min(rf, rack_count)
        leaders = Counter(r[0] for r in assignment.values())
        counts = [leaders.get(b, 0) for b in racks]
        assert max(counts) - min(counts) <= 1


def test_rack_aware_with_a_fixed_start_is_deterministic():
    metas = [BrokerMetadata(0, "rack1"), BrokerMetadata(1, "rack2"), BrokerMetadata(2, "rack2"),
             BrokerMetadata(3, "rack3"), BrokerMetadata(4, "rack3"), BrokerMetadata(5, "rack1")]
    # arranged list: rack1 [0,5], rack2 [1,2], rack3 [3,4] -> 0,1,3,5,2,4
    assignment = assign_replicas_to_brokers(metas, 6, 3, fixed_start_index=2)
    assert [r[0] for r in assignment.values()] == [3, 5, 2, 4, 0, 1]
    assert assignment == assign_replicas_to_brokers(metas, 6, 3, fixed_start_index=2)


def test_invalid_requests():
    with pytest.raises(InvalidPartitionsError):
        assign_replicas_to_brokers([0, 1], 0, 1)
    with pytest.raises(InvalidReplicationFactorError):
        assign_replicas_to_brokers([0, 1], 3, 0)
    with pytest.raises(InvalidReplicationFactorError, match="larger than available brokers: 2"):
        assign_replicas_to_brokers([0, 1], 3, 3)
    with pytest.raises(InvalidReplicaAssignmentError, match="Not all brokers have rack"):
        assign_replicas_to_brokers([BrokerMetadata(0, "a"), BrokerMetadata(1)], 3, 1)


def test_broker_metadatas_rack_modes():
    brokers = [(2, "a"), (0, None), (1, "b")]
    with pytest.raises(InvalidReplicaAssignmentError):
        broker_metadatas(brokers, RackAwareMode.ENFORCED)
    assert broker_metadatas(brokers, RackAwareMode.SAFE) == [BrokerMetadata(0), BrokerMetadata(1), BrokerMetadata(2)]
    assert broker_metadatas([(1, "b"), (0, "a")], RackAwareMode.SAFE) == \
        [BrokerMetadata(0, "a"), BrokerMetadata(1, "b")]
    assert broker_metadatas([(1, "b"), (0, "a")], RackAwareMode.DISABLED) == [BrokerMetadata(0), BrokerMetadata(1)]


def test_new_partitions_continue_from_partition_zeros_first_replica():
    existing = {0: [1, 2], 1: [2, 3]}
    added = assign_replicas_for_new_partitions(existing, [3, 1, 2], 5)
    assert added == {2: [3, 1], 3: [1, 3], 4: [2, 1]}
    with pytest.raises(InvalidPartitionsError):
        assign_replicas_for_new_partitions(existing, [1, 2, 3], 2)
