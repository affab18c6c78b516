"""Fetch (1), ListOffsets (2) and OffsetForLeaderEpoch (23): the read path's requests.

The Fetch handler resolves the fetch session, authorizes (READ per topic for a consumer, CLUSTER_ACTION
for a follower), hands the consumer's byte-rate quota over as a cap and a throttle, and calls
``ReplicaManager.fetch_messages``, which owns the rest as Kafka's fetchMessages does: a follower's fetch
offset recorded as its log end offset, the read (``kbroker.replication.fetch_read``), the fetch meters and,
with less than ``min_bytes`` to read, the wait in the purgatory (``DelayedFetch``).

message.downconversion.enable=false: a consumer's Fetch v0-3 of a partition whose read holds batches of a newer
message format than that version knows (and whose topic stores one) is answered UNSUPPORTED_VERSION for that
partition instead of down-converted records, as Kafka's KafkaApis.handleFetchRequest (maybeConvertFetchedData)
does; the check runs as the answer is about to leave, before the quota and the byte meters see it.
"""
from __future__ import annotations

import logging
from collections.abc import Callable

from kbroker import errors
from kbroker.handlers.acls import Op, cluster_allowed, topic_filter
from kbroker.handlers.context import BrokerContext
from kbroker.handlers.registry import Answer, ClientConnection, handles
from kbroker.log import TopicPartition, legacy
from kbroker.log.partition_log import LATEST_TIMESTAMP, PartitionLog
from kbroker.protocol import message_types as msg
from kbroker.protocol.header import RequestHeader
from kbroker.replication.partition import Partition, error_code_of
from kbroker.security.quotas import FetchQuota, fetch_response_size

log = logging.getLogger(__name__)


@handles(msg.FETCH)
def fetch(ctx: BrokerContext, header: RequestHeader, request: msg.FetchRequest,
          conn: ClientConnection) -> Answer[msg.FetchResponse]:
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
    quota_bytes, throttle = None, None
    if request.replica_id < 0:
        quota = ctx.security.quotas.fetch_quota(conn, header)
        if quota is not None:  # consumer_byte_rate: the read stays within the window, an answer over it is muted
            quota_bytes = quota.max_bytes
            throttle = _throttle_of(quota)
        if version <= 3 and _down_conversion_disabled(ctx, wanted, version):
            throttle = _refusing_down_conversion(ctx, wanted, version, throttle)
    return ctx.replicas.fetch_messages(version, request, wanted, session=session, incremental=incremental,
                                       denied=denied, quota_bytes=quota_bytes, throttle=throttle,
                                       metrics=ctx.metrics, known=ctx.topics.exists)


Answers = list[tuple[str, msg.FetchResponse_PartitionData]]  # each partition's answer with its topic


def _throttle_of(quota: FetchQuota) -> Callable[[Answers, int], msg.FetchResponse | None]:
    def throttle(partitions: Answers, session_id: int) -> msg.FetchResponse | None:
        return quota.throttled_response(fetch_response_size(partitions), session_id)
    return throttle


Wanted = list[tuple[str, int, int, int, int]]  # (topic, partition, fetch offset, max bytes, leader epoch)


def _magic_of(version: int) -> int:
    """The newest message format a Fetch version reads: magic 0 for v0-1, 1 for v2-3, 2 from v4."""
    return 0 if version <= 1 else 1 if version <= 3 else 2


def _conversion_refused(ctx: BrokerContext, topic: str, index: int, version: int) -> PartitionLog | None:
    """The partition's log when its topic disables down-conversion and stores a newer format than ``version``
    reads (Kafka looks at the records only then); else None."""
    partition = ctx.replicas.partition(TopicPartition(topic, index))
    if partition is None:
        return None
    config = partition.log.config
    if config.message_downconversion_enable or config.record_magic <= _magic_of(version):
        return None
    return partition.log


def _down_conversion_disabled(ctx: BrokerContext, wanted: Wanted, version: int) -> bool:
    return any(_conversion_refused(ctx, topic, index, version) is not None for topic, index, *_ in wanted)


def _needed_conversion(plog: PartitionLog, fetch_offset: int, records: bytes, magic: int) -> bool:
    """Did the read answered with ``records`` (down-converted, from ``fetch_offset``) hold a stored batch newer
    than ``magic`` (Kafka's ``!hasCompatibleMagic`` of the records read)?"""
    entries = legacy.parse_entries(records, verify_crc=False, allow_partial=True)
    last = entries[-1].offset if entries else fetch_offset
    for header in plog.batch_headers(fetch_offset):
        if header.base_offset > last:
            break
        if header.magic > magic:
            return True
    return False


def _refusing_down_conversion(ctx: BrokerContext, wanted: Wanted, version: int,
                              throttle: Callable[[Answers, int], msg.FetchResponse | None] | None,
                              ) -> Callable[[Answers, int], msg.FetchResponse | None]:
    """The last look at the answer before it leaves (the read calls it before its quota and byte meters): each
    partition whose records needed a down-conversion its topic disables becomes Kafka's
    FetchResponse.partitionResponse(UNSUPPORTED_VERSION): no records, high watermark -1. Then the quota's."""
    offsets = {(topic, index): offset for topic, index, offset, *_ in wanted}

    def check(partitions: Answers, session_id: int) -> msg.FetchResponse | None:
        for topic, out in partitions:
            records = out["records"]
            if out["error_code"] or not isinstance(records, legacy.LegacyBytes) or not records:
                continue
            plog = _conversion_refused(ctx, topic, out["partition_index"], version)
            fetch_offset = offsets.get((topic, out["partition_index"]))
            if plog is None or fetch_offset is None or not _needed_conversion(plog, fetch_offset, records,
                                                                               _magic_of(version)):
                continue
            out["error_code"] = errors.UnsupportedVersionError.code
            out["high_watermark"] = out["last_stable_offset"] = out["log_start_offset"] = -1
            out["records"] = b""
        return throttle(partitions, session_id) if throttle is not None else None
    return check


def _authorized(ctx: BrokerContext, conn: ClientConnection, replica_id: int,
                wanted: Wanted) -> tuple[Wanted, list[tuple[str, int]]]:
    """(the wanted partitions the ACLs allow, the refused ones): a follower needs CLUSTER_ACTION on
    the cluster (else every partition is refused), a consumer READ on each topic."""
    if replica_id >= 0:
        if cluster_allowed(ctx, conn, Op.CLUSTER_ACTION):
            return wanted, []
        return [], [(w[0], w[1]) for w in wanted]
    may_read = topic_filter(ctx, conn, Op.READ)
    assert may_read is not None  # only called with an authorizer
    return [w for w in wanted if may_read(w[0])], [(w[0], w[1]) for w in wanted if not may_read(w[0])]


@handles(msg.OFFSET_FOR_LEADER_EPOCH)
def offset_for_leader_epoch(ctx: BrokerContext, header: RequestHeader, request: msg.OffsetForLeaderEpochRequest,
                            conn: ClientConnection) -> Answer[msg.OffsetForLeaderEpochResponse]:
    """Where did ``leader_epoch`` end in the leader's log (its first offset of the next epoch, or
    the log end offset for the current one)? Followers ask it before fetching after a change."""
    topics: list[msg.OffsetForLeaderEpochResponse_OffsetForLeaderTopicResult] = []
    may_describe = None
    if ctx.security.authorizer is not None and not cluster_allowed(ctx, conn, Op.CLUSTER_ACTION):
        may_describe = topic_filter(ctx, conn, Op.DESCRIBE)
    for topic in request.topics:
        partitions: list[msg.OffsetForLeaderEpochResponse_EpochEndOffset] = []
        for p in topic.partitions:
            out: msg.OffsetForLeaderEpochResponse_EpochEndOffset = {
                "error_code": 0, "partition": p.partition, "leader_epoch": -1, "end_offset": -1}
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


@handles(msg.LIST_OFFSETS)
def list_offsets(ctx: BrokerContext, header: RequestHeader, request: msg.ListOffsetsRequest,
                 conn: ClientConnection) -> Answer[msg.ListOffsetsResponse]:
    version = header.api_version
    topics: list[msg.ListOffsetsResponse_TopicResponse] = []
    may_describe = topic_filter(ctx, conn, Op.DESCRIBE)
    for topic in request.topics:
        partitions: list[msg.ListOffsetsResponse_PartitionResponse] = []
        for p in topic.partitions:
            out: msg.ListOffsetsResponse_PartitionResponse = {
                "partition_index": p.partition_index, "error_code": 0, "timestamp": -1, "offset": -1,
                "leader_epoch": -1}
            if may_describe is not None and not may_describe(topic.name):
                out["error_code"] = errors.TopicAuthorizationFailedError.code
                if version == 0:
                    out["old_style_offsets"] = []
                partitions.append(out)
                continue
            try:
                partition = ctx.replicas.leader(TopicPartition(topic.name, p.partition_index))
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
