"""Produce (0): the write path. The handler authorizes (the transactional id, each topic), applies the request
version's rules to each partition's records (v3+: one magic-2 batch; zstd from v7) and shapes the answer;
``ReplicaManager.append_records`` owns the rest, as Kafka's appendRecords does: acks, internal topics, the
batch checks of the log, the produce meters and the acks=all wait. Each partition's records are a
memoryview into the request frame; the log validates and assigns offsets in place, then appends those
very bytes.

Requests of one connection are applied in arrival order (this runs synchronously on dispatch).
The replica manager also decides what acks=0 gets (``unanswered``: nothing, or a closed connection when a
partition failed, as Kafka does) and when acks=all answers (once the high watermark has passed every written
partition's last offset: at once for an ISR of one, else from the purgatory). v0-2 carry legacy message sets
(magic 0/1), converted to one magic-2 batch first (``kbroker.log.legacy``) unless the topic's
message.format.version is below 0.11, whose log keeps magic 0/1 messages (``kbroker.log.legacy_append``).
"""
from __future__ import annotations

from kbroker import errors
from kbroker.handlers.authorize import Op, Res, allowed, topic_filter
from kbroker.handlers.context import BrokerContext
from kbroker.handlers.registry import Answer, ClientConnection, handles
from kbroker.log.batches import checked_header
from kbroker.protocol import message_types as msg
from kbroker.protocol.header import RequestHeader
from kbroker.protocol.outcome import Outcome
from kbroker.replicas.replica_manager import PartitionAnswer, ProduceEntry, unanswered


@handles(msg.PRODUCE)
def produce(ctx: BrokerContext, header: RequestHeader, request: msg.ProduceRequest,
            conn: ClientConnection) -> Answer[msg.ProduceResponse]:
    """Authorize, check each partition's records against the request version's rules, hand the rest to
    ``ReplicaManager.append_records`` and shape its answers."""
    version = header.api_version
    may_write = None
    if ctx.security.authorizer is not None:  # ACLs: the transactional id, then each topic
        if request.transactional_id is not None and not allowed(ctx, conn, Op.WRITE, Res.TRANSACTIONAL_ID,
                                                                request.transactional_id):
            return _refused_whole(request, version, errors.TransactionalIdAuthorizationFailedError)
        may_write = topic_filter(ctx, conn, Op.WRITE)
        assert may_write is not None  # with an authorizer
    # Each partition's answer slot: the handler's refusal, or None for the replica manager's answer (in order)
    slots: list[list[PartitionAnswer | None]] = []
    entries: list[ProduceEntry] = []
    for topic in request.topic_data:
        name = topic.name
        denied: type[errors.KafkaError] | None = None
        if may_write is not None and not may_write(name):
            denied = errors.TopicAuthorizationFailedError
        row: list[PartitionAnswer | None] = []
        for data in topic.partition_data:
            if denied is not None:
                row.append(_refused(data.index, version, denied))
                continue
            records = data.records
            # As Kafka's handleProduceRequest: a partition its metadata knows has its records checked against the
            # version's rules first (ProduceRequest.validateRecords); the replica manager answers the others
            if version >= 3 and records is not None and len(records) and ctx.topics.exists(name, data.index):
                try:
                    _check_single_v2_batch(records, version)
                except errors.KafkaError as exc:
                    row.append(_refused(data.index, version, type(exc), exc.message))
                    continue
            row.append(None)
            entries.append((name, data.index, records))
        slots.append(row)
    refused = len(entries) < sum(len(row) for row in slots)

    def respond(answers: list[PartitionAnswer], failed: bool) -> msg.ProduceResponse:
        written = iter(answers)
        return {"responses": [{"name": t.name, "partition_responses": [a if a is not None else next(written)
                                                                         for a in row]}
                              for t, row in zip(request.topic_data, slots)],
                "throttle_time_ms": 0}

    return ctx.replicas.append_records(entries, request.acks, request.timeout_ms, respond, refused=refused)


def _check_single_v2_batch(batches: memoryview, version: int) -> None:
    """Produce v3+ carries exactly one batch, of magic 2; zstd needs v7+ (Kafka's ProduceRequest.validateRecords,
    apache/kafka clients/src/main/java/org/apache/kafka/common/requests/ProduceRequest.java)."""
    header = checked_header(batches)
    if header.size < len(batches):
        raise errors.InvalidRecordError(
            f"produce v{version} carries exactly one record batch; "
            f"got {len(batches)} bytes for a batch of {header.size}")
    if header.compression == 4 and version < 7:
        raise errors.UnsupportedCompressionTypeError("zstd needs Produce v7 or later")


def _refused(index: int, version: int, error: type[errors.KafkaError], message: str | None = None) -> PartitionAnswer:
    out: PartitionAnswer = {"index": index, "error_code": error.code, "base_offset": -1, "log_append_time_ms": -1,
                           "log_start_offset": -1}
    if version >= 8:
        out["error_message"] = message
    return out


def _refused_whole(request: msg.ProduceRequest, version: int,
                   error: type[errors.KafkaError]) -> msg.ProduceResponse | Outcome:
    answer: msg.ProduceResponse = {"throttle_time_ms": 0, "responses": [
        {"name": t.name, "partition_responses": [_refused(d.index, version, error) for d in t.partition_data]}
        for t in request.topic_data]}
    return unanswered(request.acks, failed=True) or answer
