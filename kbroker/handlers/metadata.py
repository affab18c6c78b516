"""Metadata (3) and DescribeCluster (60): brokers, controller, topics, leaders. Topics and partitions are
answered as Kafka's MetadataCache does at each version (``topic_metadata``)."""
from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable

from kbroker import errors
from kbroker.handlers.authorize import Op, Res, allowed, authorized_operations, cluster_allowed
from kbroker.handlers.context import BrokerContext
from kbroker.handlers.registry import Answer, ClientConnection, handles
from kbroker.metadata.zk_view import LiveBroker
from kbroker.protocol import message_types as msg
from kbroker.protocol.header import RequestHeader
from kbroker.protocol.messages.acls import CLUSTER_NAME
from kbroker.topics.internal import INTERNAL_TOPICS

log = logging.getLogger(__name__)

ZERO_UUID = uuid.UUID(int=0)


def listener_of(conn: ClientConnection) -> str:
    """The listener a request came in on: brokers are answered with their endpoint on it."""
    session = getattr(conn, "session", None)  # tests call handlers with connections that have none
    return session.listener if session is not None else "PLAINTEXT"


def brokers_on(ctx: BrokerContext, conn: ClientConnection) -> list[LiveBroker]:
    """Live brokers as a client of this connection's listener reaches them; brokers without that
    listener are left out, as Kafka does."""
    listener = listener_of(conn)
    return [e for e in (b.on(listener) for b in ctx.topics.live_brokers()) if e is not None]


def _brokers(ctx: BrokerContext, conn: ClientConnection) -> list[msg.MetadataResponse_Broker]:
    return [{"node_id": b.id, "host": b.host, "port": b.port, "rack": b.rack} for b in brokers_on(ctx, conn)]


def topic_metadata(ctx: BrokerContext, name: str, version: int, alive: set[int],
                   live: set[int]) -> msg.MetadataResponse_Topic | None:
    """The topic as Kafka's MetadataCache answers it (None: Metadata does not know it yet). ``alive`` are the
    brokers reachable on this connection's listener, ``live`` every registered one. Without a reachable
    leader a partition has leader -1 and LEADER_NOT_AVAILABLE (LISTENER_NOT_FOUND from v6 when the leader
    lives but lacks the listener); v0 answers only reachable replicas, REPLICA_NOT_AVAILABLE if some are not."""
    views = ctx.topics.metadata_partitions(name)
    if views is None:
        return None
    partitions: list[msg.MetadataResponse_Partition] = []
    for view in views:
        replicas, isr = view.replicas, view.isr
        if version == 0:
            replicas, isr = [r for r in replicas if r in alive], [r for r in isr if r in alive]
        if view.leader not in alive:
            leader = -1
            error = errors.ListenerNotFoundError if view.leader in live and version >= 6 else \
                errors.LeaderNotAvailableError
            code = error.code
        else:
            leader = view.leader
            code = errors.ReplicaNotAvailableError.code if (len(replicas), len(isr)) != (
                len(view.replicas), len(view.isr)) else 0
        partitions.append({"error_code": code, "partition_index": view.index, "leader_id": leader,
                           "leader_epoch": view.leader_epoch, "replica_nodes": replicas, "isr_nodes": isr,
                           "offline_replicas": list(view.offline_replicas)})
    info = ctx.topics.topics.get(name)
    return {"error_code": 0, "name": name, "topic_id": info.topic_id if info is not None else ZERO_UUID,
            "is_internal": name in INTERNAL_TOPICS, "partitions": partitions}


@handles(msg.METADATA)
def metadata(ctx: BrokerContext, header: RequestHeader, request: msg.MetadataRequest,
             conn: ClientConnection) -> Answer[msg.MetadataResponse]:
    if not ctx.topics.announced():
        return _once_announced(ctx, header, request, conn)
    return _metadata(ctx, header, request, conn)


async def _once_announced(ctx: BrokerContext, header: RequestHeader, request: msg.MetadataRequest,
                          conn: ClientConnection) -> msg.MetadataResponse:
    await ctx.topics.until_announced()
    answer = _metadata(ctx, header, request, conn)
    return await answer if not isinstance(answer, dict) else answer


async def _after_creating(ctx: BrokerContext, header: RequestHeader, request: msg.MetadataRequest,
                          conn: ClientConnection, names: list[str]) -> msg.MetadataResponse:
    """Create the topics (ZooKeeper writes awaited off the event loop, so other connections are served
    meanwhile), then answer: Kafka answers a topic it creates LEADER_NOT_AVAILABLE without partitions (its
    leaders come all at once, later), an illegal name INVALID_TOPIC_EXCEPTION."""
    outcomes = await asyncio.gather(*(ctx.topics.auto_create(n) for n in names), return_exceptions=True)
    created: dict[str, int] = {}
    for name, outcome in zip(names, outcomes):
        if isinstance(outcome, errors.KafkaError):
            created[name] = outcome.code
        elif isinstance(outcome, BaseException):
            log.error("auto-creation of %s failed", name, exc_info=outcome)
            created[name] = errors.UnknownServerError.code
        else:
            created[name] = errors.LeaderNotAvailableError.code
    answer = _metadata(ctx, header, request, conn, created)
    assert isinstance(answer, dict)  # every name to create has its answer now
    return answer


def _metadata(ctx: BrokerContext, header: RequestHeader, request: msg.MetadataRequest, conn: ClientConnection,
              created: dict[str, int] | None = None) -> msg.MetadataResponse | Awaitable[msg.MetadataResponse]:
    """The answer, or (topics to auto-create) an awaitable of it. ``created``: the topics this request has
    auto-created, with their answer's error code."""
    version = header.api_version
    # before v4 a request always allows auto-creation
    auto = (request.allow_auto_topic_creation or version < 4) and ctx.config.auto_create_topics_enable
    every = request.topics is None or (version == 0 and not request.topics)  # v0: an empty list means all
    if every:
        names = ctx.topics.metadata_topics()
    else:
        names = list(dict.fromkeys(t.name for t in request.topics or () if t.name is not None))  # once each, as Kafka
    topics: list[msg.MetadataResponse_Topic] = []
    if ctx.security.authorizer is not None:  # ACLs: DESCRIBE to see a topic, CREATE to auto-create it
        names, refused = _described(ctx, conn, names, every)
        topics += [{"error_code": errors.TopicAuthorizationFailedError.code, "name": n, "partitions": []}
                   for n in refused]
    alive = {b.id for b in brokers_on(ctx, conn)}
    live = {b.id for b in ctx.topics.live_brokers()}
    to_create: list[str] = []
    for name in names:
        found = None if created is not None and name in created else topic_metadata(ctx, name, version, alive, live)
        if found is not None:
            topics.append(found)
        elif created is not None and name in created:
            topics.append({"error_code": created[name], "name": name, "partitions": []})
        elif not auto:
            topics.append({"error_code": errors.UnknownTopicOrPartitionError.code, "name": name, "partitions": []})
        elif ctx.security.authorizer is not None and not _may_create(ctx, conn, name):
            topics.append({"error_code": errors.TopicAuthorizationFailedError.code, "name": name, "partitions": []})
        elif name in ctx.topics.topics:  # exists, not announced yet: Kafka answers it as one it creates
            topics.append({"error_code": errors.LeaderNotAvailableError.code, "name": name, "partitions": []})
        elif created is None:
            to_create.append(name)
        else:  # gone while this request created others: the client's next Metadata creates it
            topics.append({"error_code": errors.UnknownTopicOrPartitionError.code, "name": name, "partitions": []})
    if to_create:
        return _after_creating(ctx, header, request, conn, to_create)
    response: msg.MetadataResponse = {
        "brokers": _brokers(ctx, conn),
        "cluster_id": ctx.cluster_id,
        "controller_id": ctx.topics.controller_id(),
        "topics": topics,
    }
    if version >= 8:  # the authorized-operations bit fields, when asked for
        if request.include_topic_authorized_operations:
            for t in topics:
                if t["error_code"] != errors.TopicAuthorizationFailedError.code:
                    t["topic_authorized_operations"] = authorized_operations(ctx, conn, Res.TOPIC, str(t["name"]))
        if version <= 10 and request.include_cluster_authorized_operations:
            response["cluster_authorized_operations"] = authorized_operations(ctx, conn, Res.CLUSTER, CLUSTER_NAME)
    return response


def _described(ctx: BrokerContext, conn: ClientConnection, names: list[str],
               all_topics: bool) -> tuple[list[str], list[str]]:
    """(the topics the principal may describe, the named ones it may not). Asked for all topics,
    the refused ones are left out silently, as Kafka does."""
    ok = [n for n in names if allowed(ctx, conn, Op.DESCRIBE, Res.TOPIC, n, log_denied=not all_topics)]
    if all_topics:
        return ok, []
    return ok, [n for n in names if n not in ok]


def _may_create(ctx: BrokerContext, conn: ClientConnection, name: str) -> bool:
    return cluster_allowed(ctx, conn, Op.CREATE) or allowed(ctx, conn, Op.CREATE, Res.TOPIC, name)


@handles(msg.DESCRIBE_CLUSTER)
def describe_cluster(ctx: BrokerContext, header: RequestHeader, request: msg.DescribeClusterRequest,
                     conn: ClientConnection) -> Answer[msg.DescribeClusterResponse]:
    out: msg.DescribeClusterResponse = {
        "throttle_time_ms": 0,
        "error_code": 0,
        "cluster_id": ctx.cluster_id,
        "controller_id": ctx.topics.controller_id(),
        "brokers": [{"broker_id": b.id, "host": b.host, "port": b.port, "rack": b.rack}
                    for b in brokers_on(ctx, conn)],
    }
    if request.include_cluster_authorized_operations:
        out["cluster_authorized_operations"] = authorized_operations(ctx, conn, Res.CLUSTER, CLUSTER_NAME)
    return out
