"""Topic and record administration: CreateTopics (19), DeleteTopics (20), DeleteRecords (21),
CreatePartitions (37). Every topic gets its own error code; one bad entry never fails the others.
Configs are in ``describe_configs`` (32) and ``alter_configs`` (33, 44), which share the helpers here."""
from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import NotRequired, TypedDict, TypeVar

from kbroker import errors
from kbroker.config.errors import ConfigError
from kbroker.handlers.authorize import allowed, cluster_allowed
from kbroker.handlers.config_entries import topic_entries
from kbroker.handlers.context import BrokerContext
from kbroker.handlers.registry import Answer, ClientConnection, handles
from kbroker.log import TopicPartition
from kbroker.protocol import message_types as msg
from kbroker.protocol.header import RequestHeader
from kbroker.protocol.messages.acls import CLUSTER_NAME, AclOperation, ResourceType
from kbroker.topics.table import TopicInfo
from kbroker.topics.visibility import Visible

log = logging.getLogger(__name__)

TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4
BROKER_LOGGER_RESOURCE = 8
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


class Result(TypedDict):
    """What every per-item answer of these APIs has (CreateTopics' TopicResult, AlterConfigs' ResourceResponse...)."""
    error_code: int
    error_message: NotRequired[str | None]


Item = TypeVar("Item")
Outcome = TypeVar("Outcome")
R = TypeVar("R", bound=Result)


def _error(exc: Exception) -> tuple[int, str]:
    if isinstance(exc, errors.KafkaError):
        return exc.code, exc.message
    if isinstance(exc, (ConfigError, ValueError)):
        return errors.InvalidConfigError.code, str(exc)
    log.exception("admin request failed")
    return errors.UnknownServerError.code, str(exc)


async def _each(items: Iterable[Item], first: Callable[[Item], R],
                act: Callable[[Item, R], Awaitable[None]]) -> list[R]:
    """One result per item: ``first(item)`` is its answer so far, ``act(item, answer)`` does the work; an
    exception becomes that item's error code and message, and the others carry on."""
    results: list[R] = []
    for item in items:
        out = first(item)
        try:
            await act(item, out)
        except Exception as exc:
            out["error_code"], out["error_message"] = _error(exc)
        results.append(out)
    return results


async def _all_at_once(checked: Mapping[int, Item], act: Callable[[list[Item]], Awaitable[list[Outcome]]]
                       ) -> list[tuple[int, Outcome | Exception]]:
    """(position, outcome) of each item that passed its checks, in request order, from one call of ``act`` on all
    of them; a call failing as a whole (the store's connection lost) is every item's outcome."""
    positions = sorted(checked)
    try:
        outcomes: list[Outcome | Exception] = list(await act([checked[i] for i in positions]))
    except Exception as exc:
        outcomes = [exc] * len(positions)
    return list(zip(positions, outcomes))


def _require(ctx: BrokerContext, conn: ClientConnection, operation: AclOperation, resource_type: ResourceType,
             name: str, message: str | None = None) -> None:
    """Raise the ACL refusal Kafka answers for ``operation`` on a topic (29) or the cluster (31)."""
    if not allowed(ctx, conn, operation, resource_type, name):
        if resource_type == ResourceType.TOPIC:
            raise errors.TopicAuthorizationFailedError(message or "Topic authorization failed.")
        raise errors.ClusterAuthorizationFailedError(message or "Cluster authorization failed.")


def _require_config_resource(ctx: BrokerContext, conn: ClientConnection, operation: AclOperation, resource_type: int,
                             name: str) -> None:
    if resource_type == TOPIC_RESOURCE:
        _require(ctx, conn, operation, ResourceType.TOPIC, name)
    elif resource_type in (BROKER_RESOURCE, BROKER_LOGGER_RESOURCE):
        _require(ctx, conn, operation, ResourceType.CLUSTER, CLUSTER_NAME)


def _named(name: str) -> msg.CreateTopicsResponse_TopicResult:
    return {"name": name, "error_code": 0, "error_message": None}



def _partitions_named(name: str) -> msg.CreatePartitionsResponse_TopicResult:
    return {"name": name, "error_code": 0, "error_message": None}


def _deleted(name: str | None) -> msg.DeleteTopicsResponse_TopicResult:
    return {"name": name, "error_code": 0}


def _name_of(answer: Mapping[str, object]) -> object:
    """The topic an answer is about (each API's answer names it ``name``)."""
    return answer.get("name")


@handles(msg.CREATE_TOPICS)
async def create_topics(ctx: BrokerContext, header: RequestHeader, request: msg.CreateTopicsRequest,
                        conn: ClientConnection) -> msg.CreateTopicsResponse:
    """Each topic checked (ACLs, name, counts, configs), then all the valid ones written at once
    (``TopicAdmin.create_many``: one job in ZooKeeper mode however many topics the request names)."""
    may_create_any = ctx.security.authorizer is None or cluster_allowed(ctx, conn, AclOperation.CREATE)
    checked: dict[int, TopicInfo] = {}  # the request's position of each topic that passed the checks

    async def check(topic: tuple[int, msg.CreateTopicsRequest.Topic], out: msg.CreateTopicsResponse_TopicResult
                    ) -> None:
        position, t = topic
        if not may_create_any:
            _require(ctx, conn, AclOperation.CREATE, ResourceType.TOPIC, t.name, "Authorization failed.")
        assignment = {a.partition_index: list(a.broker_ids) for a in t.assignments} or None
        configs = {c.name: c.value for c in t.configs if c.value is not None}
        checked[position] = ctx.topics.validated(t.name, t.num_partitions, t.replication_factor, assignment,
                                                 configs)

    results = await _each(list(enumerate(request.topics)), lambda t: _named(t[1].name), check)
    wanted: Visible = {}
    if checked and not request.validate_only:
        for position, outcome in await _all_at_once(checked, ctx.topics.create_many):
            if isinstance(outcome, Exception):
                del checked[position]
                results[position]["error_code"], results[position]["error_message"] = _error(outcome)
            else:
                checked[position] = outcome
                wanted[outcome.name] = len(outcome.assignment)
    for position, info in checked.items():
        out, configs = results[position], info.configs
        out["topic_id"] = info.topic_id
        out["num_partitions"] = len(info.assignment)
        out["replication_factor"] = len(next(iter(info.assignment.values())))
        if header.api_version >= 5 and not allowed(ctx, conn, AclOperation.DESCRIBE_CONFIGS, ResourceType.TOPIC,
                                                   info.name):
            out["topic_config_error_code"] = errors.TopicAuthorizationFailedError.code
        elif header.api_version >= 5:  # the new topic's effective configs, as Kafka returns them
            out["configs"] = [{"name": e.name, "value": e.value, "read_only": e.read_only,
                               "is_sensitive": e.sensitive, "config_source": e.source}
                              for e in topic_entries(ctx.dynamic_config, configs)]
    return {"throttle_time_ms": 0, "topics": await _when_visible(ctx, results, wanted, request.timeout_ms)}


async def _when_visible(ctx: BrokerContext, results: list[R], wanted: Visible, timeout_ms: int) -> list[R]:
    """Kafka's delayed admin answers: held until Metadata shows each change on every live broker; a change
    still not shown at ``timeout_ms`` is answered REQUEST_TIMED_OUT (it is made all the same)."""
    late = await ctx.topics.await_visible(wanted, timeout_ms)
    for out in results:
        name = _name_of(out)
        if name in late and out["error_code"] == 0:
            out["error_code"] = errors.RequestTimedOutError.code
            out["error_message"] = f"the change to {name} was not visible within {timeout_ms} ms"
    return results


@handles(msg.DELETE_TOPICS)
async def delete_topics(ctx: BrokerContext, header: RequestHeader, request: msg.DeleteTopicsRequest,
                        conn: ClientConnection) -> msg.DeleteTopicsResponse:
    """Each topic checked (name, ACL), then all the allowed ones deleted at once (``TopicAdmin.delete_many``)."""
    names = [t.name for t in request.topics] if header.api_version >= 6 else list(request.topic_names)
    allowed_at: dict[int, str] = {}

    async def check(item: tuple[int, str | None], out: msg.DeleteTopicsResponse_TopicResult) -> None:
        position, name = item
        if name is None:
            raise errors.UnknownTopicIdError("topic ids are not used here: name the topic")
        _require(ctx, conn, AclOperation.DELETE, ResourceType.TOPIC, name)
        allowed_at[position] = name

    results = await _each(list(enumerate(names)), lambda t: _deleted(t[1]), check)
    wanted: Visible = {}
    if allowed_at:
        for position, outcome in await _all_at_once(allowed_at, ctx.topics.delete_many):
            if outcome is None:
                wanted[allowed_at[position]] = None
            else:
                results[position]["error_code"], results[position]["error_message"] = _error(outcome)
    return {"throttle_time_ms": 0, "responses": await _when_visible(ctx, results, wanted, request.timeout_ms)}


@handles(msg.CREATE_PARTITIONS)
async def create_partitions(ctx: BrokerContext, header: RequestHeader, request: msg.CreatePartitionsRequest,
                            conn: ClientConnection) -> msg.CreatePartitionsResponse:
    async def create(topic: msg.CreatePartitionsRequest.Topic, out: msg.CreatePartitionsResponse_TopicResult) -> None:
        _require(ctx, conn, AclOperation.ALTER, ResourceType.TOPIC, topic.name)
        # null: the broker places the new partitions; a list (even empty) is the client's, checked as given
        assignments = None if topic.assignments is None else [list(a.broker_ids) for a in topic.assignments]
        await ctx.topics.create_partitions(topic.name, topic.count, assignments, validate_only=request.validate_only)
        if not request.validate_only:
            wanted[topic.name] = topic.count

    wanted: Visible = {}
    results = await _each(request.topics, lambda t: _partitions_named(t.name), create)
    return {"throttle_time_ms": 0, "results": await _when_visible(ctx, results, wanted, request.timeout_ms)}


@handles(msg.DELETE_RECORDS)
def delete_records(ctx: BrokerContext, header: RequestHeader, request: msg.DeleteRecordsRequest,
                   conn: ClientConnection) -> Answer[msg.DeleteRecordsResponse]:
    topics: list[msg.DeleteRecordsResponse_TopicResult] = []
    for topic in request.topics:
        parts: list[msg.DeleteRecordsResponse_PartitionResult] = []
        may_delete = allowed(ctx, conn, AclOperation.DELETE, ResourceType.TOPIC, topic.name)
        for p in topic.partitions:
            out: msg.DeleteRecordsResponse_PartitionResult = {
                "partition_index": p.partition_index, "low_watermark": -1, "error_code": 0}
            try:
                if not may_delete:
                    raise errors.TopicAuthorizationFailedError()
                # a partition led elsewhere is NOT_LEADER_OR_FOLLOWER, so the client refreshes its metadata and
                # retries at the leader (Kafka's ReplicaManager.getPartitionOrException)
                partition = ctx.replicas.leader(TopicPartition(topic.name, p.partition_index))
                # -1 is the high watermark; any other negative offset (librdkafka's -1001 for "not set") is
                # OFFSET_OUT_OF_RANGE, as one above the high watermark is (delete_records_before); one below the
                # log start offset deletes nothing (apache/kafka core/src/main/scala/kafka/cluster/Partition.scala
                # deleteRecordsOnLeader, Log.maybeIncrementLogStartOffset)
                offset = partition.high_watermark if p.offset == -1 else p.offset
                if offset < 0:
                    raise errors.OffsetOutOfRangeError(
                        f"{topic.name}-{p.partition_index}: the offset {offset} is not valid")
                out["low_watermark"] = partition.log.delete_records_before(offset)
            except Exception as exc:
                out["error_code"] = _error(exc)[0]
            parts.append(out)
        topics.append({"name": topic.name, "partitions": parts})
    return {"throttle_time_ms": 0, "topics": topics}
