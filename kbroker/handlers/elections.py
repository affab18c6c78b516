"""ElectLeaders (43): preferred and unclean leader elections through the controller, as Kafka 2.8's
``KafkaApis.handleElectReplicaLeader`` and ``ReplicaManager.electLeaders`` serve them.

- ALTER on the cluster is required; without it the answer is CLUSTER_AUTHORIZATION_FAILED at the top
  and for every partition named.
- Null ``topic_partitions`` means every partition this broker's metadata knows; the answer then
  leaves out the partitions that needed no election.
- A broker that is not the active controller answers NOT_CONTROLLER per partition (top-level 0):
  clients look the controller up again and retry.
- A partition whose election succeeded is answered once this broker's metadata (the controller's
  own UpdateMetadata) shows the new leader, or REQUEST_TIMED_OUT after ``timeout_ms``.
- A single broker (embedded store) is a one-broker cluster and its own controller: every partition
  already has its only possible leader (ELECTION_NOT_NEEDED), unless its log dir is offline.
"""
from __future__ import annotations

import asyncio
import time

from kbroker import errors
from kbroker.controller import election
from kbroker.controller.election import PREFERRED, UNCLEAN, Outcome, Refusal
from kbroker.handlers.authorize import Op, cluster_allowed
from kbroker.handlers.context import BrokerContext
from kbroker.handlers.registry import Answer, ClientConnection, handles
from kbroker.protocol import message_types as msg
from kbroker.protocol.header import RequestHeader

TP = tuple[str, int]
_POLL_S = 0.02  # how often a waiting election looks at the metadata again


@handles(msg.ELECT_LEADERS)
def elect_leaders(ctx: BrokerContext, header: RequestHeader, request: msg.ElectLeadersRequest,
                  conn: ClientConnection) -> Answer[msg.ElectLeadersResponse]:
    election_type = request.election_type if header.api_version >= 1 else PREFERRED
    named = None if request.topic_partitions is None else list(dict.fromkeys(
        (t.topic, p) for t in request.topic_partitions for p in t.partition_id))
    if not cluster_allowed(ctx, conn, Op.ALTER):
        code = errors.ClusterAuthorizationFailedError.code
        return _response(code, {tp: Refusal(code) for tp in named or []}, named is None)
    if election_type not in (PREFERRED, UNCLEAN):
        code = errors.InvalidRequestError.code
        refusal = Refusal(code, f"unknown election type {election_type}: 0 (preferred) or 1 (unclean)")
        return _response(code, {tp: refusal for tp in named or []}, named is None)
    return _elect(ctx, named, election_type, request.timeout_ms)


async def _elect(ctx: BrokerContext, named: list[TP] | None, election_type: int,
                 timeout_ms: int) -> msg.ElectLeadersResponse:
    deadline = time.monotonic() + max(timeout_ms, 0) / 1000
    zk = ctx.zookeeper
    if zk is None:
        partitions = named if named is not None else [
            (t, p) for t, info in sorted(ctx.topics.topics.items()) for p in sorted(info.assignment)]
        return _response(0, {tp: _single_broker(ctx, tp, election_type) for tp in partitions}, named is None)
    partitions = named if named is not None else sorted(zk.metadata.partitions)
    controller = zk.controller
    if not controller.active:
        outcomes = election.not_controller(partitions)
    else:
        outcomes = await zk.cluster.run_blocking(
            lambda: election.elect_leaders(controller, zk.cluster.snapshot, partitions, election_type))
    waiting = {tp: leader for tp, leader in outcomes.items() if isinstance(leader, int)}
    while waiting:
        for tp, leader in list(waiting.items()):
            state = zk.metadata.state(*tp)
            if state is not None and state.leader == leader:
                del waiting[tp]
        if not waiting or time.monotonic() >= deadline:
            break
        await asyncio.sleep(_POLL_S)
    for tp in waiting:
        outcomes[tp] = Refusal(errors.RequestTimedOutError.code,
                               f"the new leader of {tp[0]}-{tp[1]} was not known within {timeout_ms} ms")
    return _response(0, outcomes, named is None)


def _single_broker(ctx: BrokerContext, tp: TP, election_type: int) -> Outcome:
    info = ctx.topics.topics.get(tp[0])
    replicas = None if info is None else info.assignment.get(tp[1])
    if not replicas:
        return Refusal(errors.UnknownTopicOrPartitionError.code, "The partition does not exist.")
    state = ctx.topics.partition_state(*tp)
    live = {ctx.broker_id} if state.leader >= 0 else set()  # a replica in an offline log dir is not live
    choice = election.choose(tp, replicas, state, election_type, live)
    if isinstance(choice, Refusal):
        return choice
    # Unreachable with one broker (its live replica already leads); nothing to write either way.
    return Refusal(errors.ElectionNotNeededError.code, f"{tp[0]}-{tp[1]} is led by its only live replica")


def _response(code: int, outcomes: dict[TP, Outcome], every_partition: bool) -> msg.ElectLeadersResponse:
    by_topic: dict[str, list[msg.ElectLeadersResponse_PartitionResult]] = {}
    for (topic, index), outcome in outcomes.items():
        refusal = outcome if isinstance(outcome, Refusal) else Refusal(0)
        if every_partition and refusal.code == errors.ElectionNotNeededError.code:
            continue  # Kafka lists only the partitions that needed an election
        by_topic.setdefault(topic, []).append(
            {"partition_id": index, "error_code": refusal.code, "error_message": refusal.message})
    return {"throttle_time_ms": 0, "error_code": code, "replica_election_results": [
        {"topic": topic, "partition_result": results} for topic, results in by_topic.items()]}
