"""DescribeProducers (61, KIP-664): the producers each partition replica here keeps state for, so that
an operator (kafka-transactions.sh find-hanging) can spot a transaction left open.

As Kafka 2.8's KafkaApis.handleDescribeProducersRequest and ReplicaManager.activeProducerState:
READ on the topic (else TOPIC_AUTHORIZATION_FAILED), a topic Metadata does not know is
UNKNOWN_TOPIC_OR_PARTITION, a partition not hosted here NOT_LEADER_OR_FOLLOWER when the cluster knows
it (the client refreshes its metadata and asks the leader), an offline log KAFKA_STORAGE_ERROR. Any
replica with a log answers, the leader or a follower, as Kafka's does."""
from __future__ import annotations

from kbroker import errors
from kbroker.handlers.authorize import Op, Res, allowed
from kbroker.handlers.context import BrokerContext
from kbroker.handlers.registry import Answer, ClientConnection, handles
from kbroker.log import TopicPartition
from kbroker.log.producer_state import ProducerStateManager
from kbroker.protocol import message_types as msg
from kbroker.protocol.header import RequestHeader


def _active_producers(state: ProducerStateManager) -> list[msg.DescribeProducersResponse_ProducerState]:
    out: list[msg.DescribeProducersResponse_ProducerState] = []
    for producer_id, entry in sorted(state.producers.items()):
        last = entry.batches[-1] if entry.batches else None
        out.append({"producer_id": producer_id, "producer_epoch": entry.epoch,
                    "last_sequence": last.last_sequence if last else -1,
                    "last_timestamp": last.timestamp if last else -1,
                    "coordinator_epoch": entry.coordinator_epoch,
                    "current_txn_start_offset": state.ongoing.get(producer_id, -1)})
    return out


def _partition_answer(ctx: BrokerContext, tp: TopicPartition) -> msg.DescribeProducersResponse_PartitionResponse:
    out: msg.DescribeProducersResponse_PartitionResponse = {
        "partition_index": tp.partition, "error_code": 0, "error_message": None, "active_producers": []}
    partition = ctx.replicas.partitions.get(tp)
    if partition is None:
        out["error_code"] = ctx.replicas.not_hosted_error(tp.topic, tp.partition).code
    elif partition.log.offline:
        out["error_code"] = errors.KafkaStorageError.code
    else:
        out["active_producers"] = _active_producers(partition.producer_state)
    return out


@handles(msg.DESCRIBE_PRODUCERS)
def describe_producers(ctx: BrokerContext, header: RequestHeader, request: msg.DescribeProducersRequest,
                       conn: ClientConnection) -> Answer[msg.DescribeProducersResponse]:
    topics: list[msg.DescribeProducersResponse_TopicResponse] = []
    for topic in request.topics:
        code = 0
        if not allowed(ctx, conn, Op.READ, Res.TOPIC, topic.name):
            code = errors.TopicAuthorizationFailedError.code
        elif ctx.topics.metadata_partitions(topic.name) is None:
            code = errors.UnknownTopicOrPartitionError.code
        partitions: list[msg.DescribeProducersResponse_PartitionResponse] = [
            {"partition_index": index, "error_code": code, "error_message": None, "active_producers": []}
            if code else _partition_answer(ctx, TopicPartition(topic.name, index))
            for index in topic.partition_indexes]
        topics.append({"name": topic.name, "partitions": partitions})
    return {"throttle_time_ms": 0, "topics": topics}
