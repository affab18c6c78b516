"""Where a new topic's or new partitions' replicas go, and Kafka's checks of what CreateTopics,
CreatePartitions and auto-creation ask for: names, counts, replication factors, explicit assignments. Pure
functions of the live brokers and the broker's defaults (no store, no I/O), so both modes share them."""
from __future__ import annotations

import random
from collections.abc import Container

from kbroker import errors
from kbroker.config.broker import BrokerConfig
from kbroker.log.names import validate_topic_name
from kbroker.metadata.servers import broker_servers, warn_crowded
from kbroker.metadata.zk_view import LiveBroker
from kbroker.topics.table import TopicInfo
from zk_compat import layout
from zk_compat.assignment import BrokerMetadata, broker_metadatas


def new_topic(name: str, num_partitions: int, replication_factor: int, assignment: dict[int, list[int]] | None,
              configs: dict[str, str], *, existing: Container[str], live_brokers: list[LiveBroker],
              config: BrokerConfig) -> TopicInfo:
    """A topic CreateTopics or auto-creation would create, checked as Kafka's AdminZkClient.validateTopicCreate
    (the configs are the caller's to check): ``num_partitions``/``replication_factor`` of -1 take the
    broker's defaults; without ``assignment`` the replicas are placed (``assign_replicas_to_brokers``)."""
    try:
        validate_topic_name(name)
    except ValueError as exc:
        raise errors.InvalidTopicError(str(exc)) from None
    if name in existing:
        raise errors.TopicAlreadyExistsError(f"Topic '{name}' already exists.")
    live = [b.id for b in live_brokers]
    if assignment:
        if len({len(replicas) for replicas in assignment.values()}) != 1:  # Kafka's validateTopicCreate
            raise errors.InvalidReplicaAssignmentError("All partitions should have the same number of replicas")
        if sorted(assignment) != list(range(len(assignment))):
            raise errors.InvalidReplicaAssignmentError("partitions must be numbered 0..n-1")
        for replicas in assignment.values():
            if not replicas or len(set(replicas)) != len(replicas) or any(r not in live for r in replicas):
                raise errors.InvalidReplicaAssignmentError(f"replicas {replicas} are not distinct live brokers")
        warn_crowded("CreateTopics", name, assignment, broker_servers(live_brokers))
    else:
        partitions = config.num_partitions if num_partitions == -1 else num_partitions
        factor = config.default_replication_factor if replication_factor == -1 else replication_factor
        if partitions <= 0:
            raise errors.InvalidPartitionsError(f"number of partitions must be at least 1, got {partitions}")
        if factor <= 0:
            raise errors.InvalidReplicationFactorError(f"replication factor must be at least 1, got {factor}")
        if factor > len(live):
            raise errors.InvalidReplicationFactorError(
                f"replication factor {factor} is larger than the {len(live)} available broker(s)")
        # rack-aware when every broker has broker.rack (Kafka's ENFORCED mode; a partial
        # rack setup is refused rather than placed blindly)
        with errors.translate_zk():
            assignment = layout.assign_replicas_to_brokers(placement_brokers(live_brokers), partitions, factor,
                                                           rng=random.Random())
    return TopicInfo(name, {p: list(r) for p, r in assignment.items()}, dict(configs))


def placement_brokers(live: list[LiveBroker]) -> list[BrokerMetadata]:
    """The live brokers with their racks and servers: placement keeps replicas on distinct servers."""
    return broker_metadatas(((b.id, b.rack) for b in live), servers=broker_servers(live))


def new_partitions(info: TopicInfo, count: int, assignments: list[list[int]] | None,
                   live_brokers: list[LiveBroker]) -> dict[int, list[int]]:
    """The topic's new partitions' replicas: ``assignments`` once checked, else the broker's own placement.
    Kafka's order (ZkAdminManager.createPartitions): the count first, then the assignments."""
    current = len(info.assignment)
    if count < current:
        raise errors.InvalidPartitionsError(
            f"Topic currently has {current} partitions, which is higher than the requested {count}.")
    if count == current:
        raise errors.InvalidPartitionsError(f"Topic already has {current} partitions.")
    if assignments is not None:
        return checked_assignments(info, count, assignments, live_brokers)
    with errors.translate_zk():
        extra = layout.assign_replicas_for_new_partitions(info.assignment, placement_brokers(live_brokers), count)
    return {p: list(r) for p, r in extra.items()}


def checked_assignments(info: TopicInfo, count: int, assignments: list[list[int]],
                        live_brokers: list[LiveBroker]) -> dict[int, list[int]]:
    """Kafka's checks of CreatePartitions assignments (ZkAdminManager.createPartitions, then
    AdminZkClient.validateReplicaAssignment), each INVALID_REPLICA_ASSIGNMENT with Kafka's message."""
    registered = {b.id for b in live_brokers}
    unknown = list(dict.fromkeys(b for replicas in assignments for b in replicas if b not in registered))
    if unknown:
        raise errors.InvalidReplicaAssignmentError(
            f"Unknown broker(s) in replica assignment: {', '.join(map(str, unknown))}.")
    current = len(info.assignment)
    if len(assignments) != count - current:
        raise errors.InvalidReplicaAssignmentError(
            f"Increasing the number of partitions by {count - current} but {len(assignments)} "
            f"assignments provided.")
    proposed = {current + i: list(replicas) for i, replicas in enumerate(assignments)}
    for index, replicas in proposed.items():
        if not replicas:
            raise errors.InvalidReplicaAssignmentError(
                f"Cannot have replication factor of 0 for partition id {index}.")
        if len(set(replicas)) != len(replicas):
            raise errors.InvalidReplicaAssignmentError(
                f"Duplicate brokers not allowed in replica assignment: {', '.join(map(str, replicas))} "
                f"for partition id {index}.")
    expected = len(info.assignment[0])  # the topic's replication factor, as Kafka takes it
    odd = [(index, len(replicas)) for index, replicas in proposed.items() if len(replicas) != expected]
    if odd:
        raise errors.InvalidReplicaAssignmentError(
            f"Inconsistent replication factor between partitions, partition 0 has {expected} while partitions "
            f"[{', '.join(str(i) for i, _ in odd)}] have replication factors "
            f"[{', '.join(str(n) for _, n in odd)}], respectively.")
    warn_crowded("CreatePartitions", info.name, proposed, broker_servers(live_brokers))
    return proposed
