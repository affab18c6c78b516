"""Replica assignment for new topics and partitions: Kafka's ``AdminUtils.assignReplicasToBrokers``
(reference ``zookeeper-layout.md`` section 6.13).

Leaders go round-robin over the broker list from a random start; followers sit at an offset
``1 + (shift + j) % (n - 1)`` from the leader (never 0, so never the leader again), and the shift
grows by one after every full round of n partitions, so that followers spread differently each
round. The rack-aware variant runs the same walk over a rack-alternating broker list and skips a
follower whose rack (or broker) already holds a replica while some rack (or broker) holds none.

The two random draws (start index, then shift) come from an injectable ``random.Random``; with a
``fixed_start_index`` there is no randomness at all.

Servers (kbroker's addition, issue 24): each broker may name the server it runs on
(``zk_compat.servers``), and no partition gets two replicas on one server while it has a server
without one, on top of Kafka's rule for racks. Racks stay the outer domain, servers the inner one:

- no broker shares a server with another (every broker its own host, Kafka's own setup): the
  constraint is the one on brokers, so the assignment is exactly Kafka's, rack-aware or not;
- no racks, some brokers sharing servers: Kafka's rack-aware walk with each server as a rack, the
  same assignment as with ``broker.rack`` set to the server's name (what host mode sets), so tools
  that only know racks agree with it;
- racks and shared servers: the rack-aware walk, brokers of a rack alternating between its servers,
  and a follower also skipped while its server holds a replica and another server holds none. Should
  a server span racks (a misconfiguration: one machine, two ``broker.rack`` values), the server wins
  over the rack for the follower the two disagree on, as losing the machine loses both.
"""
from __future__ import annotations

import enum
import random
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from zk_compat.errors import InvalidPartitionsError, InvalidReplicaAssignmentError, InvalidReplicationFactorError
from zk_compat.servers import shares_servers


@dataclass(frozen=True)
class BrokerMetadata:
    id: int
    rack: str | None = None
    server: str | None = None  # the machine it runs on (zk_compat.servers); None: a server of its own


class RackAwareMode(enum.Enum):
    """Kafka's RackAwareMode: ENFORCED fails when only some brokers have a rack, SAFE then
    ignores racks (what the CreateTopics API uses), DISABLED always ignores them."""

    ENFORCED = "enforced"
    SAFE = "safe"
    DISABLED = "disabled"


def broker_metadatas(brokers: Iterable[tuple[int, str | None]],
                     mode: RackAwareMode = RackAwareMode.ENFORCED,
                     servers: Mapping[int, str] | None = None) -> list[BrokerMetadata]:
    """(id, rack) pairs -> the broker list the assignment runs over, sorted by id, with racks
    kept or dropped per ``mode`` (Kafka's ``AdminZkClient.getBrokerMetadatas``). ``servers`` (broker
    id -> server) is kept in every mode: a machine is not a label one may choose to ignore."""
    servers = servers or {}
    pairs = sorted(brokers)
    with_rack = [b for b in pairs if b[1] is not None]
    partial = 0 < len(with_rack) < len(pairs)
    if mode is RackAwareMode.ENFORCED and partial:
        raise InvalidReplicaAssignmentError(
            "not all brokers have rack information; assign without racks (rack-aware mode "
            "'disabled' or 'safe') or set broker.rack on every broker")
    if mode is RackAwareMode.DISABLED or (mode is RackAwareMode.SAFE and partial):
        return [BrokerMetadata(broker_id, None, servers.get(broker_id)) for broker_id, _ in pairs]
    return [BrokerMetadata(broker_id, rack, servers.get(broker_id)) for broker_id, rack in pairs]


def assign_replicas_to_brokers(brokers: Sequence[BrokerMetadata | int], partition_count: int,
                               replication_factor: int, *, fixed_start_index: int = -1,
                               start_partition_id: int = -1,
                               rng: random.Random | None = None) -> dict[int, list[int]]:
    """Partition id -> replica list (preferred leader first) for ``partition_count`` partitions
    numbered from ``max(0, start_partition_id)``. ``brokers`` is used in the given order (Kafka's
    admin path sorts by id: see ``broker_metadatas``)."""
    metas = [b if isinstance(b, BrokerMetadata) else BrokerMetadata(int(b)) for b in brokers]
    if partition_count <= 0:
        raise InvalidPartitionsError("Number of partitions must be larger than 0.")
    if replication_factor <= 0:
        raise InvalidReplicationFactorError("Replication factor must be larger than 0.")
    if replication_factor > len(metas):
        raise InvalidReplicationFactorError(
            f"Replication factor: {replication_factor} larger than available brokers: {len(metas)}.")
    if len({m.id for m in metas}) != len(metas):
        raise InvalidReplicaAssignmentError(f"duplicate broker ids in {[m.id for m in metas]}")
    rng = rng if rng is not None else random.Random()
    servers = {m.id: m.server if m.server is not None else f"#{m.id}" for m in metas}  # '#': never a host
    shared = shares_servers(servers)
    if all(m.rack is None for m in metas):
        if shared:  # each server as a rack: the assignment of broker.rack = the server's name
            return _rack_aware(servers, partition_count, replication_factor, fixed_start_index,
                               start_partition_id, rng, servers)
        return _rack_unaware([m.id for m in metas], partition_count, replication_factor,
                             fixed_start_index, start_partition_id, rng)
    if any(m.rack is None for m in metas):
        raise InvalidReplicaAssignmentError(
            "Not all brokers have rack information for replica rack aware assignment.")
    return _rack_aware({m.id: m.rack for m in metas if m.rack is not None}, partition_count,
                       replication_factor, fixed_start_index, start_partition_id, rng,
                       servers if shared else None)


def _follower_index(first: int, shift: int, j: int, n: int) -> int:
    return (first + 1 + (shift + j) % (n - 1)) % n


def _walk(n: int, partition_count: int, fixed_start_index: int, start_partition_id: int,
          rng: random.Random) -> Iterator[tuple[int, int, int]]:
    """The walk both variants share: (partition, index of its leader in the broker list, shift)
    for each partition, leaders round-robin from the start index, the shift one more after
    every full round of ``n``. The start index and the first shift are the two random draws."""
    if fixed_start_index >= 0:
        start_index = shift = fixed_start_index
    else:
        start_index = rng.randrange(n)  # first draw
        shift = rng.randrange(n)        # second, independent draw
    first_partition = max(0, start_partition_id)
    for partition in range(first_partition, first_partition + partition_count):
        if partition > 0 and partition % n == 0:
            shift += 1
        yield partition, (partition + start_index) % n, shift


def _rack_unaware(broker_ids: list[int], partition_count: int, replication_factor: int,
                  fixed_start_index: int, start_partition_id: int, rng: random.Random) -> dict[int, list[int]]:
    n = len(broker_ids)
    assignment: dict[int, list[int]] = {}
    for partition, first, shift in _walk(n, partition_count, fixed_start_index, start_partition_id, rng):
        assignment[partition] = [broker_ids[first]] + [
            broker_ids[_follower_index(first, shift, j, n)] for j in range(replication_factor - 1)]
    return assignment


def rack_alternated_brokers(broker_racks: Mapping[int, str], servers: Mapping[int, str] | None = None
                            ) -> list[int]:
    """Racks sorted by name, brokers of a rack sorted by id, then one broker per rack in turn:
    ``rack1:[0,1,2] rack2:[3,4,5] rack3:[6,7,8]`` -> ``0,3,6,1,4,7,2,5,8``. With ``servers``, a
    rack's brokers alternate between its servers likewise (servers in the order of their smallest
    id, so brokers that are each their own server keep the order by id)."""
    by_rack: dict[str, list[int]] = {}
    for broker_id, rack in broker_racks.items():
        by_rack.setdefault(rack, []).append(broker_id)
    if servers is None:
        queues = [sorted(by_rack[rack]) for rack in sorted(by_rack)]
    else:
        queues = [_interleaved(_grouped(sorted(by_rack[rack]), servers)) for rack in sorted(by_rack)]
    return _interleaved(queues)


def _grouped(broker_ids: list[int], servers: Mapping[int, str]) -> list[list[int]]:
    """Sorted ids -> one list per server, in the order of each server's smallest id."""
    by_server: dict[str, list[int]] = {}
    for broker_id in broker_ids:
        by_server.setdefault(servers[broker_id], []).append(broker_id)
    return list(by_server.values())


def _interleaved(queues: list[list[int]]) -> list[int]:
    """The first of each queue in turn, then the second of each, ..."""
    result: list[int] = []
    depth = 0
    while len(result) < sum(map(len, queues)):
        result += [q[depth] for q in queues if depth < len(q)]
        depth += 1
    return result


@dataclass
class _Spread:
    """What one partition's replicas hold so far: racks, servers and brokers. A follower is admitted
    where it adds a rack, a server and a broker, each while one is left to add (Kafka's test, with
    servers between racks and brokers; without shared servers the server test is the broker test)."""

    racks: Mapping[int, str]
    servers: Mapping[int, str]
    rack_count: int
    server_count: int
    broker_count: int
    racks_used: set[str] = field(default_factory=set)
    servers_used: set[str] = field(default_factory=set)
    brokers_used: set[int] = field(default_factory=set)

    def add(self, broker: int) -> None:
        self.racks_used.add(self.racks[broker])
        self.servers_used.add(self.servers[broker])
        self.brokers_used.add(broker)

    def admits(self, broker: int, mind_rack: bool = True) -> bool:
        return ((not mind_rack or self.racks[broker] not in self.racks_used
                 or len(self.racks_used) == self.rack_count)
                and (self.servers[broker] not in self.servers_used or len(self.servers_used) == self.server_count)
                and (broker not in self.brokers_used or len(self.brokers_used) == self.broker_count))


def _rack_aware(broker_racks: Mapping[int, str], partition_count: int, replication_factor: int,
                fixed_start_index: int, start_partition_id: int, rng: random.Random,
                servers: Mapping[int, str] | None = None) -> dict[int, list[int]]:
    arranged = rack_alternated_brokers(broker_racks, servers)
    n = len(arranged)
    rack_count = len(set(broker_racks.values()))
    server_of = servers if servers is not None else {b: f"#{b}" for b in arranged}
    server_count = len(set(server_of.values()))
    assignment: dict[int, list[int]] = {}
    for partition, first, shift in _walk(n, partition_count, fixed_start_index, start_partition_id, rng):
        leader = arranged[first]
        replicas = [leader]
        spread = _Spread(broker_racks, server_of, rack_count, server_count, n)
        spread.add(leader)
        k = 0
        for _ in range(replication_factor - 1):
            # only a server spanning racks can leave no broker that adds both: then the server counts
            mind_rack = servers is None or any(spread.admits(b) for b in arranged)
            while True:
                broker = arranged[_follower_index(first, shift * rack_count, k, n)]
                k += 1
                if spread.admits(broker, mind_rack):
                    replicas.append(broker)
                    spread.add(broker)
                    break
        assignment[partition] = replicas
    return assignment


def assign_replicas_for_new_partitions(existing: Mapping[int, Sequence[int]], brokers: Sequence[BrokerMetadata | int],
                                       new_partition_count: int) -> dict[int, list[int]]:
    """Assignments for the partitions added when a topic grows to ``new_partition_count``
    (Kafka's ``createPartitionsWithAssignment``): replication factor of partition 0, brokers
    sorted by id, start index = first broker whose id >= partition 0's first replica (else 0),
    used for the shift too, partition ids continuing after the existing ones. No randomness."""
    if 0 not in existing or not existing[0]:
        raise InvalidReplicaAssignmentError("the topic has no assignment for partition 0")
    to_add = new_partition_count - len(existing)
    if to_add <= 0:
        raise InvalidPartitionsError(
            f"Topic currently has {len(existing)} partitions, {new_partition_count} would not be an increase.")
    metas = sorted((b if isinstance(b, BrokerMetadata) else BrokerMetadata(int(b)) for b in brokers),
                   key=lambda m: m.id)
    first_replica = existing[0][0]
    start = next((i for i, m in enumerate(metas) if m.id >= first_replica), 0)
    return assign_replicas_to_brokers(metas, to_add, len(existing[0]), fixed_start_index=start,
                                      start_partition_id=len(existing))
