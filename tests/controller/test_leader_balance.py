"""Kafka's automatic leader rebalance decision (checkAndTriggerAutoLeaderRebalance), on a view of
the cluster: a broker whose share of "preferred but not led" partitions exceeds
leader.imbalance.per.broker.percentage gets them back."""
from __future__ import annotations

from kbroker.controller.reassignment import imbalanced_partitions
from kbroker.metadata.zk_view import LiveBroker, Snapshot
from zk_compat.znodes import PartitionState


def _snapshot(leaders: dict[int, int], live=(1, 2, 3)) -> Snapshot:
    snap = Snapshot()
    snap.brokers = {b: LiveBroker(b, "127.0.0.1", 9000 + b, None) for b in live}
    # partition p prefers broker p % 3 + 1
    snap.assignments = {"t": {p: [p % 3 + 1, (p + 1) % 3 + 1] for p in leaders}}
    snap.states = {("t", p): PartitionState(leader=leader, leader_epoch=0, isr=[1, 2, 3], controller_epoch=1)
                   for p, leader in leaders.items()}
    return snap


def test_balanced_cluster_needs_nothing():
    assert imbalanced_partitions(_snapshot({p: p % 3 + 1 for p in range(30)}), 10) == []


def test_a_broker_over_the_threshold_gets_its_partitions_back():
    leaders = {p: p % 3 + 1 for p in range(30)}
    leaders[0] = 2  # broker 1 prefers 10 partitions and leads 9: 10 % imbalance
    assert imbalanced_partitions(_snapshot(leaders), 10) == []  # not above 10 %
    leaders[3] = 2  # 20 %
    assert imbalanced_partitions(_snapshot(leaders), 10) == [("t", 0), ("t", 3)]
    assert imbalanced_partitions(_snapshot(leaders), 25) == []


def test_dead_preferred_brokers_and_moving_partitions_are_left_alone():
    leaders = {p: 2 for p in range(6)}
    snap = _snapshot(leaders, live=(2, 3))
    assert [tp for tp in imbalanced_partitions(snap, 10) if snap.assignments["t"][tp[1]][0] == 1] == []
    snap = _snapshot(leaders)
    snap.moving = {("t", 0): ([3], [1])}
    assert ("t", 0) not in imbalanced_partitions(snap, 10)
