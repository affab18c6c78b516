"""Fetch (1) and ListOffsets (2): the read path.

Records leave as file ranges (``FileSlice``) that the connection sends with sendfile; no record
byte passes through Python. A fetch with less than ``min_bytes`` available waits in the purgatory
until an append to one of its partitions, or ``max_wait_ms``.

A Fetch with a replica id >= 0 comes from a follower: its fetch offset is its log end offset,
which the leader records (``Partition.update_follower``) before reading, so the high watermark,
the ISR expansion and the waiting acks=all produces move with it. Followers read past the high
watermark; consumers never do. OffsetForLeaderEpoch (23) answers where an epoch ended.
Fetch v0-3 consumers get down-converted copies (magic 0/1 message sets, ``kbroker.log.legacy``).
"""
from __future__ import annotations

import logging

from kbroker import errors
from kbroker.fetch_sessions import FetchSession
from kbroker.log import TopicPartition, legacy
from kbroker.log.partition_log import LATEST_TIMESTAMP, MAX_TIMESTAMP
from kbroker.metrics import BrokerMetrics
from kbroker.partition import Partition, error_code_of
from kbroker.purgatory import DelayedOperation
from kbroker.replica_manager import ReplicaManager
from kbroker.security.quotas import FetchQuota, fetch_response_size

from .acls import Op, cluster_allowed, topic_filter
from .context import BrokerContext
from .registry import handles

log = logging.getLogger(__name__)


class _Fetch:
    """One evaluation of a fetch request against the logs."""

    def __init__(self, replicas: ReplicaManager, version: int, request, session: FetchSession | None, incremental: bool,
                 wanted: list[tuple[str, int, int, int, int]]) -> None:
        self.replicas = replicas
        self.version = version
        self.request = request
        self.session = session
        self.incremental = incremental
        self.wanted = wanted
        self.from_follower = request.replica_id >= 0
        self.bytes = 0
        self.errors = False
        self.partitions: list[tuple[str, dict]] = []
        self.denied: list[tuple[str, int]] = []  # partitions the ACLs refuse: TOPIC_AUTHORIZATION_FAILED
        self.quota: FetchQuota | None = None  # a consumer under a consumer_byte_rate quota
        self.metrics: BrokerMetrics | None = None  # counts the bytes out (a follower's apart, as replication)

    def run(self) -> _Fetch:
        remaining = self.request.max_bytes if self.version >= 3 else 0x7FFFFFFF
        if self.quota is not None:  # no more than the quota allows in its window (Kafka caps it too)
            remaining = min(remaining, self.quota.max_bytes)
        self.bytes = 0
        self.errors = bool(self.denied)
        self.partitions = []
        for topic, index in self.denied:
            out = {"partition_index": index, "error_code": errors.TopicAuthorizationFailedError.code,
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

    def response(self) -> dict:
        if self.from_follower:  # what it sends of throttled replicas counts towards the leader's throttle
            self.replicas.record_leader_replication(self.partitions)
        if self.quota is not None:  # over the quota: an empty answer, muted (KIP-219)
            throttled = self.quota.throttled_response(fetch_response_size(self.partitions),
                                                      self.session.session_id if self.session is not None else 0)
            if throttled is not None:
                return throttled
        by_topic: dict[str, list[dict]] = {}
        for topic, out in self.partitions:
            if self.incremental and not self._changed(topic, out):
                continue
            by_topic.setdefault(topic, []).append(out)
        if self.metrics is not None:
            for topic, out in self.partitions:
                if out["records"]:
                    if self.from_follower:
                        self.metrics.replication_bytes_out += out["records"].length
                    else:
                        self.metrics.fetched(topic, out["records"].length)
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

    def _changed(self, topic: str, out: dict) -> bool:
        entry = self.session.partitions.get((topic, out["partition_index"])) if self.session else None
        return (entry is None or bool(out["records"]) or out["error_code"] != 0
                or entry.high_watermark != out["high_watermark"]
                or entry.last_stable_offset != out["last_stable_offset"]
                or entry.log_start_offset != out["log_start_offset"])


def _down_converted(result, version: int, offset: int, budget: int, first: bool):
    """Fetch v0-3 predates magic 2: the batches read become magic 1 (v2-3) or magic 0 (v0-1)
    messages, bytes rather than a file range, within ``budget`` (one message at least for the
    first partition with data)."""
    if result.records is None or not result.records.length:
        return result
    converted = legacy.down_convert(result.records.read(), 1 if version >= 2 else 0, offset, budget, first)
    return result._replace(records=converted if converted else None)


class DelayedFetch(DelayedOperation):
    """A fetch waiting for ``min_bytes`` (Kafka's DelayedFetch).

    ``ready`` runs in every purgatory check of its partitions: after each append and each high
    watermark move, so several times per produced batch on a replicated partition. As Kafka's
    tryComplete compares offsets before reading anything, it first compares what the evaluation
    depends on (``_inputs``: the partition hosted as leader, its epoch, whether its log is
    online, its log start offset and the end a read stops at: the log end offset for a follower,
    the high watermark or last stable offset for a consumer) with the last evaluation's, and
    evaluates the fetch again only when one of them moved: a follower's fetch is not read again
    for a high watermark move, a consumer's not for an append below the high watermark.

    ``fetch`` is the handler's evaluation, just made: ``_inputs`` are taken at construction, so
    the purgatory's first ``ready`` (in ``watch``) does not read the logs a second time."""

    def __init__(self, fetch: _Fetch, min_bytes: int) -> None:
        super().__init__()
        self.fetch = fetch
        self.min_bytes = min_bytes
        self._tps = [TopicPartition(topic, index) for topic, index, *_ in fetch.wanted]
        self._last_inputs = self._inputs()
        self._satisfied = False  # the last ``ready`` evaluated the fetch and found enough

    def _inputs(self) -> tuple:
        fetch = self.fetch
        replicas = fetch.replicas
        replica_id = fetch.request.replica_id
        read_committed = fetch.request.isolation_level == 1
        out: list[tuple[object, ...] | None] = []
        for tp in self._tps:
            p = replicas.partition(tp)
            if p is None:
                out.append(None)
                continue
            plog = p.log
            end: tuple[int, bool] | int
            if fetch.from_follower:
                end = (plog.log_end_offset, replica_id in p.followers)
            else:
                end = p.last_stable_offset if read_committed else plog.high_watermark
            out.append((p, p.leader_epoch, plog.offline, plog.log_start_offset, end))
        return tuple(out)

    def ready(self) -> bool:
        inputs = self._inputs()
        if inputs == self._last_inputs:
            return False  # the handler (or the last check) found too little, and nothing it read moved
        self._last_inputs = inputs
        self.fetch.run()
        self._satisfied = self.fetch.bytes >= self.min_bytes or self.fetch.errors
        return self._satisfied

    def result(self) -> dict:
        if not self._satisfied:
            # Timed out: evaluate once more so the answer carries the current offsets (a follower's
            # high watermark may have moved since the handler's evaluation without a new read).
            self.fetch.run()
        return self.fetch.response()


@handles(1)
def fetch(ctx: BrokerContext, header, request, conn):
    version = header.api_version
    wanted = [(t.topic, p.partition, p.fetch_offset, p.partition_max_bytes, p.current_leader_epoch)
              for t in request.topics for p in t.partitions]
    session, incremental = None, False
    if version >= 7:
        forgotten = [(f.topic, p) for f in request.forgotten_topics_data for p in f.partitions]
        try:
            session, incremental = ctx.fetch_sessions.resolve(request.session_id, request.session_epoch,
                                                                 wanted, forgotten)
        except errors.KafkaError as exc:
            return {"throttle_time_ms": 0, "error_code": exc.code, "session_id": 0, "responses": []}
        if session is not None:
            wanted = [(t, p, e.fetch_offset, e.max_bytes, e.current_leader_epoch)
                      for (t, p), e in session.partitions.items()]
    denied: list[tuple[str, int]] = []
    if ctx.security.authorizer is not None:
        wanted, denied = _authorized(ctx, conn, request.replica_id, wanted)
    if request.replica_id >= 0:
        ctx.replicas.record_follower_fetch(request.replica_id, [(TopicPartition(t, p), offset, epoch)
                                                                for t, p, offset, _, epoch in wanted])
    evaluation = _Fetch(ctx.replicas, version, request, session, incremental, wanted)
    evaluation.denied = denied
    if request.replica_id < 0:
        evaluation.quota = ctx.security.quotas.fetch_quota(conn, header)
    metrics = evaluation.metrics = ctx.metrics
    if metrics is not None:  # once per partition read, as Kafka (only partitions its metadata knows are read)
        exists = ctx.topics.exists
        for t, p, *_ in wanted:
            if exists(t, p):
                metrics.fetch_read(t)
    evaluation.run()
    if request.max_wait_ms <= 0 or evaluation.errors or evaluation.bytes >= max(request.min_bytes, 1):
        return evaluation.response()
    delayed = DelayedFetch(evaluation, max(request.min_bytes, 1))
    keys = [TopicPartition(t, p) for t, p, *_ in wanted]
    return ctx.replicas.purgatory.watch(delayed, keys, request.max_wait_ms)


def _authorized(ctx: BrokerContext, conn, replica_id: int, wanted: list) -> tuple[list, list[tuple[str, int]]]:
    """(the wanted partitions the ACLs allow, the refused ones): a follower needs CLUSTER_ACTION on
    the cluster (else every partition is refused), a consumer READ on each topic."""
    if replica_id >= 0:
        if cluster_allowed(ctx, conn, Op.CLUSTER_ACTION):
            return wanted, []
        return [], [(w[0], w[1]) for w in wanted]
    may_read = topic_filter(ctx, conn, Op.READ)
    assert may_read is not None  # only called with an authorizer
    return [w for w in wanted if may_read(w[0])], [(w[0], w[1]) for w in wanted if not may_read(w[0])]


@handles(23)
def offset_for_leader_epoch(ctx: BrokerContext, header, request, conn):
    """Where did ``leader_epoch`` end in the leader's log (its first offset of the next epoch, or
    the log end offset for the current one)? Followers ask it before fetching after a change."""
    topics = []
    may_describe = None
    if ctx.security.authorizer is not None and not cluster_allowed(ctx, conn, Op.CLUSTER_ACTION):
        may_describe = topic_filter(ctx, conn, Op.DESCRIBE)
    for topic in request.topics:
        partitions = []
        for p in topic.partitions:
            out = {"error_code": 0, "partition": p.partition, "leader_epoch": -1, "end_offset": -1}
            if may_describe is not None and not may_describe(topic.topic):
                out["error_code"] = errors.TopicAuthorizationFailedError.code
                partitions.append(out)
                continue
            try:
                partition = ctx.replicas.leader(TopicPartition(topic.topic, p.partition))
                partition.check_leader_epoch(p.current_leader_epoch)
                out["leader_epoch"], out["end_offset"] = partition.end_offset_for_epoch(p.leader_epoch)
            except errors.KafkaError as exc:
                out["error_code"] = exc.code
            except Exception as exc:
                log.exception("OffsetForLeaderEpoch of %s-%d failed", topic.topic, p.partition)
                out["error_code"] = error_code_of(exc)
            partitions.append(out)
        topics.append({"topic": topic.topic, "partitions": partitions})
    return {"throttle_time_ms": 0, "topics": topics}


def _epoch_of_answer(partition: Partition, timestamp: int, offset: int, from_replica: bool) -> int:
    """The leader epoch Kafka gives a ListOffsets answer: latest, the partition's current epoch to a
    consumer (the log's latest to a replica); earliest and by timestamp, the epoch that wrote the
    offset (-1 when the epoch cache has none), which a KIP-320 client validates its position with."""
    if timestamp == LATEST_TIMESTAMP:
        return partition.log.leader_epochs.latest_epoch if from_replica else partition.leader_epoch
    return partition.log.leader_epochs.epoch_for_offset(offset)


@handles(2)
def list_offsets(ctx: BrokerContext, header, request, conn):
    version = header.api_version
    topics = []
    may_describe = topic_filter(ctx, conn, Op.DESCRIBE)
    for topic in request.topics:
        partitions = []
        for p in topic.partitions:
            out = {"partition_index": p.partition_index, "error_code": 0, "timestamp": -1, "offset": -1,
                   "leader_epoch": -1}
            if may_describe is not None and not may_describe(topic.name):
                out["error_code"] = errors.TopicAuthorizationFailedError.code
                if version == 0:
                    out["old_style_offsets"] = []
                partitions.append(out)
                continue
            try:
                partition = ctx.replicas.leader(TopicPartition(topic.name, p.partition_index))
                if p.timestamp == MAX_TIMESTAMP and version >= 7:
                    record = partition.max_timestamp_record(request.isolation_level, request.replica_id >= 0)
                    if record is not None:  # the epoch of the record's batch, as Kafka (-1 when unknown)
                        out["offset"], out["timestamp"], out["leader_epoch"] = record
                    partitions.append(out)
                    continue
                from_replica = request.replica_id >= 0
                if from_replica:
                    found = partition.log.offset_for_timestamp(p.timestamp)
                else:
                    found = partition.offset_for_timestamp(p.timestamp, request.isolation_level, version >= 1)
                if found is not None:
                    out["offset"], out["timestamp"] = found
                    out["leader_epoch"] = _epoch_of_answer(partition, p.timestamp, found[0], from_replica)
                if version == 0:
                    out["old_style_offsets"] = [found[0]] if found is not None else []
            except errors.KafkaError as exc:
                out["error_code"] = exc.code
                if version == 0:
                    out["old_style_offsets"] = []
            partitions.append(out)
        topics.append({"name": topic.name, "partitions": partitions})
    return {"throttle_time_ms": 0, "topics": topics}
