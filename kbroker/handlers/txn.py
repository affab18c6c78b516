"""Producer ids and transactions (KIP-98): InitProducerId (22: an idempotent producer's id from this broker's
block, a transactional one's from the transaction coordinator), AddPartitionsToTxn (24), AddOffsetsToTxn (25),
EndTxn (26) and TxnOffsetCommit (28) for the transaction and group coordinators; WriteTxnMarkers (27) for the
partition leaders, which append the COMMIT/ABORT control batch and answer once the ISR has it."""
from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TypedDict

from kbroker import errors
from kbroker.coordinator.transaction.coordinator import TransactionCoordinator
from kbroker.handlers.authorize import Op, Res, allowed, cluster_allowed, topic_filter
from kbroker.handlers.context import BrokerContext
from kbroker.handlers.registry import Answer, ClientConnection, handles
from kbroker.log import TopicPartition
from kbroker.protocol import message_types as msg
from kbroker.protocol.header import RequestHeader
from kbroker.replicas.replica_manager import TxnMarker

log = logging.getLogger(__name__)

# KIP-588: PRODUCER_FENCED exists for AddPartitionsToTxn, AddOffsetsToTxn and EndTxn from v2 and
# InitProducerId from v4; Kafka 2.8's KafkaApis answers older versions INVALID_PRODUCER_EPOCH,
# which older clients already treat as "fenced" (apache/kafka core/src/main/scala/kafka/server/KafkaApis.scala).
_PRODUCER_FENCED_SINCE = {22: 4, 24: 2, 25: 2, 26: 2}


def for_version(api_key: int, version: int, code: int) -> int:
    """``code`` as the request's version can say it: PRODUCER_FENCED becomes INVALID_PRODUCER_EPOCH before KIP-588."""
    if code == errors.ProducerFencedError.code and version < _PRODUCER_FENCED_SINCE.get(api_key, 0):
        return errors.InvalidProducerEpochError.code
    return code


class CodeOnly(TypedDict):
    """AddOffsetsToTxn's and EndTxn's answer: the same two fields."""
    throttle_time_ms: int
    error_code: int


@handles(msg.ADD_PARTITIONS_TO_TXN)
async def add_partitions_to_txn(ctx: BrokerContext, header: RequestHeader, request: msg.AddPartitionsToTxnRequest,
                                conn: ClientConnection) -> msg.AddPartitionsToTxnResponse:
    version = header.api_version
    wanted = {(t.name, p) for t in request.topics for p in t.partitions}
    unknown = {(t, p) for t, p in wanted if not ctx.topics.exists(t, p)}
    coordinator = ctx.transactions.coordinator
    refused: dict[tuple[str, int], int] = {}
    if ctx.security.authorizer is not None:  # ACLs: WRITE on the transactional id, then on each topic
        if not allowed(ctx, conn, Op.WRITE, Res.TRANSACTIONAL_ID, request.transactional_id):
            refused = {tp: errors.TransactionalIdAuthorizationFailedError.code for tp in wanted}
        else:
            may_write = topic_filter(ctx, conn, Op.WRITE)
            assert may_write is not None
            internal = {name for name, t in ctx.topics.topics.items() if t.internal}
            refused = {(t, p): errors.TopicAuthorizationFailedError.code for t, p in wanted
                       if t in internal or not may_write(t)}
        unknown -= set(refused)
    if refused:
        code = errors.OperationNotAttemptedError.code
    elif coordinator is None:
        code = errors.CoordinatorNotAvailableError.code
    elif unknown:
        code = errors.OperationNotAttemptedError.code  # the others; the unknown ones say why
    else:
        code = for_version(24, version, await coordinator.add_partitions(
            request.transactional_id, request.producer_id, request.producer_epoch, wanted))
    by_topic: dict[str, list[msg.AddPartitionsToTxnResponse_PartitionResult]] = {}
    for topic, index in sorted(wanted):
        error = errors.UnknownTopicOrPartitionError.code if (topic, index) in unknown else code
        error = refused.get((topic, index), error)
        by_topic.setdefault(topic, []).append({"partition_index": index, "error_code": error})
    return {"throttle_time_ms": 0, "results": [{"name": t, "results": r} for t, r in by_topic.items()]}


@handles(msg.ADD_OFFSETS_TO_TXN)
def add_offsets_to_txn(ctx: BrokerContext, header: RequestHeader, request: msg.AddOffsetsToTxnRequest,
                       conn: ClientConnection) -> Answer[msg.AddOffsetsToTxnResponse]:
    if not allowed(ctx, conn, Op.WRITE, Res.TRANSACTIONAL_ID, request.transactional_id):
        return {"throttle_time_ms": 0, "error_code": errors.TransactionalIdAuthorizationFailedError.code}
    if not allowed(ctx, conn, Op.READ, Res.GROUP, request.group_id):
        return {"throttle_time_ms": 0, "error_code": errors.GroupAuthorizationFailedError.code}
    return _with_coordinator(ctx, header, lambda c: c.add_offsets(request.transactional_id, request.producer_id,
                                                                  request.producer_epoch, request.group_id))


@handles(msg.END_TXN)
def end_txn(ctx: BrokerContext, header: RequestHeader, request: msg.EndTxnRequest,
            conn: ClientConnection) -> Answer[msg.EndTxnResponse]:
    if not allowed(ctx, conn, Op.WRITE, Res.TRANSACTIONAL_ID, request.transactional_id):
        return {"throttle_time_ms": 0, "error_code": errors.TransactionalIdAuthorizationFailedError.code}
    return _with_coordinator(ctx, header, lambda c: c.end_txn(request.transactional_id, request.producer_id,
                                                              request.producer_epoch, request.committed))


async def _with_coordinator(ctx: BrokerContext, header: RequestHeader,
                            call: Callable[[TransactionCoordinator], Awaitable[int]]) -> CodeOnly:
    """A request answered by the transaction coordinator with one error code."""
    coordinator = ctx.transactions.coordinator
    code = errors.CoordinatorNotAvailableError.code if coordinator is None else await call(coordinator)
    return {"throttle_time_ms": 0, "error_code": for_version(header.api_key, header.api_version, code)}


@handles(msg.TXN_OFFSET_COMMIT)
def txn_offset_commit(ctx: BrokerContext, header: RequestHeader, request: msg.TxnOffsetCommitRequest,
                      conn: ClientConnection) -> Answer[msg.TxnOffsetCommitResponse]:
    if ctx.security.authorizer is not None:
        code = 0
        if not allowed(ctx, conn, Op.WRITE, Res.TRANSACTIONAL_ID, request.transactional_id):
            code = errors.TransactionalIdAuthorizationFailedError.code
        elif not allowed(ctx, conn, Op.READ, Res.GROUP, request.group_id):
            code = errors.GroupAuthorizationFailedError.code
        if code:
            return {"throttle_time_ms": 0, "topics": [
                {"name": t.name, "partitions": [{"partition_index": p.partition_index, "error_code": code}
                                                for p in t.partitions]} for t in request.topics]}
        may_read = topic_filter(ctx, conn, Op.READ)
        assert may_read is not None
        return _txn_offset_commit(ctx, request, {t.name for t in request.topics if not may_read(t.name)})
    return _txn_offset_commit(ctx, request)


async def _txn_offset_commit(ctx: BrokerContext, request: msg.TxnOffsetCommitRequest,
                             refused: set[str] | None = None) -> msg.TxnOffsetCommitResponse:
    """The offsets are written as the producer's transactional batch and count once the COMMIT
    marker reaches the group's __consumer_offsets partition (an ABORT drops them)."""
    groups = ctx.groups.coordinator
    assert groups is not None
    offsets = {TopicPartition(t.name, p.partition_index):
               (p.committed_offset, p.committed_leader_epoch, p.committed_metadata)
               for t in request.topics for p in t.partitions if not refused or t.name not in refused}
    results = await groups.txn_commit_offsets(request.group_id, request.producer_id, request.producer_epoch,
                                              offsets, request.member_id or "", request.group_instance_id,
                                              request.generation_id) if offsets else {}
    for t in request.topics:  # TOPIC_AUTHORIZATION_FAILED for the topics the ACLs refuse READ
        if refused and t.name in refused:
            for p in t.partitions:
                results[TopicPartition(t.name, p.partition_index)] = errors.TopicAuthorizationFailedError.code
    by_topic: dict[str, list[msg.TxnOffsetCommitResponse_Partition]] = {}
    for (topic, index), code in results.items():
        by_topic.setdefault(topic, []).append({"partition_index": index, "error_code": code})
    return {"throttle_time_ms": 0, "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}


@handles(msg.WRITE_TXN_MARKERS)
def write_txn_markers(ctx: BrokerContext, header: RequestHeader, request: msg.WriteTxnMarkersRequest,
                      conn: ClientConnection) -> Answer[msg.WriteTxnMarkersResponse]:
    if not cluster_allowed(ctx, conn, Op.CLUSTER_ACTION):
        denied = errors.ClusterAuthorizationFailedError.code
        return {"markers": [{"producer_id": m.producer_id, "topics": [
            {"name": t.name, "partitions": [{"partition_index": i, "error_code": denied} for i in t.partition_indexes]}
            for t in m.topics]} for m in request.markers]}
    return _write_txn_markers(ctx, request)


async def _write_txn_markers(ctx: BrokerContext, request: msg.WriteTxnMarkersRequest) -> msg.WriteTxnMarkersResponse:
    markers: list[TxnMarker] = [{"producer_id": m.producer_id, "producer_epoch": m.producer_epoch,
                "transaction_result": m.transaction_result, "coordinator_epoch": m.coordinator_epoch,
                "topics": [{"name": t.name, "partition_indexes": list(t.partition_indexes)} for t in m.topics]}
               for m in request.markers]
    results = await ctx.replicas.write_markers(markers)
    out: list[msg.WriteTxnMarkersResponse_MarkerResult] = []
    for m in markers:
        by_topic: dict[str, list[msg.WriteTxnMarkersResponse_PartitionResult]] = {}
        for t in m["topics"]:
            for index in t["partition_indexes"]:
                by_topic.setdefault(t["name"], []).append(
                    {"partition_index": index, "error_code": results.get((t["name"], index), 0)})
        out.append({"producer_id": m["producer_id"],
                    "topics": [{"name": n, "partitions": ps} for n, ps in by_topic.items()]})
    return {"markers": out}


@handles(msg.INIT_PRODUCER_ID)
def init_producer_id(ctx: BrokerContext, header: RequestHeader, request: msg.InitProducerIdRequest,
                     conn: ClientConnection) -> Answer[msg.InitProducerIdResponse]:
    authorizer = ctx.security.authorizer
    if authorizer is not None:
        if request.transactional_id is not None:
            if not allowed(ctx, conn, Op.WRITE, Res.TRANSACTIONAL_ID, request.transactional_id):
                code = errors.TransactionalIdAuthorizationFailedError.code
                return {"throttle_time_ms": 0, "error_code": code, "producer_id": -1, "producer_epoch": -1}
        elif not (cluster_allowed(ctx, conn, Op.IDEMPOTENT_WRITE)
                  or authorizer.authorize_by_resource_type(conn.session, Op.WRITE, Res.TOPIC)):
            code = errors.ClusterAuthorizationFailedError.code
            return {"throttle_time_ms": 0, "error_code": code, "producer_id": -1, "producer_epoch": -1}
    if request.transactional_id is not None:
        return _init_transactional(ctx, header.api_version, request, request.transactional_id)
    if header.api_version >= 3 and request.producer_id >= 0:
        # KIP-360: an idempotent producer bumping its epoch keeps its id
        epoch = request.producer_epoch + 1
        if epoch > 32767:
            return {"throttle_time_ms": 0, "error_code": 0, "producer_id": ctx.next_producer_id(),
                    "producer_epoch": 0}
        return {"throttle_time_ms": 0, "error_code": 0, "producer_id": request.producer_id, "producer_epoch": epoch}
    return {"throttle_time_ms": 0, "error_code": 0, "producer_id": ctx.next_producer_id(), "producer_epoch": 0}


async def _init_transactional(ctx: BrokerContext, version: int, request: msg.InitProducerIdRequest,
                              transactional_id: str) -> msg.InitProducerIdResponse:
    """A transactional producer: the transaction coordinator gives its id and (bumped) epoch; one that
    sends its current id and epoch (v3+, KIP-360) is fenced if they are no longer current."""
    coordinator = ctx.transactions.coordinator
    if coordinator is None:
        code, pid, epoch = errors.CoordinatorNotAvailableError.code, -1, -1
    else:
        expected = (request.producer_id, request.producer_epoch) if version >= 3 and request.producer_id >= 0 else None
        code, pid, epoch = await coordinator.init_producer_id(transactional_id,
                                                              request.transaction_timeout_ms, expected)
    return {"throttle_time_ms": 0, "error_code": for_version(22, version, code), "producer_id": pid,
            "producer_epoch": epoch}
