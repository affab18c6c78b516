"""Partition reassignment (Kafka 2.4+ in ZooKeeper mode, KIP-455), run by the controller on every
view of the cluster.

A request (``/admin/reassign_partitions``, written by ``kbroker reassign`` or by
AlterPartitionReassignments) starts a move: ``/brokers/topics/<t>`` gets the target replicas
followed by the original ones that leave, with ``adding_replicas`` and ``removing_replicas`` set.
Every broker in that list hosts the partition, so the new replicas start fetching from the leader
and the leader adds them to the ISR once they caught up. When the whole target is in the ISR the
controller completes the move: a leader outside the target hands over to the first target replica
in the ISR, the leaving replicas leave the ISR (leader_epoch + 1), the assignment becomes the
target alone, and the request entry is removed (the znode when it is empty). Brokers no longer
named in the assignment delete their copy.
"""
from __future__ import annotations

import logging
from typing import Protocol

from kbroker.controller.offline_dirs import NewReplicas, OfflineReplicas
from kbroker.metadata.servers import broker_servers, warn_crowded
from kbroker.metadata.zk_view import Snapshot
from zk_compat import layout
from zk_compat.store import BadVersionError, MetadataStore, NodeExistsError, NoNodeError
from zk_compat.znodes import (
    PartitionState,
    PreferredReplicaElectionZNode,
    ReassignPartitionsZNode,
    TopicAssignment,
    TopicZNode,
)

log = logging.getLogger(__name__)


class Controller(Protocol):
    """What reassignment reads and writes of the Controller (controller.py calls in here: a Protocol, no import)."""

    store: MetadataStore
    broker_id: int
    active: bool
    epoch: int
    epoch_zk_version: int
    shutting_down: set[int]
    offline_replicas: OfflineReplicas
    new_replicas: NewReplicas

    def _write_state(self, topic: str, index: int, state: PartitionState, version: int) -> bool: ...

    def moved_on(self) -> None: ...


def start_requested(ctl: Controller, snap: Snapshot) -> bool:
    """Turn new entries of /admin/reassign_partitions into moves recorded in the topic znodes."""
    by_topic: dict[str, dict[int, list[int]]] = {}
    for (topic, index), target in snap.reassign_requests.items():
        replicas = snap.assignments.get(topic, {}).get(index)
        if replicas is None:
            continue
        moving = snap.moving.get((topic, index))
        if moving is not None:
            if [r for r in replicas if r not in moving[1]] == target:
                continue  # this very move is under way
        elif replicas == target:
            continue
        if not target or len(set(target)) != len(target):
            log.warning("reassignment of %s-%d to %s ignored: not a list of distinct brokers", topic, index, target)
            continue
        # two replicas on one server: moved as asked, as Kafka would, with a warning (issue 24)
        warn_crowded(f"controller {ctl.broker_id}: reassignment", topic, {index: target},
                     broker_servers(snap.brokers.values()))
        by_topic.setdefault(topic, {})[index] = target
    wrote = False
    for topic, targets in by_topic.items():
        found = layout.get_topic_assignment_with_version(ctl.store, topic)
        if found is None:
            continue
        current, version = found
        for index, target in targets.items():
            # a new target for a partition already moving starts from the replicas it had before
            # that move (Kafka's ReplicaAssignment.reassignTo): replicas being added but not in the
            # new target simply leave
            original = [r for r in current.partitions[index] if r not in current.adding_replicas.get(index, [])]
            current.partitions[index] = target + [r for r in original if r not in target]
            current.adding_replicas[index] = [r for r in target if r not in original]
            current.removing_replicas[index] = [r for r in original if r not in target]
            log.info("controller %d: reassigning %s-%d from %s to %s", ctl.broker_id, topic, index, original, target)
        if _write_assignment(ctl, topic, current, version):
            for index in targets:  # the added replicas' first LeaderAndIsr says is_new (Kafka's NewReplica)
                ctl.new_replicas.add(topic, index, current.adding_replicas.get(index, []))
            wrote = True
    return wrote


def progress(ctl: Controller, snap: Snapshot) -> bool:
    """Complete every move whose target replicas are all in the ISR."""
    wrote = False
    live = set(snap.brokers) - ctl.shutting_down
    finished: list[tuple[str, int]] = []
    for (topic, index), (_adding, removing) in sorted(snap.moving.items()):
        if not ctl.active:
            break
        replicas = snap.assignments.get(topic, {}).get(index, [])
        target = [r for r in replicas if r not in removing]
        requested = snap.reassign_requests.get((topic, index))
        if requested is not None and requested != target:
            continue  # re-targeted: start_requested rewrites the move first
        state = snap.states.get((topic, index))
        if state is None or not all(r in state.isr for r in target):
            continue
        found = layout.get_partition_state(ctl.store, topic, index)
        if found is None:
            continue
        state, stat = found
        if not all(r in state.isr for r in target):
            continue
        leader = state.leader
        if leader not in target or leader not in live:
            leader = next((r for r in target if r in state.isr and r in live), -1)
            if leader < 0:
                continue
        isr = [r for r in state.isr if r in target]
        if (leader, isr) != (state.leader, state.isr):
            new = PartitionState(leader=leader, leader_epoch=state.leader_epoch + 1, isr=isr,
                                 controller_epoch=ctl.epoch)
            if not ctl._write_state(topic, index, new, stat.version):
                continue
        assigned = layout.get_topic_assignment_with_version(ctl.store, topic)
        if assigned is None:
            continue
        current, version = assigned
        current.partitions[index] = target
        current.adding_replicas.pop(index, None)
        current.removing_replicas.pop(index, None)
        if _write_assignment(ctl, topic, current, version):
            log.info("controller %d: %s-%d reassigned to %s (leader %d)", ctl.broker_id, topic, index, target, leader)
            finished.append((topic, index))
            wrote = True
    _forget_requests(ctl, snap, finished)
    return wrote


def _forget_requests(ctl: Controller, snap: Snapshot, finished: list[tuple[str, int]]) -> None:
    """Drop finished (or pointless) entries from /admin/reassign_partitions; delete it when empty."""
    if not snap.reassign_requests:
        return
    left = {}
    for key, target in snap.reassign_requests.items():
        topic, index = key
        replicas = snap.assignments.get(topic, {}).get(index)
        if key in finished or replicas is None or (replicas == target and key not in snap.moving):
            continue
        left[key] = target
    if len(left) == len(snap.reassign_requests):
        return
    path = ReassignPartitionsZNode.path()
    try:
        if left:
            ctl.store.set(path, ReassignPartitionsZNode.encode(left))
        else:
            ctl.store.delete(path)
    except NoNodeError:
        pass


def elect_preferred(ctl: Controller, snap: Snapshot, partitions: list[tuple[str, int]]) -> list[tuple[str, int]]:
    """Preferred replica election: the first replica in assignment order leads again when it is
    alive and in the ISR. Returns the partitions whose leader changed."""
    live = set(snap.brokers) - ctl.shutting_down
    moved = []
    for topic, index in partitions:
        if not ctl.active:
            break
        replicas = snap.assignments.get(topic, {}).get(index)
        if not replicas:
            continue
        preferred = replicas[0]
        found = layout.get_partition_state(ctl.store, topic, index)
        if found is None:
            continue
        state, stat = found
        if state.leader == preferred or preferred not in live or preferred not in state.isr:
            continue
        if ctl.offline_replicas.is_offline(preferred, (topic, index)):
            continue  # on a failed log dir (KIP-112): Kafka's isReplicaOnline is false
        new = PartitionState(leader=preferred, leader_epoch=state.leader_epoch + 1, isr=list(state.isr),
                             controller_epoch=ctl.epoch)
        if ctl._write_state(topic, index, new, stat.version):
            log.info("controller %d: preferred replica %d leads %s-%d again (leader epoch %d)", ctl.broker_id,
                     preferred, topic, index, new.leader_epoch)
            moved.append((topic, index))
    return moved


def requested_preferred(ctl: Controller, snap: Snapshot) -> bool:
    """Serve /admin/preferred_replica_election, then delete it (Kafka's handler does)."""
    if not snap.preferred_requests:
        return False
    moved = elect_preferred(ctl, snap, snap.preferred_requests)
    try:
        ctl.store.delete(PreferredReplicaElectionZNode.path())
    except NoNodeError:
        pass
    return bool(moved)


def imbalanced_partitions(snap: Snapshot, percentage: int) -> list[tuple[str, int]]:
    """Kafka's checkAndTriggerAutoLeaderRebalance: for every broker whose share of partitions it
    prefers but does not lead exceeds leader.imbalance.per.broker.percentage, those partitions."""
    preferred_of: dict[int, list[tuple[str, int]]] = {}
    for topic, assignment in snap.assignments.items():
        for index, replicas in assignment.items():
            if replicas and (topic, index) not in snap.moving:
                preferred_of.setdefault(replicas[0], []).append((topic, index))
    out = []
    for broker_id, partitions in preferred_of.items():
        if broker_id not in snap.brokers:
            continue
        not_led = [tp for tp in partitions if (s := snap.states.get(tp)) is not None and s.leader != broker_id]
        if partitions and len(not_led) * 100 > percentage * len(partitions):
            out.extend(not_led)
    return sorted(out)


def _write_assignment(ctl: Controller, topic: str, assignment: TopicAssignment, version: int) -> bool:
    """Compare-and-set on the topic znode as read (a CreatePartitions or a cancel written meanwhile is not
    overwritten: the change fires the watch and the next event works from the new content), fenced by the
    controller epoch."""
    try:
        layout.set_topic_assignment(ctl.store, topic, assignment, version,
                                    controller_epoch_zk_version=ctl.epoch_zk_version)
        return True
    except BadVersionError:
        log.info("controller %d: %s changed while it was rewritten; the next event retries", ctl.broker_id, topic)
        return False
    except layout.ControllerMovedError:
        ctl.moved_on()
        return False


def request_moves(store: MetadataStore, moves: dict[tuple[str, int], list[int]],
                  cancels: list[tuple[str, int]]) -> None:
    """AlterPartitionReassignments: add ``moves`` to /admin/reassign_partitions (the controller starts
    them) and cancel ``cancels``, putting their original replicas back in the topic znode."""
    path = ReassignPartitionsZNode.path()
    # The request entries go first: an entry left behind for a cancelled partition would make the
    # controller start the same move again as soon as the assignment is back to the original.
    while True:
        try:
            data, stat = store.get(path)
        except NoNodeError:
            if not moves:
                break
            try:
                store.create(path, ReassignPartitionsZNode.encode(moves), makepath=True)
                break
            except NodeExistsError:
                continue
        merged = {**ReassignPartitionsZNode.decode(data), **moves}
        for key in cancels:
            merged.pop(key, None)
        try:
            if merged:
                store.set(path, ReassignPartitionsZNode.encode(merged), version=stat.version)
            else:
                store.delete(path, version=stat.version)
            break
        except NoNodeError:
            continue
        except BadVersionError:
            continue
    for topic, index in cancels:  # back to the original replicas: the ones that were not being added
        while True:  # compare-and-set: the controller may be completing this very move
            try:
                data, stat = store.get(TopicZNode.path(topic))
            except NoNodeError:
                break
            assignment = TopicZNode.decode(topic, data)
            if index not in assignment.adding_replicas and index not in assignment.removing_replicas:
                break  # finished (or cancelled) meanwhile
            adding = assignment.adding_replicas.pop(index, [])
            assignment.removing_replicas.pop(index, None)
            assignment.partitions[index] = [r for r in assignment.partitions[index] if r not in adding]
            try:
                layout.set_topic_assignment(store, topic, assignment, stat.version)
                break
            except BadVersionError:
                continue
