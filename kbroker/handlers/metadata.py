"""Metadata (3) and DescribeCluster (60): brokers, controller, topics, leaders."""
from __future__ import annotations

from kbroker import errors

from .context import BrokerContext
from .registry import handles


def _brokers(ctx: BrokerContext) -> list[dict]:
    return [{"node_id": b.id, "host": b.host, "port": b.port, "rack": b.rack} for b in ctx.topics.live_brokers()]


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
    for name in names:
        try:
            if name not in ctx.topics.topics and auto and ctx.config.auto_create_topics_enable:
                # an illegal name is answered INVALID_TOPIC_EXCEPTION for that topic, as Kafka does
                ctx.topics.auto_create(name)
            topics.append(topic_metadata(ctx, name))
        except errors.KafkaError as exc:
            topics.append({"error_code": exc.code, "name": name, "partitions": []})
    return {
        "brokers": _brokers(ctx),
        "cluster_id": ctx.cluster_id,
        "controller_id": ctx.topics.controller_id(),
        "topics": topics,
    }


@handles(60)
def describe_cluster(ctx: BrokerContext, header, request, conn):
    return {
        "error_code": 0,
        "cluster_id": ctx.cluster_id,
        "controller_id": ctx.topics.controller_id(),
        "brokers": [{"broker_id": b.id, "host": b.host, "port": b.port, "rack": b.rack}
                    for b in ctx.topics.live_brokers()],
    }
