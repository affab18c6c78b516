"""The read of a Fetch against the logs led here (Kafka's ReplicaManager.readFromLocalLog), made by
``ReplicaManager.fetch_messages`` and again by a waiting ``DelayedFetch``.

It takes ``FetchParams`` (Kafka's FetchParams): what the Fetch handler made of the request once it resolved the
wire version, the fetch session and the client's quota, none of which this layer sees. Records leave as file
ranges (``FileSlice``) that the connection sends with sendfile; no record byte passes through Python.
Followers read past the high watermark, consumers never do; an old consumer's reads pass through the
handler's ``convert`` (down-conversion). A follower's read of a replica over the leader's replication
throttle (KIP-73) carries no records, and what it does carry counts towards it.
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, TypeAlias

from kbroker import errors
from kbroker.log import TopicPartition
from kbroker.metrics import BrokerMetrics
from kbroker.metrics.hops import HOPS
from kbroker.protocol import message_types as msg
from kbroker.protocol.typed_api import FileSlice
from kbroker.replication.partition import Partition, ReadResult, error_code_of
from kbroker.replication.quiet import QuietPartitions

log = logging.getLogger(__name__)

# One partition's answer, with its topic, in the order the fetch read them.
PartitionAnswers: TypeAlias = "list[tuple[str, msg.FetchResponse_PartitionData]]"
# A read's records made fit for the client (down-conversion): (what was read, fetch offset, byte budget, first
# partition with data) -> what to send.
Converter: TypeAlias = "Callable[[ReadResult, int, int, bool], ReadResult]"
# (topic, partition, fetch offset, partition max bytes, current leader epoch), in request order
Wanted: TypeAlias = "list[tuple[str, int, int, int, int]]"


@dataclass(frozen=True, slots=True)
class FetchParams:
    """A Fetch as the replica manager reads it (Kafka's FetchParams)."""
    replica_id: int        # a follower's broker id, -1 for a consumer
    max_wait_ms: int
    min_bytes: int
    max_bytes: int         # the answer's limit: the request's (v3+), a consumer's quota window at most
    isolation_level: int   # 1: read_committed (up to the last stable offset, with the aborted transactions)
    min_one_message: bool  # the first partition with data gets a whole batch over the limits (KIP-74)
    convert: Converter | None = None  # for consumers whose version predates the stored format

    @property
    def from_follower(self) -> bool:
        return self.replica_id >= 0


def records_size(records: bytes | bytearray | memoryview | FileSlice | None) -> int:
    """The bytes of a partition answer's records: a file range's length, a buffer's size."""
    if records is None:
        return 0
    if isinstance(records, (bytes, bytearray, memoryview)):
        return len(records)
    return records.length


class LeaderReplicas(Protocol):
    """What a read asks of the replica manager (``kbroker.replicas.replica_manager``, which builds on this package)."""

    def partition(self, tp: TopicPartition) -> Partition | None: ...

    def fetchable(self, tp: TopicPartition, leader_epoch: int, replica_id: int, max_bytes: int) -> Partition: ...

    def should_leader_throttle(self, partition: Partition, replica_id: int) -> bool: ...

    def record_leader_replication(self, answered: PartitionAnswers) -> None: ...


class FetchRead:
    """One evaluation of a fetch against the logs (Kafka's readFromLocalLog): run again by a ``DelayedFetch``
    each time something it depends on moved; ``answers`` are what it read last, per partition."""

    def __init__(self, replicas: LeaderReplicas, params: FetchParams, wanted: Wanted,
                 denied: list[tuple[str, int]], metrics: BrokerMetrics | None,
                 quiet: QuietPartitions | None = None) -> None:
        self.replicas = replicas
        self.params = params
        self.wanted = wanted
        self.quiet = quiet  # a follower's fetch session: each read tells it which partitions are quiet
        self.denied = denied  # partitions the ACLs refuse: TOPIC_AUTHORIZATION_FAILED
        self.metrics = metrics  # the failed-fetch meters
        self.from_follower = params.replica_id >= 0
        self.bytes = 0
        self.errors = False
        self.partitions: PartitionAnswers = []

    def add(self, entry: tuple[str, int, int, int, int]) -> None:
        """A partition of the session to read from now on (it was quiet when the fetch arrived, and moved)."""
        self.wanted.append(entry)

    def run(self) -> FetchRead:
        params = self.params
        remaining = params.max_bytes
        read_committed = params.isolation_level == 1
        self.bytes = 0
        self.errors = bool(self.denied)
        self.partitions = []
        for topic, index in self.denied:
            out: msg.FetchResponse_PartitionData = {
                "partition_index": index, "error_code": errors.TopicAuthorizationFailedError.code,
                "high_watermark": -1, "last_stable_offset": -1, "log_start_offset": -1, "records": b""}
            if read_committed:
                out["aborted_transactions"] = []
            self.partitions.append((topic, out))
        first = True
        quiet = self.quiet
        for entry in self.wanted:
            topic, index, offset, max_bytes, leader_epoch = entry
            out = {"partition_index": index, "error_code": 0, "high_watermark": -1, "last_stable_offset": -1,
                   "log_start_offset": -1, "records": b""}  # Kafka sends empty, never null, records
            if read_committed:  # only v4+ asks for it
                out["aborted_transactions"] = []
            try:
                tp = TopicPartition(topic, index)
                partition = self.replicas.fetchable(tp, leader_epoch, params.replica_id, max_bytes)
                # Never negative: once the first batch has taken more than the response's max_bytes
                # (KIP-74), later partitions get no records, as Kafka's limitBytes stays >= 0.
                budget = max(0, min(max_bytes, remaining))
                result = partition.read(offset, budget, params.isolation_level, self.from_follower,
                                        min_one_batch=first and params.min_one_message)
                if params.convert is not None:
                    result = params.convert(result, offset, budget, first)
                if self.from_follower and self.replicas.should_leader_throttle(partition, params.replica_id):
                    result = result._replace(records=None)  # over the leader's replication throttle (KIP-73)
                out["high_watermark"] = result.high_watermark
                out["last_stable_offset"] = result.last_stable_offset
                out["log_start_offset"] = result.log_start_offset
                if result.aborted and "aborted_transactions" in out:
                    out["aborted_transactions"] = [{"producer_id": a.producer_id, "first_offset": a.first_offset}
                                                   for a in result.aborted]
                if result.records is not None and result.records.length:
                    out["records"] = result.records
                    self.bytes += result.records.length
                    remaining = max(0, remaining - result.records.length)
                    first = False
                if quiet is not None:
                    quiet.note(entry, tp, partition, out)
            except errors.KafkaError as exc:
                out["error_code"] = exc.code
                self.errors = True
                if self.metrics is not None:
                    self.metrics.fetch_failed(topic, exc.code)
                plog = self.replicas.partition(TopicPartition(topic, index))
                if plog is not None and not plog.log.offline:
                    out["high_watermark"] = plog.log.high_watermark
                    out["log_start_offset"] = plog.log.log_start_offset
            except Exception as exc:
                log.exception("fetch of %s-%d failed", topic, index)
                out["error_code"] = code = error_code_of(exc)
                self.errors = True
                if self.metrics is not None:
                    self.metrics.fetch_failed(topic, code)
            self.partitions.append((topic, out))
        return self

    def answers(self) -> PartitionAnswers:
        """What the last ``run`` read, once it leaves: a follower's throttled records count towards the leader's
        replication throttle."""
        if self.from_follower:
            self.replicas.record_leader_replication(self.partitions)
            if HOPS.on:
                self._mark_answers()
        return self.partitions

    def _mark_answers(self) -> None:
        """Hop tracing: the leader's log end each answered partition with records was read up to."""
        for topic, out in self.partitions:
            if out["records"]:
                partition = self.replicas.partition(TopicPartition(topic, out["partition_index"]))
                if partition is not None:
                    HOPS.mark("answer", topic, out["partition_index"], partition.log.log_end_offset,
                              self.params.replica_id)
