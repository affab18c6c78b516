"""The read of a Fetch against the logs led here (Kafka's ReplicaManager.readFromLocalLog), made by
``ReplicaManager.fetch_messages`` and again by a waiting ``DelayedFetch``.

Records leave as file ranges (``FileSlice``) that the connection sends with sendfile; no record byte passes
through Python. Followers read past the high watermark, consumers never do; Fetch v0-3 consumers get
down-converted copies (magic 0/1 message sets, ``kbroker.log.legacy``). A follower's read of a replica over
the leader's replication throttle (KIP-73) carries no records, and what it does carry counts towards it.
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol, TypeAlias

from kbroker import errors
from kbroker.log import TopicPartition, legacy
from kbroker.metrics import BrokerMetrics
from kbroker.metrics.hops import HOPS
from kbroker.protocol import message_types as msg
from kbroker.protocol.typed_api import FileSlice
from kbroker.replication.fetch_sessions import FetchSession
from kbroker.replication.partition import Partition, ReadResult, error_code_of

log = logging.getLogger(__name__)

# One partition's answer, with its topic, in the order the fetch read them.
PartitionAnswers: TypeAlias = "list[tuple[str, msg.FetchResponse_PartitionData]]"
# A consumer quota's check of the answer about to leave (its partitions, the session id): None to send it, else
# the empty answer to send instead (``kbroker.security.quotas.FetchQuota``).
FetchThrottle: TypeAlias = "Callable[[PartitionAnswers, int], msg.FetchResponse | None]"


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
    """One evaluation of a fetch request against the logs (Kafka's readFromLocalLog): run again by a
    ``DelayedFetch`` each time something it depends on moved, answered once by ``response``."""

    def __init__(self, replicas: LeaderReplicas, version: int, request: msg.FetchRequest, session: FetchSession | None,
                 incremental: bool, wanted: list[tuple[str, int, int, int, int]]) -> None:
        self.replicas = replicas
        self.version = version
        self.request = request
        self.session = session
        self.incremental = incremental
        self.wanted = wanted
        self.from_follower = request.replica_id >= 0
        self.bytes = 0
        self.errors = False
        self.partitions: PartitionAnswers = []
        self.denied: list[tuple[str, int]] = []  # partitions the ACLs refuse: TOPIC_AUTHORIZATION_FAILED
        # a consumer under a consumer_byte_rate quota: the most its window allows, and the muted answer when over
        self.quota_bytes: int | None = None
        self.throttle: FetchThrottle | None = None
        self.metrics: BrokerMetrics | None = None  # counts the bytes out (a follower's apart, as replication)

    def run(self) -> FetchRead:
        remaining = self.request.max_bytes if self.version >= 3 else 0x7FFFFFFF
        if self.quota_bytes is not None:  # no more than the quota allows in its window (Kafka caps it too)
            remaining = min(remaining, self.quota_bytes)
        self.bytes = 0
        self.errors = bool(self.denied)
        self.partitions = []
        for topic, index in self.denied:
            out: msg.FetchResponse_PartitionData = {
                "partition_index": index, "error_code": errors.TopicAuthorizationFailedError.code,
                "high_watermark": -1, "last_stable_offset": -1, "log_start_offset": -1, "records": b""}
            if self.version >= 4 and self.request.isolation_level == 1:
                out["aborted_transactions"] = []
            self.partitions.append((topic, out))
        first = True
        for topic, index, offset, max_bytes, leader_epoch in self.wanted:
            out = {"partition_index": index, "error_code": 0, "high_watermark": -1, "last_stable_offset": -1,
                   "log_start_offset": -1, "records": b""}  # Kafka sends empty, never null, records
            if self.version >= 4 and self.request.isolation_level == 1:
                out["aborted_transactions"] = []
            try:
                partition = self.replicas.fetchable(TopicPartition(topic, index), leader_epoch,
                                                    self.request.replica_id, max_bytes)
                if self.incremental and self.from_follower and offset == partition.log.log_end_offset:
                    assert self.session is not None  # an incremental fetch has its session
                    entry = self.session.partitions.get((topic, index))
                    if (entry is not None and entry.high_watermark == partition.log.high_watermark
                            and entry.last_stable_offset == partition.last_stable_offset
                            and entry.log_start_offset == partition.log.log_start_offset):
                        continue  # caught up and nothing moved: an incremental answer leaves it out
                # Never negative: once the first batch has taken more than the response's max_bytes
                # (KIP-74), later partitions get no records, as Kafka's limitBytes stays >= 0.
                budget = max(0, min(max_bytes, remaining))
                legacy_format = self.version <= 3 and not self.from_follower
                result = partition.read(offset, budget, self.request.isolation_level, self.from_follower,
                                        min_one_batch=first and (self.version >= 3 or legacy_format))
                if legacy_format:
                    result = _down_converted(result, self.version, offset, budget, first)
                if self.from_follower and self.replicas.should_leader_throttle(partition, self.request.replica_id):
                    result = result._replace(records=None)  # over the leader's replication throttle (KIP-73)
                out["high_watermark"] = result.high_watermark
                out["last_stable_offset"] = result.last_stable_offset
                out["log_start_offset"] = result.log_start_offset
                if result.aborted and "aborted_transactions" in out:  # read_committed, v4+
                    out["aborted_transactions"] = [{"producer_id": a.producer_id, "first_offset": a.first_offset}
                                                   for a in result.aborted]
                if result.records is not None and result.records.length:
                    out["records"] = result.records
                    self.bytes += result.records.length
                    remaining = max(0, remaining - result.records.length)
                    first = False
            except errors.KafkaError as exc:
                code = exc.code
                if code == errors.KafkaStorageError.code and self.version <= 5:
                    code = errors.NotLeaderOrFollowerError.code  # older clients do not know 56
                out["error_code"] = code
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

    def _mark_answers(self) -> None:
        """Hop tracing: the leader's log end each answered partition with records was read up to."""
        for topic, out in self.partitions:
            if out["records"]:
                partition = self.replicas.partition(TopicPartition(topic, out["partition_index"]))
                if partition is not None:
                    HOPS.mark("answer", topic, out["partition_index"], partition.log.log_end_offset,
                              self.request.replica_id)

    def response(self) -> msg.FetchResponse:
        if self.from_follower:  # what it sends of throttled replicas counts towards the leader's throttle
            self.replicas.record_leader_replication(self.partitions)
            if HOPS.on:
                self._mark_answers()
        if self.throttle is not None:  # over the quota: an empty answer, muted (KIP-219)
            throttled = self.throttle(self.partitions, self.session.session_id if self.session is not None else 0)
            if throttled is not None:
                return throttled
        by_topic: dict[str, list[msg.FetchResponse_PartitionData]] = {}
        for topic, out in self.partitions:
            if self.incremental and not self._changed(topic, out):
                continue
            by_topic.setdefault(topic, []).append(out)
        if self.metrics is not None:
            for topic, out in self.partitions:
                if out["records"]:
                    if self.from_follower:
                        self.metrics.replication_bytes_out += records_size(out["records"])
                    else:
                        self.metrics.fetched(topic, records_size(out["records"]))
        if self.session is not None:
            for topic, out in self.partitions:
                entry = self.session.partitions.get((topic, out["partition_index"]))
                if entry is not None:
                    entry.high_watermark = out["high_watermark"]
                    entry.last_stable_offset = out["last_stable_offset"]
                    entry.log_start_offset = out["log_start_offset"]
        return {
            "throttle_time_ms": 0,
            "error_code": 0,
            "session_id": self.session.session_id if self.session is not None else 0,
            "responses": [{"topic": t, "partitions": parts} for t, parts in by_topic.items()],
        }

    def _changed(self, topic: str, out: msg.FetchResponse_PartitionData) -> bool:
        entry = self.session.partitions.get((topic, out["partition_index"])) if self.session else None
        return (entry is None or bool(out["records"]) or out["error_code"] != 0
                or entry.high_watermark != out["high_watermark"]
                or entry.last_stable_offset != out["last_stable_offset"]
                or entry.log_start_offset != out["log_start_offset"])


def _down_converted(result: ReadResult, version: int, offset: int, budget: int, first: bool) -> ReadResult:
    """Fetch v0-3 predates magic 2: the batches read become magic 1 (v2-3) or magic 0 (v0-1)
    messages, bytes rather than a file range, within ``budget`` (one message at least for the
    first partition with data)."""
    records = result.records
    if records is None or not records.length or isinstance(records, legacy.LegacyBytes):
        return result  # nothing read, or converted already
    converted = legacy.down_convert(records.read(), 1 if version >= 2 else 0, offset, budget, first)
    return result._replace(records=converted if converted else None)
