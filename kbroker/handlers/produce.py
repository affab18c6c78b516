"""Produce (0): the write path. Each partition's records are a memoryview into the request frame;
the log validates and assigns offsets in place, then appends those very bytes.

Requests of one connection are applied in arrival order (this runs synchronously on dispatch).
acks=0 gets no response; if any partition failed, the connection is closed instead, as Kafka does,
so the client refreshes its metadata. acks=all (-1) answers once the high watermark has passed
every written partition's last offset: at once for an ISR of one, else from the purgatory
(``ReplicaManager.wait_for_isr``). v0-2 carry legacy message sets (magic 0/1), converted
to one magic-2 batch first (``kbroker.log.legacy``) unless the topic's message.format.version is
below 0.11, whose log keeps magic 0/1 messages (``kbroker.log.legacy_append``).
"""
from __future__ import annotations

import logging
from typing import Any

from kbroker import errors
from kbroker._core import records as core_records
from kbroker.log import TopicPartition, legacy
from kbroker.partition import error_code_of
from kbroker.protocol.outcome import CLOSE, NO_RESPONSE
from kbroker.replication.delayed_produce import PendingAck

from .acls import Op, Res, allowed, cluster_allowed, topic_filter
from .context import BrokerContext
from .registry import handles

log = logging.getLogger(__name__)


@handles(0)
def produce(ctx: BrokerContext, header, request, conn):
    version = header.api_version
    acks = request.acks
    responses = []
    failed = False
    waiting: list[PendingAck] = []
    may_write = None
    if ctx.security.authorizer is not None:  # ACLs: the transactional id, then each topic
        if request.transactional_id is not None and not allowed(ctx, conn, Op.WRITE, Res.TRANSACTIONAL_ID,
                                                                request.transactional_id):
            return _refused_whole(request, acks, version, errors.TransactionalIdAuthorizationFailedError)
        may_write = topic_filter(ctx, conn, Op.WRITE)
    for topic in request.topic_data:
        partitions = []
        if may_write is not None and (not may_write(topic.name) or not _may_exist(ctx, conn, topic.name)):
            error = errors.TopicAuthorizationFailedError if not may_write(topic.name) \
                else errors.UnknownTopicOrPartitionError  # no CREATE: not auto-created
            for data in topic.partition_data:
                partitions.append(_refused(data.index, version, error))
            failed = True
            responses.append({"name": topic.name, "partition_responses": partitions})
            continue
        for data in topic.partition_data:
            result = _append_one(ctx, version, acks, topic.name, data.index, data.records, waiting)
            failed |= result["error_code"] != 0
            partitions.append(result)
        responses.append({"name": topic.name, "partition_responses": partitions})
    if acks == 0:
        return CLOSE if failed else NO_RESPONSE
    response = {"responses": responses, "throttle_time_ms": 0}
    if not waiting:
        return response
    return ctx.replicas.wait_for_isr(response, waiting, version, request.timeout_ms)


def _may_exist(ctx: BrokerContext, conn, topic: str) -> bool:
    """The topic exists, or it would be auto-created and the principal may create it."""
    if topic in ctx.topics.topics or not ctx.config.auto_create_topics_enable:
        return True
    return cluster_allowed(ctx, conn, Op.CREATE) or allowed(ctx, conn, Op.CREATE, Res.TOPIC, topic)


def _refused(index: int, version: int, error: type[errors.KafkaError]) -> dict:
    out: dict[str, Any] = {"index": index, "error_code": error.code, "base_offset": -1, "log_append_time_ms": -1,
                           "log_start_offset": -1}
    if version >= 8:
        out["error_message"] = None
    return out


def _refused_whole(request, acks: int, version: int, error: type[errors.KafkaError]):
    if acks == 0:
        return CLOSE
    return {"throttle_time_ms": 0, "responses": [
        {"name": t.name, "partition_responses": [_refused(d.index, version, error) for d in t.partition_data]}
        for t in request.topic_data]}


def _append_one(ctx: BrokerContext, version: int, acks: int, topic: str, index: int, batches, waiting: list) -> dict:
    out: dict[str, Any] = {"index": index, "error_code": 0, "base_offset": -1, "log_append_time_ms": -1,
                           "log_start_offset": -1}
    counted = False  # reached the log, as Kafka counts TotalProduceRequests (past its request checks)
    try:
        if acks not in (-1, 0, 1):
            raise errors.InvalidRequiredAcksError(f"acks must be -1, 0 or 1, not {acks}")
        known = ctx.topics.topics.get(topic)
        if known is not None and known.internal:
            raise errors.InvalidTopicError(f"{topic} is internal: clients may not produce to it")
        if known is None and ctx.config.auto_create_topics_enable:
            ctx.topics.auto_create(topic)
        tp = TopicPartition(topic, index)
        partition = ctx.replicas.leader(tp)  # NOT_LEADER_OR_FOLLOWER / UNKNOWN_TOPIC_OR_PARTITION before the records
        if batches is None or len(batches) == 0:
            raise errors.InvalidRecordError("no record batch")
        if version >= 3:
            _check_single_v2_batch(batches, version)
        elif legacy.is_legacy(batches) and partition.log.config.record_magic >= 2:
            batches = legacy.up_convert(batches)  # v0-2: message sets (magic 0/1) become one batch
        counted = True
        result = ctx.replicas.append_as_leader(partition, batches, acks)
        if ctx.metrics is not None:
            ctx.metrics.produced(topic, result.size, result.record_count)
        out["base_offset"] = result.first_offset
        out["log_append_time_ms"] = result.log_append_time
        out["log_start_offset"] = partition.log.log_start_offset
        if acks == -1 and partition.high_watermark <= result.last_offset:
            waiting.append(PendingAck(partition, result.last_offset + 1, out))
    except errors.KafkaError as exc:
        out["error_code"] = exc.code
        if ctx.metrics is not None and (counted or (isinstance(exc, _REFUSED_AT_THE_LOG)
                                                    and ctx.topics.exists(topic, index))):
            ctx.metrics.produce_refused(topic, exc.code, len(batches) if batches is not None else 0)
        if version >= 8:
            out["error_message"] = exc.message
            # Records refused one by one (keyless on a compacted topic, timestamps): each named by its index
            out["record_errors"] = [{"batch_index": i, "batch_index_error_message": text}
                                    for i, text in getattr(exc, "record_errors", ())]
        log.debug("produce to %s-%d refused: %s", topic, index, exc)
    except Exception as exc:  # a bug must cost one partition its answer, not the broker
        log.exception("produce to %s-%d failed", topic, index)
        out["error_code"] = error_code_of(exc)
        if ctx.metrics is not None and counted:
            ctx.metrics.produce_refused(topic, out["error_code"], len(batches))
    return out


# Refusals Kafka's ReplicaManager makes for a partition its metadata knows, after the request's checks (so
# counted in TotalProduceRequests) though kbroker makes them before looking at the records
_REFUSED_AT_THE_LOG = (errors.InvalidTopicError, errors.NotLeaderOrFollowerError, errors.KafkaStorageError)


def _check_single_v2_batch(batches, version: int) -> None:
    """Produce v3+: exactly one batch, magic 2; zstd needs v7+."""
    try:
        header = core_records.parse_header(batches)
    except core_records.RecordBatchError as exc:
        raise errors.for_code(exc.code)(str(exc)) from None
    if header.size < len(batches):
        raise errors.InvalidRecordError(
            f"produce v{version} carries exactly one record batch; "
            f"got {len(batches)} bytes for a batch of {header.size}")
    if header.compression == 4 and version < 7:
        raise errors.UnsupportedCompressionTypeError("zstd needs Produce v7 or later")
