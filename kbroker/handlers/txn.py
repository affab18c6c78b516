"""Transactions (KIP-98): AddPartitionsToTxn (24), AddOffsetsToTxn (25), EndTxn (26) and
TxnOffsetCommit (28) for the transaction and group coordinators; WriteTxnMarkers (27) for the
partition leaders, which append the COMMIT/ABORT control batch and answer once the ISR has it.
InitProducerId (22) is in ``groups`` with the producer ids."""
from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from kbroker import errors
from kbroker.log import TopicPartition
from kbroker.txn.coordinator import TransactionCoordinator

from .context import BrokerContext
from .registry import handles

log = logging.getLogger(__name__)


@handles(24)
def add_partitions_to_txn(ctx: BrokerContext, header, request, conn):
    return _add_partitions(ctx, request)


async def _add_partitions(ctx: BrokerContext, request) -> dict:
    wanted = {(t.name, p) for t in request.topics for p in t.partitions}
    unknown = {(t, p) for t, p in wanted if not ctx.topics.exists(t, p)}
    coordinator = ctx.transactions.coordinator
    if coordinator is None:
        code = errors.CoordinatorNotAvailableError.code
    elif unknown:
        code = errors.OperationNotAttemptedError.code  # the others; the unknown ones say why
    else:
        code = await coordinator.add_partitions(request.transactional_id, request.producer_id,
                                                request.producer_epoch, wanted)
    by_topic: dict[str, list[dict]] = {}
    for topic, index in sorted(wanted):
        error = errors.UnknownTopicOrPartitionError.code if (topic, index) in unknown else code
        by_topic.setdefault(topic, []).append({"partition_index": index, "error_code": error})
    return {"throttle_time_ms": 0, "results": [{"name": t, "results": r} for t, r in by_topic.items()]}


@handles(25)
def add_offsets_to_txn(ctx: BrokerContext, header, request, conn):
    return _with_coordinator(ctx, lambda c: c.add_offsets(request.transactional_id, request.producer_id,
                                                          request.producer_epoch, request.group_id))


@handles(26)
def end_txn(ctx: BrokerContext, header, request, conn):
    return _with_coordinator(ctx, lambda c: c.end_txn(request.transactional_id, request.producer_id,
                                                      request.producer_epoch, request.committed))


async def _with_coordinator(ctx: BrokerContext, call: Callable[[TransactionCoordinator], Awaitable[int]]) -> dict:
    """A request answered by the transaction coordinator with one error code."""
    coordinator = ctx.transactions.coordinator
    code = errors.CoordinatorNotAvailableError.code if coordinator is None else await call(coordinator)
    return {"throttle_time_ms": 0, "error_code": code}


@handles(28)
def txn_offset_commit(ctx: BrokerContext, header, request, conn):
    return _txn_offset_commit(ctx, request)


async def _txn_offset_commit(ctx: BrokerContext, request) -> dict:
    """The offsets are written as the producer's transactional batch and count once the COMMIT
    marker reaches the group's __consumer_offsets partition (an ABORT drops them)."""
    groups = ctx.groups.coordinator
    assert groups is not None
    offsets = {TopicPartition(t.name, p.partition_index):
               (p.committed_offset, p.committed_leader_epoch, p.committed_metadata)
               for t in request.topics for p in t.partitions}
    results = await groups.txn_commit_offsets(request.group_id, request.producer_id, request.producer_epoch,
                                              offsets, request.member_id or "", request.group_instance_id,
                                              request.generation_id)
    by_topic: dict[str, list[dict]] = {}
    for (topic, index), code in results.items():
        by_topic.setdefault(topic, []).append({"partition_index": index, "error_code": code})
    return {"throttle_time_ms": 0, "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}


@handles(27)
def write_txn_markers(ctx: BrokerContext, header, request, conn):
    return _write_txn_markers(ctx, request)


async def _write_txn_markers(ctx: BrokerContext, request) -> dict:
    markers = [{"producer_id": m.producer_id, "producer_epoch": m.producer_epoch,
                "transaction_result": m.transaction_result, "coordinator_epoch": m.coordinator_epoch,
                "topics": [{"name": t.name, "partition_indexes": list(t.partition_indexes)} for t in m.topics]}
               for m in request.markers]
    results = await ctx.replicas.write_markers(markers)
    out = []
    for m in markers:
        by_topic: dict[str, list[dict]] = {}
        for t in m["topics"]:
            for index in t["partition_indexes"]:
                by_topic.setdefault(t["name"], []).append(
                    {"partition_index": index, "error_code": results.get((t["name"], index), 0)})
        out.append({"producer_id": m["producer_id"],
                    "topics": [{"name": n, "partitions": ps} for n, ps in by_topic.items()]})
    return {"markers": out}
