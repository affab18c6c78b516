"""Log dirs of this broker: DescribeLogDirs (35), what each dir holds (future replicas of moving
partitions beside the current ones), and AlterReplicaLogDirs (34), moving replicas between them."""
from __future__ import annotations

import logging
from pathlib import Path

from kbroker import errors
from kbroker.handlers.authorize import cluster_allowed
from kbroker.handlers.context import BrokerContext
from kbroker.handlers.registry import Answer, ClientConnection, handles
from kbroker.log import PartitionLog, TopicPartition
from kbroker.protocol import message_types as msg
from kbroker.protocol.header import RequestHeader
from kbroker.protocol.messages.acls import AclOperation

log = logging.getLogger(__name__)


@handles(msg.DESCRIBE_LOG_DIRS)
def describe_log_dirs(ctx: BrokerContext, header: RequestHeader, request: msg.DescribeLogDirsRequest,
                      conn: ClientConnection) -> Answer[msg.DescribeLogDirsResponse]:
    if not cluster_allowed(ctx, conn, AclOperation.DESCRIBE):
        return {"throttle_time_ms": 0, "results": []}  # Kafka answers an empty result, no error
    lm = ctx.log_manager
    wanted = None
    if request.topics is not None:
        wanted = {(t.topic, p) for t in request.topics for p in t.partitions}
    by_dir: dict[Path, list[tuple[TopicPartition, PartitionLog, bool]]] = {}
    for tp, plog in lm.logs.items():
        by_dir.setdefault(plog.directory.parent, []).append((tp, plog, False))
    for tp, plog in list(lm.future_logs.items()):
        by_dir.setdefault(plog.directory.parent, []).append((tp, plog, True))
    results: list[msg.DescribeLogDirsResponse_Result] = []
    for directory in lm.log_dirs:
        offline = directory in lm.offline_dirs
        topics: dict[str, list[msg.DescribeLogDirsResponse_Partition]] = {}
        if not offline:
            for tp, plog, future in sorted(by_dir.get(directory, []), key=lambda e: (e[0], e[2])):
                if wanted is not None and tuple(tp) not in wanted:
                    continue
                lag = 0
                if future:  # Kafka's offset lag of a future replica: how far its copy is behind (-1: unknown)
                    current = lm.logs.get(tp)
                    lag = current.log_end_offset - plog.log_end_offset if current is not None else -1
                topics.setdefault(tp.topic, []).append({
                    "partition_index": tp.partition, "partition_size": plog.size_bytes,
                    "offset_lag": lag, "is_future_key": future})
        results.append({
            "error_code": errors.KafkaStorageError.code if offline else 0,
            "log_dir": str(directory),
            "topics": [{"name": t, "partitions": parts} for t, parts in topics.items()],
        })
    return {"throttle_time_ms": 0, "results": results}


@handles(msg.ALTER_REPLICA_LOG_DIRS)
def alter_replica_log_dirs(ctx: BrokerContext, header: RequestHeader, request: msg.AlterReplicaLogDirsRequest,
                           conn: ClientConnection) -> Answer[msg.AlterReplicaLogDirsResponse]:
    """Per partition, as Kafka: CLUSTER_AUTHORIZATION_FAILED for all without ALTER on the cluster,
    else the replica manager's answer. A partition named twice keeps the last dir asked (Kafka's map)."""
    moves: dict[TopicPartition, str] = {}
    for d in request.dirs:
        for t in d.topics:
            for index in t.partitions:
                moves[TopicPartition(t.name, index)] = d.path
    codes: dict[TopicPartition, int] = {}
    if not cluster_allowed(ctx, conn, AclOperation.ALTER):
        codes = dict.fromkeys(moves, errors.ClusterAuthorizationFailedError.code)
    else:
        for tp, path in moves.items():
            try:
                ctx.replicas.alter_log_dir(tp, path)
                codes[tp] = 0
            except errors.KafkaError as exc:
                log.info("AlterReplicaLogDirs %s to %s: %s", tp, path, exc.message)
                codes[tp] = exc.code
            except Exception:
                log.exception("AlterReplicaLogDirs %s to %s failed", tp, path)
                codes[tp] = errors.UnknownServerError.code
    by_topic: dict[str, list[msg.AlterReplicaLogDirsResponse_Partition]] = {}
    for tp, code in codes.items():
        by_topic.setdefault(tp.topic, []).append({"partition_index": tp.partition, "error_code": code})
    return {"throttle_time_ms": 0,
            "results": [{"topic_name": name, "partitions": parts} for name, parts in by_topic.items()]}
