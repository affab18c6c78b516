"""Produce (0): the write path. The handler authorizes (the transactional id, each topic) and shapes the
answer; ``ReplicaManager.append_records`` owns the rest, as Kafka's appendRecords does: acks, internal
topics, the batch checks, the produce meters and the acks=all wait. Each partition's records are a
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
from kbroker.handlers.acls import Op, Res, allowed, cluster_allowed, topic_filter
from kbroker.handlers.context import BrokerContext
from kbroker.handlers.registry import Answer, ClientConnection, handles
from kbroker.protocol import message_types as msg
from kbroker.protocol.header import RequestHeader
from kbroker.protocol.outcome import Outcome
from kbroker.replicas.replica_manager import unanswered

PartitionAnswer = msg.ProduceResponse_PartitionResponse


@handles(msg.PRODUCE)
def produce(ctx: BrokerContext, header: RequestHeader, request: msg.ProduceRequest,
            conn: ClientConnection) -> Answer[msg.ProduceResponse]:
    """Authorize, hand the allowed topics to ``ReplicaManager.append_records`` and shape its answers."""
    version = header.api_version
    refused: dict[int, list[PartitionAnswer]] = {}  # position in the request: the partitions of a topic the ACLs refuse
    topics = request.topic_data
    if ctx.security.authorizer is not None:  # ACLs: the transactional id, then each topic
        if request.transactional_id is not None and not allowed(ctx, conn, Op.WRITE, Res.TRANSACTIONAL_ID,
                                                                request.transactional_id):
            return _refused_whole(request, version, errors.TransactionalIdAuthorizationFailedError)
        may_write = topic_filter(ctx, conn, Op.WRITE)
        assert may_write is not None  # with an authorizer
        for position, topic in enumerate(topics):
            if not may_write(topic.name) or not _may_exist(ctx, conn, topic.name):
                error = errors.TopicAuthorizationFailedError if not may_write(topic.name) \
                    else errors.UnknownTopicOrPartitionError  # no CREATE: not auto-created
                refused[position] = [_refused(data.index, version, error) for data in topic.partition_data]
        if refused:
            topics = [t for position, t in enumerate(topics) if position not in refused]

    def respond(answers: list[list[PartitionAnswer]], failed: bool) -> msg.ProduceResponse:
        if refused:
            written = iter(answers)
            answers = [refused[position] if position in refused else next(written)
                       for position in range(len(request.topic_data))]
        return {"responses": [{"name": t.name, "partition_responses": parts}
                              for t, parts in zip(request.topic_data, answers)],
                "throttle_time_ms": 0}

    return ctx.replicas.append_records(topics, request.acks, version, request.timeout_ms, respond, ctx.topics,
                                       ctx.metrics, refused=bool(refused))


def _may_exist(ctx: BrokerContext, conn: ClientConnection, topic: str) -> bool:
    """The topic exists, or it would be auto-created and the principal may create it."""
    if topic in ctx.topics.topics or not ctx.config.auto_create_topics_enable:
        return True
    return cluster_allowed(ctx, conn, Op.CREATE) or allowed(ctx, conn, Op.CREATE, Res.TOPIC, topic)


def _refused(index: int, version: int, error: type[errors.KafkaError]) -> PartitionAnswer:
    out: PartitionAnswer = {"index": index, "error_code": error.code, "base_offset": -1, "log_append_time_ms": -1,
                           "log_start_offset": -1}
    if version >= 8:
        out["error_message"] = None
    return out


def _refused_whole(request: msg.ProduceRequest, version: int,
                   error: type[errors.KafkaError]) -> msg.ProduceResponse | Outcome:
    answer: msg.ProduceResponse = {"throttle_time_ms": 0, "responses": [
        {"name": t.name, "partition_responses": [_refused(d.index, version, error) for d in t.partition_data]}
        for t in request.topic_data]}
    return unanswered(request.acks, failed=True) or answer
