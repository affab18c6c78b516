"""What `kbroker ui` knows of a cluster: one snapshot per sampling round, as a tool sees it.

The collector (``kbroker.ui.collector``) builds a ``Snapshot`` the way an operator's tool would: Metadata,
ListOffsets, ListGroups/DescribeGroups/OffsetFetch, DescribeLogDirs, the brokers' ``/metrics``, and ZooKeeper's
``/brokers``, ``/controller``, ``/admin`` and ``/consumers``. The sampler (``kbroker.ui.sampler``) keeps the
history of what it needs (end offsets, commits, rates) and evaluates each group as Burrow does; the web app
(``kbroker.ui.app``) shows the two. Plain frozen dataclasses: ``dataclasses.asdict`` gives the JSON of ``/api/``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

# Where a group's offsets are stored: ZooKeeper (/consumers/<group>/offsets, OffsetCommit v0 and the old
# high-level consumers) or Kafka (__consumer_offsets, OffsetCommit v1+).
Storage = Literal["zookeeper", "kafka"]

# A group's status by Burrow's evaluation rules (github.com/linkedin/Burrow, "Consumer Lag Evaluation Rules"):
# a partition is OK, WARN, STOP, STALL or REWIND; a group is the worst of its partitions, naming the error when its
# erring partitions agree (STOP, STALL or REWIND) and ERR when they differ; NOTFOUND when no partition of it is known
# (kbroker.ui.status_rules).
Status = Literal["OK", "WARN", "ERR", "STOP", "STALL", "REWIND", "NOTFOUND"]


@dataclass(frozen=True)
class Broker:
    id: int
    host: str
    port: int
    rack: str | None
    up: bool  # registered in /brokers/ids (or answering, without ZooKeeper)


@dataclass(frozen=True)
class Partition:
    topic: str
    partition: int
    leader: int  # -1: offline
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    log_start: int  # earliest offset (ListOffsets -2); -1 when the leader did not answer
    log_end: int  # high watermark (ListOffsets -1): what a consumer can reach; -1 when unknown
    size_bytes: int  # the leader's replica's size from DescribeLogDirs; -1 when unknown

    @property
    def under_replicated(self) -> bool:
        return len(self.isr) < len(self.replicas)

    @property
    def preferred_leader(self) -> bool:
        return bool(self.replicas) and self.leader == self.replicas[0]


@dataclass(frozen=True)
class Topic:
    name: str
    internal: bool
    min_insync_replicas: int  # the topic's min.insync.replicas (its override or the broker default)
    partitions: tuple[Partition, ...]


@dataclass(frozen=True)
class LogDir:
    broker: int
    path: str
    error: str | None  # Kafka's error name (KAFKA_STORAGE_ERROR: offline); None when online
    size_bytes: int  # sum of its replicas
    free_bytes: int | None  # from the broker's /metrics when it publishes it, else None
    total_bytes: int | None
    partitions: tuple[tuple[str, int, int], ...]  # (topic, partition, size in bytes)


@dataclass(frozen=True)
class Member:
    member_id: str
    client_id: str
    host: str
    assignment: tuple[tuple[str, int], ...]  # (topic, partition)


@dataclass(frozen=True)
class Commit:
    """A committed offset as the store holds it now."""
    group: str
    storage: Storage
    topic: str
    partition: int
    offset: int
    # When it was committed: ZooKeeper, the offset node's mtime; Kafka, the commit's own timestamp read from
    # __consumer_offsets as Burrow reads it, or the sample time when that is not known. A commit of an unchanged
    # offset still moves it (Burrow's STALL needs that).
    timestamp_ms: int


@dataclass(frozen=True)
class Group:
    name: str
    storage: Storage
    state: str  # Kafka's group state (Stable, Empty, ...); for ZooKeeper groups "Active" with owners, else "Empty"
    members: tuple[Member, ...]
    # ZooKeeper groups: /consumers/<group>/owners/<topic>/<partition> holds the consumer id owning it
    owners: tuple[tuple[str, int, str], ...] = ()


@dataclass(frozen=True)
class Rates:
    """The cluster's throughput at this sample, summed over brokers' /metrics (per second, since the last one)."""
    bytes_in: float
    bytes_out: float
    messages_in: float


@dataclass(frozen=True)
class Snapshot:
    taken_ms: int  # wall clock, milliseconds
    brokers: tuple[Broker, ...]
    controller: int  # -1: none
    topics: tuple[Topic, ...]
    log_dirs: tuple[LogDir, ...]
    groups: tuple[Group, ...]
    commits: tuple[Commit, ...]
    rates: Rates | None = None  # None on the first sample (a rate needs two)
    errors: tuple[str, ...] = field(default=())  # what could not be read this round, one line each
    # from ZooKeeper (empty without it): /admin/delete_topics and /admin/reassign_partitions
    deleting_topics: tuple[str, ...] = ()
    reassigning: tuple[tuple[str, int], ...] = ()  # (topic, partition)


# -- what the sampler makes of the history (kbroker.ui.sampler) -------------------------------------------------------

@dataclass(frozen=True)
class PartitionLag:
    topic: str
    partition: int
    committed: int  # -1: nothing committed
    log_end: int
    lag: int  # log_end - committed, never below 0; the whole log end when nothing is committed
    lag_seconds: float | None  # how long ago the log end passed the committed offset, from stored end-offset samples
    last_commit_ms: int | None
    owner: str | None  # Kafka: "client_id/host"; ZooKeeper: the owner node's consumer id
    status: Status


@dataclass(frozen=True)
class GroupView:
    name: str
    storage: Storage
    state: str
    status: Status
    total_lag: int
    lag_seconds: float | None  # the largest of its partitions'
    last_commit_ms: int | None  # the newest commit of any of its partitions
    partitions: tuple[PartitionLag, ...]
    sparkline: tuple[int, ...]  # total lag at the last samples, oldest first (at most 60)


# A chart's series: (timestamp ms, value) points, oldest first.
Points = tuple[tuple[int, float], ...]
