"""Metadata (3) and DescribeCluster (60): brokers, controller, topics, leaders."""
from __future__ import annotations

from kbroker import errors
from kbroker.protocol.messages.acls import CLUSTER_NAME

from .acls import Op, Res, allowed, authorized_operations, cluster_allowed
from .context import BrokerContext
from .registry import handles


def listener_of(conn) -> str:
    """The listener a request came in on: brokers are answered with their endpoint on it."""
    session = getattr(conn, "session", None)
    return session.listener if session is not None else "PLAINTEXT"


def brokers_on(ctx: BrokerContext, conn) -> list:
    """Live brokers as a client of this connection's listener reaches them; brokers without that
    listener are left out, as Kafka does."""
    listener = listener_of(conn)
    return [e for e in (b.on(listener) for b in ctx.topics.live_brokers()) if e is not None]


def _brokers(ctx: BrokerContext, conn) -> list[dict]:
    return [{"node_id": b.id, "host": b.host, "port": b.port, "rack": b.rack} for b in brokers_on(ctx, conn)]


def topic_metadata(ctx: BrokerContext, name: str) -> dict:
    topic = ctx.topics.topics.get(name)
    if topic is None:
        return {"error_code": errors.UnknownTopicOrPartitionError.code, "name": name, "partitions": []}
    partitions = []
    for index in sorted(topic.assignment):
        state = ctx.topics.partition_state(name, index)
        partitions.append({
            "error_code": 0 if state.leader >= 0 else errors.LeaderNotAvailableError.code,
            "partition_index": index,
            "leader_id": state.leader,
            "leader_epoch": state.leader_epoch,
            "replica_nodes": list(topic.assignment[index]),
            "isr_nodes": list(state.isr),
            "offline_replicas": [],
        })
    return {"error_code": 0, "name": name, "topic_id": topic.topic_id, "is_internal": topic.internal,
            "partitions": partitions}


@handles(3)
def metadata(ctx: BrokerContext, header, request, conn):
    if request.topics is None or (header.api_version == 0 and not request.topics):
        names = sorted(ctx.topics.topics)  # all topics (v0: an empty list means all)
    else:
        names = []
        auto = request.allow_auto_topic_creation and header.api_version >= 4 or header.api_version < 4
        for t in request.topics:
            name = t.name
            if name is None:
                continue
            names.append(name)
    topics = []
    if ctx.security.authorizer is not None:  # ACLs: DESCRIBE to see a topic, CREATE to auto-create it
        names, refused = _described(ctx, conn, names, request.topics is None or not request.topics)
        topics += [{"error_code": errors.TopicAuthorizationFailedError.code, "name": n, "partitions": []}
                   for n in refused]
    for name in names:
        try:
            if name not in ctx.topics.topics and auto and ctx.config.auto_create_topics_enable:
                if ctx.security.authorizer is not None and not _may_create(ctx, conn, name):
                    topics.append({"error_code": errors.TopicAuthorizationFailedError.code, "name": name,
                                   "partitions": []})
                    continue
                # an illegal name is answered INVALID_TOPIC_EXCEPTION for that topic, as Kafka does
                ctx.topics.auto_create(name)
            topics.append(topic_metadata(ctx, name))
        except errors.KafkaError as exc:
            topics.append({"error_code": exc.code, "name": name, "partitions": []})
    response = {
        "brokers": _brokers(ctx, conn),
        "cluster_id": ctx.cluster_id,
        "controller_id": ctx.topics.controller_id(),
        "topics": topics,
    }
    if header.api_version >= 8:  # the authorized-operations bit fields, when asked for
        if request.include_topic_authorized_operations:
            for t in topics:
                if t["error_code"] != errors.TopicAuthorizationFailedError.code:
                    t["topic_authorized_operations"] = authorized_operations(ctx, conn, Res.TOPIC, str(t["name"]))
        if header.api_version <= 10 and request.include_cluster_authorized_operations:
            response["cluster_authorized_operations"] = authorized_operations(ctx, conn, Res.CLUSTER, CLUSTER_NAME)
    return response


def _described(ctx: BrokerContext, conn, names: list[str], all_topics: bool) -> tuple[list[str], list[str]]:
    """(the topics the principal may describe, the named ones it may not). Asked for all topics,
    the refused ones are left out silently, as Kafka does."""
    ok = [n for n in names if allowed(ctx, conn, Op.DESCRIBE, Res.TOPIC, n, log_denied=not all_topics)]
    if all_topics:
        return ok, []
    return ok, [n for n in names if n not in ok]


def _may_create(ctx: BrokerContext, conn, name: str) -> bool:
    return cluster_allowed(ctx, conn, Op.CREATE) or allowed(ctx, conn, Op.CREATE, Res.TOPIC, name)


@handles(60)
def describe_cluster(ctx: BrokerContext, header, request, conn):
    out = {
        "error_code": 0,
        "cluster_id": ctx.cluster_id,
        "controller_id": ctx.topics.controller_id(),
        "brokers": [{"broker_id": b.id, "host": b.host, "port": b.port, "rack": b.rack}
                    for b in brokers_on(ctx, conn)],
    }
    if request.include_cluster_authorized_operations:
        out["cluster_authorized_operations"] = authorized_operations(ctx, conn, Res.CLUSTER, CLUSTER_NAME)
    return out
