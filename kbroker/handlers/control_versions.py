"""The controller's requests at every version Kafka 2.8 serves, brought to the one shape the handlers
read. LeaderAndIsr before v2 and UpdateMetadata before v5 list each partition with its topic name
(``ungrouped_partition_states``): they are regrouped by topic here. StopReplica's partitions come as
a list (v0), per topic (v1-2) or with their own leader epoch and delete flag (v3, KIP-570): flattened
here. LeaderAndIsr v5 answers per topic id (KIP-516) instead of per topic name."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, TypeVar

from kbroker.protocol import Struct, message_types as msg

_LAI_TOPIC = msg.LeaderAndIsrRequest.LeaderAndIsrTopicState
_UM_TOPIC = msg.UpdateMetadataRequest.UpdateMetadataTopicState
P = TypeVar("P", bound=Struct)
T = TypeVar("T")


def _regroup(ungrouped: Sequence[Any], topic_cls: Callable[..., T], partition_cls: type[P]) -> list[T]:
    """Each partition's state without its topic name (its fields are the ungrouped state's others), by topic."""
    by_topic: dict[str, list[P]] = {}
    names = [n for n in partition_cls._fields if n != "topic_name"]
    for p in ungrouped:
        copy = partition_cls(**{n: getattr(p, n) for n in names if hasattr(p, n)})
        by_topic.setdefault(p.topic_name, []).append(copy)
    return [topic_cls(topic_name=name, partition_states=states) for name, states in by_topic.items()]


def regroup_leader_and_isr(version: int, request: msg.LeaderAndIsrRequest) -> None:
    if version < 2:
        request.topic_states = _regroup(request.ungrouped_partition_states, _LAI_TOPIC,
                                        _LAI_TOPIC.LeaderAndIsrPartitionState)


def regroup_update_metadata(version: int, request: msg.UpdateMetadataRequest) -> None:
    if version < 5:
        request.topic_states = _regroup(request.ungrouped_partition_states, _UM_TOPIC,
                                        _UM_TOPIC.UpdateMetadataPartitionState)


def leader_and_isr_answer(version: int, request: msg.LeaderAndIsrRequest, error_code: int,
                          results: list[msg.LeaderAndIsrResponse_LeaderAndIsrPartitionError],
                          ) -> msg.LeaderAndIsrResponse:
    """``results`` are {topic_name, partition_index, error_code}; v5 groups them under each topic's id."""
    if version < 5:
        return {"error_code": error_code, "partition_errors": results}
    ids = {t.topic_name: t.topic_id for t in request.topic_states}
    by_topic: dict[str, list[msg.LeaderAndIsrResponse_LeaderAndIsrTopicPartitionError]] = {}
    for r in results:
        by_topic.setdefault(r["topic_name"], []).append(
            {"partition_index": r["partition_index"], "error_code": r["error_code"]})
    return {"error_code": error_code,
            "topics": [{"topic_id": ids[name], "partition_errors": parts} for name, parts in by_topic.items()]}


class StopReplicaPartition(NamedTuple):
    topic: str
    partition: int
    delete: bool
    leader_epoch: int  # -1: none given (before v3), -2: the topic is being deleted (Kafka's EpochDuringDelete)


def stop_replica_partitions(version: int, request: msg.StopReplicaRequest) -> list[StopReplicaPartition]:
    if version == 0:
        return [StopReplicaPartition(p.topic_name, p.partition_index, request.delete_partitions, -1)
                for p in request.ungrouped_partitions]
    if version <= 2:
        return [StopReplicaPartition(t.name, index, request.delete_partitions, -1)
                for t in request.topics for index in t.partition_indexes]
    return [StopReplicaPartition(t.topic_name, p.partition_index, p.delete_partition, p.leader_epoch)
            for t in request.topic_states for p in t.partition_states]
