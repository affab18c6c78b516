"""The replication throttles of ``kbroker reassign`` (kafka-reassign-partitions.sh 2.8: --throttle,
--replica-alter-log-dirs-throttle, and their removal by --verify and --cancel), as Kafka's
core/src/main/scala/kafka/admin/ReassignPartitionsCommand.scala sets them through the admin API:

- topic configs, IncrementalAlterConfigs SET on each moving topic: ``leader.replication.throttled.replicas``
  lists "partition:broker" for every source replica of a moving partition, and
  ``follower.replication.throttled.replicas`` every destination that is not a source (sorted as strings);
- broker configs, IncrementalAlterConfigs SET on each broker involved (sources and destinations):
  ``leader.replication.throttled.rate`` and ``follower.replication.throttled.rate`` = --throttle; and
  ``replica.alter.log.dirs.io.max.bytes.per.second`` = --replica-alter-log-dirs-throttle on each broker
  with a log-dir move;
- once nothing is reassigning, --verify (and --cancel) DELETE the three broker keys on every live broker
  and every target replica's broker, and the two topic keys on every topic of the file, unless
  --preserve-throttles.

A BROKER resource goes to that broker, as Kafka's admin client sends it; TOPIC resources to any broker. A broker
not in the cluster metadata is left out (Kafka's admin client would wait for it until its timeout): the rates it
may keep throttle nothing once the topics' lists are cleared, and the next --throttle sets them again.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TextIO

from kbroker.protocol import API_KEYS
from kbroker.tools.client import AdminClient, ClientError, KafkaApiError

INCREMENTAL_ALTER_CONFIGS = API_KEYS["IncrementalAlterConfigs"]
TOPIC_RESOURCE, BROKER_RESOURCE = 2, 4
SET, DELETE = 0, 1

LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
LOG_DIR_RATE = "replica.alter.log.dirs.io.max.bytes.per.second"
LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"
BROKER_THROTTLES = (LEADER_RATE, FOLLOWER_RATE, LOG_DIR_RATE)
TOPIC_THROTTLES = (LEADER_REPLICAS, FOLLOWER_REPLICAS)

VERIFY_PERIODICALLY = ("Warning: You must run --verify periodically, until the reassignment completes, to ensure "
                       "the throttle is removed.")

TP = tuple[str, int]
# topic -> partition -> (sources, destinations): Kafka's MoveMap of PartitionMove
MoveMap = dict[str, dict[int, tuple[set[int], set[int]]]]


def move_map(ongoing: Mapping[TP, tuple[list[int], list[int], list[int]]], proposed: Mapping[TP, list[int]],
             current: Mapping[TP, list[int]]) -> MoveMap:
    """Kafka's calculateProposedMoveMap: the reassignments in progress (sources: their replicas less the
    adding ones; destinations: the adding ones), then each proposed partition (sources: an ongoing move's,
    else its current replicas; destinations: the proposed replicas that are not sources)."""
    moves: MoveMap = {}
    for (topic, partition), (replicas, adding, _) in ongoing.items():
        moves.setdefault(topic, {})[partition] = (set(replicas) - set(adding), set(adding))
    for (topic, partition), replicas in proposed.items():
        parts = moves.setdefault(topic, {})
        sources = parts[partition][0] if partition in parts else set(current[(topic, partition)])
        parts[partition] = (sources, set(replicas) - sources)
    return moves


def leader_throttles(moves: MoveMap) -> dict[str, str]:
    """topic -> "partition:source,..." (Kafka's calculateLeaderThrottles: a TreeSet of strings)."""
    return {topic: ",".join(sorted({f"{p}:{b}" for p, (sources, _) in parts.items() for b in sources}))
            for topic, parts in moves.items()}


def follower_throttles(moves: MoveMap) -> dict[str, str]:
    """topic -> "partition:destination,..." for destinations that are not sources (calculateFollowerThrottles)."""
    return {topic: ",".join(sorted({f"{p}:{b}" for p, (sources, dests) in parts.items() for b in dests
                                    if b not in sources}))
            for topic, parts in moves.items()}


def reassigning_brokers(moves: MoveMap) -> list[int]:
    return sorted({b for parts in moves.values() for sources, dests in parts.values() for b in sources | dests})


def _alter(admin: AdminClient, resource_type: int, name: str, configs: list[tuple[str, int, str | None]]) -> None:
    """One IncrementalAlterConfigs of one resource; a refusal raises KafkaApiError."""
    conn = admin.connection()
    if resource_type == BROKER_RESOURCE:
        try:
            conn = admin.node(int(name))
        except ClientError:
            return  # not live (see above)
    response = conn.send(INCREMENTAL_ALTER_CONFIGS, {
        "resources": [{"resource_type": resource_type, "resource_name": name,
                       "configs": [{"name": k, "config_operation": op, "value": v} for k, op, v in configs]}],
        "validate_only": False})
    for r in response.responses:
        if r.error_code:
            what = "broker" if resource_type == BROKER_RESOURCE else "topic"
            raise KafkaApiError(r.error_code, r.error_message, context=f"IncrementalAlterConfigs of {what} '{name}'")


def set_reassignment_throttle(admin: AdminClient, moves: MoveMap, throttle: int, out: TextIO) -> None:
    """Kafka's modifyReassignmentThrottle: the topics' throttled replicas, then the brokers' rates."""
    leaders, followers = leader_throttles(moves), follower_throttles(moves)
    for topic in sorted(leaders.keys() | followers.keys()):
        ops: list[tuple[str, int, str | None]] = []
        if topic in leaders:
            ops.append((LEADER_REPLICAS, SET, leaders[topic]))
        if topic in followers:
            ops.append((FOLLOWER_REPLICAS, SET, followers[topic]))
        _alter(admin, TOPIC_RESOURCE, topic, ops)
    for broker in reassigning_brokers(moves):
        _alter(admin, BROKER_RESOURCE, str(broker), [(LEADER_RATE, SET, str(throttle)),
                                                     (FOLLOWER_RATE, SET, str(throttle))])
    print(f"The inter-broker throttle limit was set to {throttle} B/s", file=out)


def set_log_dir_throttle(admin: AdminClient, brokers: Iterable[int], throttle: int, out: TextIO) -> None:
    """Kafka's modifyLogDirThrottle: the brokers with a log-dir move."""
    for broker in sorted(set(brokers)):
        _alter(admin, BROKER_RESOURCE, str(broker), [(LOG_DIR_RATE, SET, str(throttle))])
    print(f"The replica-alter-dir throttle limit was set to {throttle} B/s", file=out)


def _plural(n: int) -> str:
    return "" if n == 1 else "s"


def clear_all_throttles(admin: AdminClient, targets: Mapping[TP, list[int]], out: TextIO) -> None:
    """Kafka's clearAllThrottles: every live broker's and every target broker's rates, every topic's lists."""
    live = {b.node_id for b in admin.metadata([]).brokers}
    brokers = sorted(live | {b for replicas in targets.values() for b in replicas})
    print(f"Clearing broker-level throttles on broker{_plural(len(brokers))} {','.join(map(str, brokers))}",
          file=out)
    for broker in brokers:
        _alter(admin, BROKER_RESOURCE, str(broker), [(k, DELETE, None) for k in BROKER_THROTTLES])
    topics = sorted({t for t, _ in targets})
    print(f"Clearing topic-level throttles on topic{_plural(len(topics))} {','.join(topics)}", file=out)
    for topic in topics:
        _alter(admin, TOPIC_RESOURCE, topic, [(k, DELETE, None) for k in TOPIC_THROTTLES])
