"""The controller's requests, both ways: ControlledShutdown (7) and the partition reassignments (45, 46), which
the controller serves; LeaderAndIsr (4), StopReplica (5) and UpdateMetadata (6), which it sends. Those three are
authorized and answered here, checked against the newest controller epoch and applied by the replica manager
(``heard_from_controller``, ``apply_leader_and_isr``, ``stop_replicas``), as Kafka's KafkaApis hands them to its
ReplicaManager."""
from __future__ import annotations

import logging

from kbroker import errors
from kbroker.controller.reassignment import request_moves
from kbroker.handlers import control_versions
from kbroker.handlers.authorize import Op, cluster_allowed
from kbroker.handlers.context import BrokerContext
from kbroker.handlers.registry import Answer, ClientConnection, handles
from kbroker.protocol import message_types as msg
from kbroker.protocol.header import RequestHeader

log = logging.getLogger(__name__)
_DENIED = errors.ClusterAuthorizationFailedError.code


@handles(msg.CONTROLLED_SHUTDOWN)
def controlled_shutdown(ctx: BrokerContext, header: RequestHeader, request: msg.ControlledShutdownRequest,
                        conn: ClientConnection) -> Answer[msg.ControlledShutdownResponse]:
    if not cluster_allowed(ctx, conn, Op.CLUSTER_ACTION):
        return {"error_code": _DENIED, "remaining_partitions": []}
    return _controlled_shutdown(ctx, request.broker_id)


async def _controlled_shutdown(ctx: BrokerContext, broker_id: int) -> msg.ControlledShutdownResponse:
    zk = ctx.zookeeper
    if zk is None:
        return {"error_code": errors.NotControllerError.code, "remaining_partitions": []}
    snap = zk.cluster.snapshot
    try:
        remaining = await zk.cluster.run_blocking(lambda: zk.controller.controlled_shutdown(broker_id, snap))
    except errors.KafkaError as exc:
        return {"error_code": exc.code, "remaining_partitions": []}
    except Exception:
        log.exception("controlled shutdown of broker %d failed", broker_id)
        return {"error_code": errors.UnknownServerError.code, "remaining_partitions": []}
    return {"error_code": 0, "remaining_partitions": [{"topic_name": t, "partition_index": p} for t, p in remaining]}


@handles(msg.ALTER_PARTITION_REASSIGNMENTS)
def alter_partition_reassignments(ctx: BrokerContext, header: RequestHeader,
                                  request: msg.AlterPartitionReassignmentsRequest,
                                  conn: ClientConnection) -> Answer[msg.AlterPartitionReassignmentsResponse]:
    if not cluster_allowed(ctx, conn, Op.ALTER):
        return {"throttle_time_ms": 0, "error_code": _DENIED, "error_message": None, "responses": [
            {"name": t.name, "partitions": [{"partition_index": p.partition_index, "error_code": _DENIED,
                                             "error_message": None} for p in t.partitions]}
            for t in request.topics]}
    return _alter_reassignments(ctx, request)


async def _alter_reassignments(ctx: BrokerContext,
                               request: msg.AlterPartitionReassignmentsRequest,
                               ) -> msg.AlterPartitionReassignmentsResponse:
    """Validate each move, then hand the valid ones to the controller through
    /admin/reassign_partitions (null replicas cancel a move in progress)."""
    if ctx.zookeeper is None:
        return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "responses": [
            {"name": t.name, "partitions": [{"partition_index": p.partition_index,
                                             "error_code": errors.InvalidRequestError.code,
                                             "error_message": "a single broker has nowhere to move replicas"}
                                            for p in t.partitions]} for t in request.topics]}
    snap = ctx.zookeeper.cluster.snapshot
    moves: dict[tuple[str, int], list[int]] = {}
    cancels: list[tuple[str, int]] = []
    responses: list[msg.AlterPartitionReassignmentsResponse_ReassignableTopicResponse] = []
    for topic in request.topics:
        results: list[msg.AlterPartitionReassignmentsResponse_ReassignablePartitionResponse] = []
        for p in topic.partitions:
            out: msg.AlterPartitionReassignmentsResponse_ReassignablePartitionResponse = {
                "partition_index": p.partition_index, "error_code": 0, "error_message": None}
            key = (topic.name, p.partition_index)
            replicas = snap.assignments.get(topic.name, {}).get(p.partition_index)
            if replicas is None:
                out["error_code"] = errors.UnknownTopicOrPartitionError.code
                out["error_message"] = f"{topic.name}-{p.partition_index} does not exist"
            elif p.replicas is None:
                if key not in snap.moving:
                    out["error_code"] = errors.NoReassignmentInProgressError.code
                    out["error_message"] = f"no reassignment of {topic.name}-{p.partition_index} is in progress"
                else:
                    cancels.append(key)
            elif not p.replicas or len(set(p.replicas)) != len(p.replicas) or any(
                    r not in snap.brokers for r in p.replicas):
                out["error_code"] = errors.InvalidReplicaAssignmentError.code
                out["error_message"] = f"replicas {list(p.replicas)} are not distinct live brokers"
            else:
                moves[key] = list(p.replicas)
            results.append(out)
        responses.append({"name": topic.name, "partitions": results})
    if moves or cancels:
        await ctx.run_blocking(lambda: request_moves(ctx.store, moves, cancels))
    return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "responses": responses}


@handles(msg.LIST_PARTITION_REASSIGNMENTS)
def list_partition_reassignments(ctx: BrokerContext, header: RequestHeader,
                                 request: msg.ListPartitionReassignmentsRequest,
                                 conn: ClientConnection) -> Answer[msg.ListPartitionReassignmentsResponse]:
    if not cluster_allowed(ctx, conn, Op.DESCRIBE):
        return {"throttle_time_ms": 0, "error_code": _DENIED, "error_message": None, "topics": []}
    wanted = None if request.topics is None else {(t.name, p) for t in request.topics for p in t.partition_indexes}
    by_topic: dict[str, list[msg.ListPartitionReassignmentsResponse_OngoingPartitionReassignment]] = {}
    if ctx.zookeeper is not None:  # a single broker moves nothing
        snap = ctx.zookeeper.cluster.snapshot
        for (topic, index), (adding, removing) in sorted(snap.moving.items()):
            if wanted is not None and (topic, index) not in wanted:
                continue
            by_topic.setdefault(topic, []).append({
                "partition_index": index, "replicas": snap.assignments.get(topic, {}).get(index, []),
                "adding_replicas": adding, "removing_replicas": removing})
    return {"throttle_time_ms": 0, "error_code": 0, "error_message": None,
            "topics": [{"name": t, "partitions": parts} for t, parts in by_topic.items()]}


# -- from the controller -------------------------------------------------------------------

@handles(msg.LEADER_AND_ISR)
def leader_and_isr(ctx: BrokerContext, header: RequestHeader, request: msg.LeaderAndIsrRequest,
                   conn: ClientConnection) -> Answer[msg.LeaderAndIsrResponse]:
    """Authorize and answer; the replica manager applies it (Kafka's becomeLeaderOrFollower)."""
    version = header.api_version
    control_versions.regroup_leader_and_isr(version, request)
    if not cluster_allowed(ctx, conn, Op.CLUSTER_ACTION):
        return control_versions.leader_and_isr_answer(version, request, _DENIED, [])
    if not ctx.replicas.heard_from_controller(request.controller_epoch):
        return control_versions.leader_and_isr_answer(version, request, errors.StaleControllerEpochError.code, [])
    return _leader_and_isr(ctx, version, request)


async def _leader_and_isr(ctx: BrokerContext, version: int,
                          request: msg.LeaderAndIsrRequest) -> msg.LeaderAndIsrResponse:
    results = await ctx.replicas.apply_leader_and_isr(
        request.controller_epoch, [(t.topic_name, p) for t in request.topic_states for p in t.partition_states],
        {b.broker_id: b for b in request.live_leaders})
    return control_versions.leader_and_isr_answer(version, request, 0, [
        {"topic_name": topic, "partition_index": index, "error_code": code} for topic, index, code in results])


@handles(msg.STOP_REPLICA)
def stop_replica(ctx: BrokerContext, header: RequestHeader, request: msg.StopReplicaRequest,
                 conn: ClientConnection) -> Answer[msg.StopReplicaResponse]:
    """Authorize and answer; the replica manager stops the replicas (Kafka's stopReplicas)."""
    if not cluster_allowed(ctx, conn, Op.CLUSTER_ACTION):
        return {"error_code": _DENIED, "partition_errors": []}
    if not ctx.replicas.heard_from_controller(request.controller_epoch):
        return {"error_code": errors.StaleControllerEpochError.code, "partition_errors": []}
    stops = control_versions.stop_replica_partitions(header.api_version, request)
    results = ctx.replicas.stop_replicas([(s.topic, s.partition, s.delete, s.leader_epoch) for s in stops])
    return {"error_code": 0, "partition_errors": [
        {"topic_name": topic, "partition_index": index, "error_code": code} for topic, index, code in results]}


@handles(msg.UPDATE_METADATA)
def update_metadata(ctx: BrokerContext, header: RequestHeader, request: msg.UpdateMetadataRequest,
                    conn: ClientConnection) -> Answer[msg.UpdateMetadataResponse]:
    if not cluster_allowed(ctx, conn, Op.CLUSTER_ACTION):
        return {"error_code": _DENIED}
    if not ctx.replicas.heard_from_controller(request.controller_epoch):
        return {"error_code": errors.StaleControllerEpochError.code}
    assert ctx.zookeeper is not None  # a single broker hears from no controller
    control_versions.regroup_update_metadata(header.api_version, request)
    ctx.zookeeper.metadata.update(request)
    return {"error_code": 0}
