"""Fetch (1), ListOffsets (2) and OffsetForLeaderEpoch (23): the read path's requests.

The Fetch handler owns what Kafka's KafkaApis.handleFetchRequest owns: the wire version's rules, the fetch
session (KIP-227: which partitions a request means, which an incremental answer leaves out), authorization (READ
per topic for a consumer, CLUSTER_ACTION for a follower), the consumer's byte-rate quota (a cap on the read, a
muted answer over it), down-conversion for consumers older than the stored format, and the fetch byte meters.
``ReplicaManager.fetch_messages`` owns the rest, as Kafka's fetchMessages does: a follower's fetch offset
recorded as its log end offset, the read (``kbroker.replication.fetch_read``, given ``FetchParams``) and, with
less than ``min_bytes`` to read, the wait in the purgatory (``DelayedFetch``); it answers through ``respond``,
which shapes the answer here from each partition's.

message.downconversion.enable=false: a consumer's Fetch v0-3 of a partition whose read holds batches of a newer
message format than that version knows (and whose topic stores one) is answered UNSUPPORTED_VERSION for that
partition instead of down-converted records, as Kafka's KafkaApis.handleFetchRequest (maybeConvertFetchedData)
does; the check runs as the answer is about to leave, before the quota and the byte meters see it.
"""
from __future__ import annotations

import logging
from collections.abc import Callable

from kbroker import errors
from kbroker.handlers.authorize import Op, cluster_allowed, topic_filter
from kbroker.handlers.context import BrokerContext
from kbroker.handlers.fetch_sessions import FetchSession
from kbroker.handlers.registry import Answer, ClientConnection, handles
from kbroker.log import TopicPartition, legacy
from kbroker.log.partition_log import LATEST_TIMESTAMP, PartitionLog
from kbroker.protocol import message_types as msg
from kbroker.protocol.header import RequestHeader
from kbroker.replication.fetch_read import FetchParams, PartitionAnswers, records_size
from kbroker.replication.partition import Partition, ReadResult, error_code_of
from kbroker.replication.quiet import QuietPartitions
from kbroker.security.quotas import fetch_response_size

log = logging.getLogger(__name__)

NO_LIMIT = 0x7FFFFFFF  # Fetch v0-2 has no response-wide max_bytes


@handles(msg.FETCH)
def fetch(ctx: BrokerContext, header: RequestHeader, request: msg.FetchRequest,
          conn: ClientConnection) -> Answer[msg.FetchResponse]:
    version = header.api_version
    wanted = [(t.topic, p.partition, p.fetch_offset, p.partition_max_bytes, p.current_leader_epoch)
              for t in request.topics for p in t.partitions]
    session, incremental = None, False
    quiet: QuietPartitions | None = None
    if version >= 7:
        forgotten = [(f.topic, p) for f in request.forgotten_topics_data for p in f.partitions]
        try:
            session, incremental = ctx.fetch_sessions.resolve(request.session_id, request.session_epoch,
                                                                 wanted, forgotten)
        except errors.KafkaError as exc:
            return {"throttle_time_ms": 0, "error_code": exc.code, "session_id": 0, "responses": []}
        if session is not None:
            entries = session.partitions
            if request.replica_id >= 0:  # a follower's: its incremental fetches skip the quiet partitions
                quiet = session.quiet_partitions(request.replica_id, ctx.replicas.quiet)
            if incremental and quiet is not None:  # what it names, and the session's partitions awake
                keys = dict.fromkeys((t, p) for t, p, *_ in wanted)
                keys.update(dict.fromkeys(quiet.awake))
                wanted = [(t, p, e.fetch_offset, e.max_bytes, e.current_leader_epoch)
                          for t, p in keys if (e := entries.get((t, p))) is not None]
            else:
                wanted = [(t, p, e.fetch_offset, e.max_bytes, e.current_leader_epoch) for (t, p), e in entries.items()]
    denied: list[tuple[str, int]] = []
    if ctx.security.authorizer is not None:
        wanted, denied = _authorized(ctx, conn, request.replica_id, wanted)
    from_follower = request.replica_id >= 0
    max_bytes = request.max_bytes if version >= 3 else NO_LIMIT
    quota = None if from_follower else ctx.security.quotas.fetch_quota(conn, header)
    if quota is not None:  # consumer_byte_rate: the read stays within the window, an answer over it is muted
        max_bytes = min(max_bytes, quota.max_bytes)
    old_consumer = version <= 3 and not from_follower  # predates magic 2: its reads are down-converted
    params = FetchParams(
        replica_id=request.replica_id, max_wait_ms=request.max_wait_ms, min_bytes=request.min_bytes,
        max_bytes=max_bytes, isolation_level=request.isolation_level if version >= 4 else 0,
        # KIP-74 (v3+): the first partition with data gets a whole batch; consumers always had one message
        min_one_message=version >= 3 or not from_follower,
        convert=_down_converter(version) if old_consumer else None)
    refusing = old_consumer and _down_conversion_disabled(ctx, wanted, version)
    # each partition's fetch offset, which the refusal looks at (built only for it: not on every follower fetch)
    offsets = {(topic, index): offset for topic, index, offset, *_ in wanted} if refusing else {}

    def respond(answers: PartitionAnswers) -> msg.FetchResponse:
        if refusing:
            _refuse_down_conversion(ctx, answers, offsets, version)
        if quota is not None:  # over the quota: an empty answer, muted (KIP-219)
            throttled = quota.throttled_response(fetch_response_size(answers),
                                                 session.session_id if session is not None else 0)
            if throttled is not None:
                return throttled
        return _response(ctx, answers, version, from_follower, session, incremental)

    return ctx.replicas.fetch_messages(params, wanted, denied, respond, quiet)


def _response(ctx: BrokerContext, answers: PartitionAnswers, version: int, from_follower: bool,
              session: FetchSession | None, incremental: bool) -> msg.FetchResponse:
    """The answer from each partition's: an incremental one without the partitions that have nothing new for
    the session (KIP-227), whose entries learn what was sent; the byte meters (a follower's as replication)."""
    by_topic: dict[str, list[msg.FetchResponse_PartitionData]] = {}
    metrics = ctx.metrics
    for topic, out in answers:
        if out["error_code"] == errors.KafkaStorageError.code and version <= 5:
            out["error_code"] = errors.NotLeaderOrFollowerError.code  # older clients do not know 56
        entry = session.partitions.get((topic, out["partition_index"])) if session is not None else None
        if (not incremental or entry is None or out["records"] or out["error_code"]
                or entry.high_watermark != out["high_watermark"]
                or entry.last_stable_offset != out["last_stable_offset"]
                or entry.log_start_offset != out["log_start_offset"]):
            by_topic.setdefault(topic, []).append(out)
        if entry is not None:
            entry.high_watermark = out["high_watermark"]
            entry.last_stable_offset = out["last_stable_offset"]
            entry.log_start_offset = out["log_start_offset"]
        if metrics is not None and out["records"]:
            if from_follower:
                metrics.replication_bytes_out += records_size(out["records"])
            else:
                metrics.fetched(topic, records_size(out["records"]))
    return {
        "throttle_time_ms": 0,
        "error_code": 0,
        "session_id": session.session_id if session is not None else 0,
        "responses": [{"topic": t, "partitions": parts} for t, parts in by_topic.items()],
    }


def _down_converter(version: int) -> Callable[[ReadResult, int, int, bool], ReadResult]:
    """Fetch v0-3 predates magic 2: the batches read become magic 1 (v2-3) or magic 0 (v0-1) messages, bytes
    rather than a file range, within the read's budget (one message at least for the first partition with
    data)."""
    magic = _magic_of(version)

    def convert(result: ReadResult, offset: int, budget: int, first: bool) -> ReadResult:
        records = result.records
        if records is None or not records.length or isinstance(records, legacy.LegacyBytes):
            return result  # nothing read, or converted already
        converted = legacy.down_convert(records.read(), magic, offset, budget, first)
        return result._replace(records=converted if converted else None)
    return convert


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


def _refuse_down_conversion(ctx: BrokerContext, answers: PartitionAnswers, offsets: dict[tuple[str, int], int],
                            version: int) -> None:
    """The last look at the answer before it leaves (before the quota and the byte meters): each partition whose
    records needed a down-conversion its topic disables becomes Kafka's
    FetchResponse.partitionResponse(UNSUPPORTED_VERSION): no records, high watermark -1."""
    for topic, out in answers:
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
