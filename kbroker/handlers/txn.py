"""Transactions (KIP-98): AddPartitionsToTxn (24), AddOffsetsToTxn (25), EndTxn (26) and
TxnOffsetCommit (28) for the transaction and group coordinators; WriteTxnMarkers (27) for the
partition leaders, which append the COMMIT/ABORT control batch and answer once the ISR has it.
InitProducerId (22) is in ``groups`` with the producer ids."""
from __future__ import annotations

import logging

from kbroker import errors
from kbroker.log import TopicPartition
from kbroker.replication.delayed_produce import DelayedProduce, PendingAck

from . import handles

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"


def _txn(broker):
    bridge = getattr(broker, "transactions", None)
    return None if bridge is None else bridge.coordinator


@handles(24)
def add_partitions_to_txn(broker, header, request, conn):
    return _add_partitions(broker, request)


async def _add_partitions(broker, request) -> dict:
    wanted = {(t.name, p) for t in request.topics for p in t.partitions}
    unknown = {(t, p) for t, p in wanted if t not in broker.topics or p not in broker.topics[t].assignment}
    coordinator = _txn(broker)
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
def add_offsets_to_txn(broker, header, request, conn):
    return _add_offsets(broker, request)


async def _add_offsets(broker, request) -> dict:
    coordinator = _txn(broker)
    if coordinator is None:
        return {"throttle_time_ms": 0, "error_code": errors.CoordinatorNotAvailableError.code}
    code = await coordinator.add_offsets(request.transactional_id, request.producer_id, request.producer_epoch,
                                         request.group_id)
    return {"throttle_time_ms": 0, "error_code": code}


@handles(26)
def end_txn(broker, header, request, conn):
    return _end_txn(broker, request)


async def _end_txn(broker, request) -> dict:
    coordinator = _txn(broker)
    if coordinator is None:
        return {"throttle_time_ms": 0, "error_code": errors.CoordinatorNotAvailableError.code}
    code = await coordinator.end_txn(request.transactional_id, request.producer_id, request.producer_epoch,
                                     request.committed)
    return {"throttle_time_ms": 0, "error_code": code}


@handles(28)
def txn_offset_commit(broker, header, request, conn):
    return _txn_offset_commit(broker, request)


async def _txn_offset_commit(broker, request) -> dict:
    """The offsets are written as the producer's transactional batch and count once the COMMIT
    marker reaches the group's __consumer_offsets partition (an ABORT drops them)."""
    groups = broker.coordinator.coordinator
    offsets = {(t.name, p.partition_index): (p.committed_offset, p.committed_leader_epoch, p.committed_metadata)
               for t in request.topics for p in t.partitions}
    results = await groups.txn_commit_offsets(request.group_id, request.producer_id, request.producer_epoch,
                                              offsets, request.member_id or "", request.group_instance_id,
                                              request.generation_id)
    by_topic: dict[str, list[dict]] = {}
    for (topic, index), code in results.items():
        by_topic.setdefault(topic, []).append({"partition_index": index, "error_code": code})
    return {"throttle_time_ms": 0, "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}


@handles(27)
def write_txn_markers(broker, header, request, conn):
    return _write_txn_markers(broker, request)


async def _write_txn_markers(broker, request) -> dict:
    markers = [{"producer_id": m.producer_id, "producer_epoch": m.producer_epoch,
                "transaction_result": m.transaction_result, "coordinator_epoch": m.coordinator_epoch,
                "topics": [{"name": t.name, "partition_indexes": list(t.partition_indexes)} for t in m.topics]}
               for m in request.markers]
    results = await write_markers_here(broker, markers)
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


async def write_markers_here(broker, markers: list[dict]) -> dict[tuple[str, int], int]:
    """Append each marker to the partitions this broker leads; answer once the ISR has them."""
    results: dict[tuple[str, int], int] = {}
    waiting: list[PendingAck] = []
    offsets_done: list[tuple[int, bool, int]] = []
    for m in markers:
        for t in m["topics"]:
            for index in t["partition_indexes"]:
                tp = TopicPartition(t["name"], index)
                out = {"error_code": 0}
                try:
                    partition = broker.partition(tp)
                    if partition is None:
                        raise broker.not_hosted_error(tp.topic, index)
                    offset = partition.write_marker(m["producer_id"], m["producer_epoch"], m["transaction_result"],
                                                    m["coordinator_epoch"])
                    broker.on_append(partition)
                    if partition.high_watermark <= offset:
                        waiting.append(PendingAck(partition, offset + 1, out))
                    if tp.topic == OFFSETS_TOPIC:
                        offsets_done.append((m["producer_id"], m["transaction_result"], index))
                except errors.KafkaError as exc:
                    out["error_code"] = exc.code
                except Exception:
                    log.exception("marker for %s failed", tp)
                    out["error_code"] = errors.UnknownServerError.code
                results[(tp.topic, index)] = out  # filled in below
    if waiting:
        await broker.purgatory.watch(DelayedProduce(broker, {}, waiting, 0), [a.partition.tp for a in waiting],
                                     broker.config.request_timeout_ms)
    groups = broker.coordinator.coordinator if broker.coordinator is not None else None
    for producer_id, commit, index in offsets_done:
        if groups is not None:
            await groups.complete_txn_offsets(producer_id, commit, index)
    return {key: out["error_code"] for key, out in results.items()}
