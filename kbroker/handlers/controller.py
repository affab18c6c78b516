"""Requests only the controller serves: ControlledShutdown (7)."""
from __future__ import annotations

import asyncio
import logging

from kbroker import errors
from kbroker.controller.reassignment import request_moves
from kbroker.handlers import control_versions
from kbroker.handlers.acls import Op, cluster_allowed
from kbroker.handlers.context import BrokerContext
from kbroker.handlers.registry import Answer, ClientConnection, handles
from kbroker.log import TopicPartition
from kbroker.log.log_manager import HOSTING_CHUNK
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

def _stale_controller(ctx: BrokerContext,
                      request: msg.LeaderAndIsrRequest | msg.StopReplicaRequest | msg.UpdateMetadataRequest) -> bool:
    """Kafka refuses requests of a controller older than the newest one it heard from (and a single
    broker, which has no controller to hear from, refuses them all)."""
    if ctx.zookeeper is None or request.controller_epoch < ctx.zookeeper.metadata.controller_epoch:
        return True
    ctx.zookeeper.metadata.controller_epoch = request.controller_epoch
    return False


@handles(msg.LEADER_AND_ISR)
def leader_and_isr(ctx: BrokerContext, header: RequestHeader, request: msg.LeaderAndIsrRequest,
                   conn: ClientConnection) -> Answer[msg.LeaderAndIsrResponse]:
    version = header.api_version
    control_versions.regroup_leader_and_isr(version, request)
    if not cluster_allowed(ctx, conn, Op.CLUSTER_ACTION):
        return control_versions.leader_and_isr_answer(version, request, _DENIED, [])
    if _stale_controller(ctx, request):
        return control_versions.leader_and_isr_answer(version, request, errors.StaleControllerEpochError.code, [])
    return _leader_and_isr(ctx, version, request)


async def _leader_and_isr(ctx: BrokerContext, version: int,
                          request: msg.LeaderAndIsrRequest) -> msg.LeaderAndIsrResponse:
    assert ctx.zookeeper is not None
    leaders = {b.broker_id: b for b in request.live_leaders}
    results: list[msg.LeaderAndIsrResponse_LeaderAndIsrPartitionError] = []
    done = 0
    for topic in request.topic_states:
        for p in topic.partition_states:
            code = 0
            if done and done % HOSTING_CHUNK == 0:
                await asyncio.sleep(0)
            done += 1
            try:
                if request.controller_epoch < ctx.zookeeper.metadata.controller_epoch:
                    # a newer controller spoke while this request gave the loop away: its word stands
                    raise errors.StaleControllerEpochError(f"controller epoch {request.controller_epoch} is stale")
                ctx.replicas.become_leader_or_follower(topic.topic_name, p, leaders.get(p.leader))
            except errors.KafkaError as exc:
                code = exc.code
            except Exception:
                log.exception("LeaderAndIsr for %s-%d failed", topic.topic_name, p.partition_index)
                code = errors.UnknownServerError.code
            results.append({"topic_name": topic.topic_name, "partition_index": p.partition_index, "error_code": code})
    return control_versions.leader_and_isr_answer(version, request, 0, results)


@handles(msg.STOP_REPLICA)
def stop_replica(ctx: BrokerContext, header: RequestHeader, request: msg.StopReplicaRequest,
                 conn: ClientConnection) -> Answer[msg.StopReplicaResponse]:
    if not cluster_allowed(ctx, conn, Op.CLUSTER_ACTION):
        return {"error_code": _DENIED, "partition_errors": []}
    if _stale_controller(ctx, request):
        return {"error_code": errors.StaleControllerEpochError.code, "partition_errors": []}
    results: list[msg.StopReplicaResponse_StopReplicaPartitionError] = []
    for stop in control_versions.stop_replica_partitions(header.api_version, request):
        code = 0
        partition = ctx.replicas.partitions.get(TopicPartition(stop.topic, stop.partition))
        if partition is not None and stop.leader_epoch >= 0 and stop.leader_epoch <= partition.leader_epoch:
            code = errors.FencedLeaderEpochError.code  # v3 (KIP-570): a stale or repeated stop is refused
        else:
            ctx.replicas.stop_replica(stop.topic, stop.partition, stop.delete)
        results.append({"topic_name": stop.topic, "partition_index": stop.partition, "error_code": code})
    return {"error_code": 0, "partition_errors": results}


@handles(msg.UPDATE_METADATA)
def update_metadata(ctx: BrokerContext, header: RequestHeader, request: msg.UpdateMetadataRequest,
                    conn: ClientConnection) -> Answer[msg.UpdateMetadataResponse]:
    if not cluster_allowed(ctx, conn, Op.CLUSTER_ACTION):
        return {"error_code": _DENIED}
    if _stale_controller(ctx, request):
        return {"error_code": errors.StaleControllerEpochError.code}
    assert ctx.zookeeper is not None  # _stale_controller refuses every request on a single broker
    control_versions.regroup_update_metadata(header.api_version, request)
    ctx.zookeeper.metadata.update(request)
    return {"error_code": 0}
