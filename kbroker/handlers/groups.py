"""Consumer groups: FindCoordinator (10), JoinGroup (11), Heartbeat (12), LeaveGroup (13), SyncGroup (14),
DescribeGroups (15), ListGroups (16), OffsetCommit (8), OffsetFetch (9), DeleteGroups (42), OffsetDelete (47).
(InitProducerId is with the transactions, in ``txn``.) The coordinator holds the logic; these translate requests
and versions. OffsetCommit/OffsetFetch v0 use ZooKeeper (``kbroker.coordinator.group.zk_offsets``)."""
from __future__ import annotations

from collections.abc import Sequence

from kbroker import errors
from kbroker.coordinator.group import zk_offsets
from kbroker.coordinator.group.coordinator import GroupCoordinator
from kbroker.handlers.authorize import Op, Res, allowed, authorized_operations, cluster_allowed, topic_filter
from kbroker.handlers.context import BrokerContext
from kbroker.handlers.metadata import listener_of
from kbroker.handlers.registry import Answer, ClientConnection, handles
from kbroker.log import TopicPartition
from kbroker.protocol import message_types as msg
from kbroker.protocol.header import RequestHeader

GROUP_KEY, TRANSACTION_KEY = 0, 1
_GROUP_DENIED = errors.GroupAuthorizationFailedError.code
# the coordinator's OffsetCommitEntry: (offset, leader epoch, metadata), v1 adds the commit timestamp
CommitEntry = tuple[int, int, str | None] | tuple[int, int, str | None, int]


def _coordinator(ctx: BrokerContext) -> GroupCoordinator:
    coordinator = ctx.groups.coordinator
    assert coordinator is not None, "the group coordinator starts before the listener serves"
    return coordinator


@handles(msg.FIND_COORDINATOR)
def find_coordinator(ctx: BrokerContext, header: RequestHeader, request: msg.FindCoordinatorRequest,
                     conn: ClientConnection) -> Answer[msg.FindCoordinatorResponse]:
    key = request.key
    code, message = 0, None
    transactional = request.key_type == TRANSACTION_KEY
    if request.key_type not in (GROUP_KEY, TRANSACTION_KEY):
        code, message = errors.InvalidRequestError.code, f"unknown coordinator key type {request.key_type}"
    elif not key and transactional:
        # An empty group id is answered, as Kafka 2.8 does: OffsetCommit/OffsetFetch accept it (old clients).
        code, message = errors.InvalidRequestError.code, "the transactional id is empty"
    if code == 0 and not allowed(ctx, conn, Op.DESCRIBE, Res.TRANSACTIONAL_ID if transactional else Res.GROUP, key):
        code, message = ((errors.TransactionalIdAuthorizationFailedError.code, None) if transactional
                         else (errors.GroupAuthorizationFailedError.code, None))
    bridge = ctx.transactions if transactional else ctx.groups
    if code == 0 and ctx.zookeeper is not None and bridge.topic not in ctx.topics.topics:
        return _after_creating(ctx, conn, key, transactional)
    return _coordinator_answer(ctx, conn, key, transactional, code, message)


async def _after_creating(ctx: BrokerContext, conn: ClientConnection, key: str,
                          transactional: bool) -> msg.FindCoordinatorResponse:
    """ZooKeeper mode creates the internal topic on first use, as Kafka does, its znodes written off the event
    loop (a slow ZooKeeper delays this answer only); its leaders come later: COORDINATOR_NOT_AVAILABLE."""
    code, message = 0, None
    try:
        await (ctx.transactions.ensure_topic if transactional else ctx.groups.ensure_offsets_topic)()
    except errors.KafkaError as exc:
        code, message = exc.code, exc.message
    return _coordinator_answer(ctx, conn, key, transactional, code, message)


def _coordinator_answer(ctx: BrokerContext, conn: ClientConnection, key: str, transactional: bool, code: int,
                        message: str | None) -> msg.FindCoordinatorResponse:
    node = None
    if code == 0:
        node = (ctx.transactions if transactional else ctx.groups).coordinator_endpoint(key)
        node = node.on(listener_of(conn)) if node is not None else None  # its endpoint on this listener
        if node is None:
            code, message = errors.CoordinatorNotAvailableError.code, "the coordinator is not available"
    return {"throttle_time_ms": 0, "error_code": code, "error_message": message,
            "node_id": node.id if node is not None else -1, "host": node.host if node is not None else "",
            "port": node.port if node is not None else -1}


@handles(msg.JOIN_GROUP)
async def join_group(ctx: BrokerContext, header: RequestHeader, request: msg.JoinGroupRequest,
                     conn: ClientConnection) -> msg.JoinGroupResponse:
    v = header.api_version
    if not allowed(ctx, conn, Op.READ, Res.GROUP, request.group_id):
        return {"throttle_time_ms": 0, "error_code": _GROUP_DENIED, "generation_id": -1, "protocol_type": None,
                "protocol_name": "" if v < 7 else None, "leader": "", "member_id": "", "members": []}
    result = await _coordinator(ctx).join_group(
        request.group_id, request.member_id, request.group_instance_id if v >= 5 else None,
        client_id=header.client_id or "", client_host=conn.client_host,
        session_timeout_ms=request.session_timeout_ms,
        rebalance_timeout_ms=request.rebalance_timeout_ms if v >= 1 else -1,
        protocol_type=request.protocol_type, protocols=[(p.name, p.metadata) for p in request.protocols],
        require_known_member_id=v >= 4)
    return {
        "throttle_time_ms": 0, "error_code": result.error, "generation_id": result.generation_id,
        "protocol_type": result.protocol_type, "protocol_name": result.protocol_name or ("" if v < 7 else None),
        "leader": result.leader_id, "member_id": result.member_id,
        "members": [{"member_id": m.member_id, "group_instance_id": m.group_instance_id, "metadata": m.metadata}
                    for m in result.members],
    }


@handles(msg.SYNC_GROUP)
async def sync_group(ctx: BrokerContext, header: RequestHeader, request: msg.SyncGroupRequest,
                     conn: ClientConnection) -> msg.SyncGroupResponse:
    v = header.api_version
    if not allowed(ctx, conn, Op.READ, Res.GROUP, request.group_id):
        return {"throttle_time_ms": 0, "error_code": _GROUP_DENIED, "protocol_type": None, "protocol_name": None,
                "assignment": b""}
    result = await _coordinator(ctx).sync_group(
        request.group_id, request.generation_id, request.member_id,
        request.group_instance_id if v >= 3 else None,
        protocol_type=request.protocol_type if v >= 5 else None,
        protocol_name=request.protocol_name if v >= 5 else None,
        assignments=[(a.member_id, a.assignment) for a in request.assignments])
    return {"throttle_time_ms": 0, "error_code": result.error, "protocol_type": result.protocol_type,
            "protocol_name": result.protocol_name, "assignment": result.assignment}


@handles(msg.HEARTBEAT)
def heartbeat(ctx: BrokerContext, header: RequestHeader, request: msg.HeartbeatRequest,
              conn: ClientConnection) -> Answer[msg.HeartbeatResponse]:
    if not allowed(ctx, conn, Op.READ, Res.GROUP, request.group_id):
        return {"throttle_time_ms": 0, "error_code": _GROUP_DENIED}
    code = _coordinator(ctx).heartbeat(request.group_id, request.member_id, request.generation_id,
                                          request.group_instance_id if header.api_version >= 3 else None)
    return {"throttle_time_ms": 0, "error_code": code}


@handles(msg.LEAVE_GROUP)
def leave_group(ctx: BrokerContext, header: RequestHeader, request: msg.LeaveGroupRequest,
                conn: ClientConnection) -> Answer[msg.LeaveGroupResponse]:
    if not allowed(ctx, conn, Op.READ, Res.GROUP, request.group_id):
        return {"throttle_time_ms": 0, "error_code": _GROUP_DENIED, "members": []}
    members: list[str | tuple[str, str | None]] = [request.member_id]
    if header.api_version >= 3:
        members = [(m.member_id, m.group_instance_id) for m in request.members]
    result = _coordinator(ctx).leave_group(request.group_id, members)
    if header.api_version < 3:
        return {"throttle_time_ms": 0, "error_code": result.legacy_error}
    return {"throttle_time_ms": 0, "error_code": result.error,
            "members": [{"member_id": m.member_id, "group_instance_id": m.group_instance_id, "error_code": m.error}
                        for m in result.members]}


@handles(msg.OFFSET_COMMIT)
async def offset_commit(ctx: BrokerContext, header: RequestHeader, request: msg.OffsetCommitRequest,
                        conn: ClientConnection) -> msg.OffsetCommitResponse:
    v = header.api_version
    offsets: dict[TopicPartition, CommitEntry] = {}
    unknown: dict[TopicPartition, int] = {}
    group_ok = allowed(ctx, conn, Op.READ, Res.GROUP, request.group_id)
    may_read = topic_filter(ctx, conn, Op.READ)
    for topic in request.topics:
        for p in topic.partitions:
            tp = TopicPartition(topic.name, p.partition_index)
            if not group_ok:
                unknown[tp] = _GROUP_DENIED
                continue
            if may_read is not None and not may_read(topic.name):
                unknown[tp] = errors.TopicAuthorizationFailedError.code
                continue
            if not ctx.topics.exists(topic.name, p.partition_index):
                unknown[tp] = errors.UnknownTopicOrPartitionError.code
                continue
            entry = (p.committed_offset, p.committed_leader_epoch if v >= 6 else -1, p.committed_metadata)
            offsets[tp] = (*entry, p.commit_timestamp) if v == 1 else entry
    codes = dict(unknown)
    if offsets and v == 0:  # v0: ZooKeeper storage, as Kafka 0.8.2+
        codes.update(await zk_offsets.commit_v0(ctx, request.group_id,
                                                {tp: (e[0], e[2]) for tp, e in offsets.items()}))
    elif offsets:
        codes.update(await _coordinator(ctx).commit_offsets(
            request.group_id, request.member_id if v >= 1 else "", request.generation_id if v >= 1 else -1,
            request.group_instance_id if v >= 7 else None, offsets,
            request.retention_time_ms if 2 <= v <= 4 else -1))
    topics: dict[str, list[msg.OffsetCommitResponse_Partition]] = {}
    for topic in request.topics:
        for p in topic.partitions:
            code = codes.get(TopicPartition(topic.name, p.partition_index), 0)
            topics.setdefault(topic.name, []).append({"partition_index": p.partition_index, "error_code": code})
    return {"throttle_time_ms": 0, "topics": [{"name": n, "partitions": ps} for n, ps in topics.items()]}


def _fetch_group(ctx: BrokerContext, conn: ClientConnection, version: int, group_id: str,
                 topics: Sequence[msg.OffsetFetchRequest.Topic] | None,
                 require_stable: bool) -> tuple[int, list[msg.OffsetFetchResponse_Topic]]:
    wanted = None if topics is None else [TopicPartition(t.name, p) for t in topics for p in t.partition_indexes]
    may_describe = topic_filter(ctx, conn, Op.DESCRIBE)
    refused: list[TopicPartition] = []
    try:
        if not allowed(ctx, conn, Op.DESCRIBE, Res.GROUP, group_id):
            raise errors.GroupAuthorizationFailedError()
        if may_describe is not None and wanted is not None:
            refused = [tp for tp in wanted if not may_describe(tp.topic)]
            wanted = [tp for tp in wanted if may_describe(tp.topic)]
        found = _coordinator(ctx).fetch_offsets(group_id, wanted, require_stable) if wanted != [] else {}
    except errors.KafkaError as exc:
        if wanted is None or version >= 2:
            return exc.code, []
        found = {tp: (-1, -1, "", exc.code) for tp in wanted + refused}  # v0-1 repeat it per partition
        refused = []
    if may_describe is not None and topics is None:  # all of the group's: the refused topics left out
        found = {tp: v for tp, v in found.items() if may_describe(tp.topic)}
    for tp in refused:
        found[tp] = (-1, -1, "", errors.TopicAuthorizationFailedError.code)
    by_topic: dict[str, list[msg.OffsetFetchResponse_Partition]] = {}
    for (topic, index), (offset, epoch, metadata, code) in found.items():
        by_topic.setdefault(topic, []).append({"partition_index": index, "committed_offset": offset,
                                               "committed_leader_epoch": epoch, "metadata": metadata,
                                               "error_code": code})
    return 0, [{"name": t, "partitions": ps} for t, ps in by_topic.items()]


@handles(msg.OFFSET_FETCH)
def offset_fetch(ctx: BrokerContext, header: RequestHeader, request: msg.OffsetFetchRequest,
                 conn: ClientConnection) -> Answer[msg.OffsetFetchResponse]:
    v = header.api_version
    if v == 0:
        if not allowed(ctx, conn, Op.DESCRIBE, Res.GROUP, request.group_id):
            return {"throttle_time_ms": 0, "topics": [
                {"name": t.name, "partitions": [{"partition_index": p, "committed_offset": -1, "metadata": "",
                                                 "error_code": _GROUP_DENIED} for p in t.partition_indexes]}
                for t in request.topics or ()]}
        return _offset_fetch_zookeeper(ctx, request)
    code, topics = _fetch_group(ctx, conn, v, request.group_id, request.topics, v >= 7 and request.require_stable)
    return {"throttle_time_ms": 0, "topics": topics, "error_code": code}


async def _offset_fetch_zookeeper(ctx: BrokerContext, request: msg.OffsetFetchRequest) -> msg.OffsetFetchResponse:
    """OffsetFetch v0 reads /consumers/<group>/offsets (OffsetCommit v0 writes there)."""
    wanted = [TopicPartition(t.name, p) for t in request.topics or () for p in t.partition_indexes]

    found = await zk_offsets.fetch_v0(ctx, request.group_id, wanted, ctx.topics.exists)
    by_topic: dict[str, list[msg.OffsetFetchResponse_Partition]] = {}
    for (topic, index), (offset, code) in found.items():
        by_topic.setdefault(topic, []).append({"partition_index": index, "committed_offset": offset,
                                               "metadata": "", "error_code": code})
    return {"throttle_time_ms": 0, "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}


@handles(msg.DESCRIBE_GROUPS)
def describe_groups(ctx: BrokerContext, header: RequestHeader, request: msg.DescribeGroupsRequest,
                    conn: ClientConnection) -> Answer[msg.DescribeGroupsResponse]:
    groups: list[msg.DescribeGroupsResponse_DescribedGroup] = []
    for group_id in request.groups:
        if not allowed(ctx, conn, Op.DESCRIBE, Res.GROUP, group_id):
            groups.append({"error_code": _GROUP_DENIED, "group_id": group_id, "group_state": "",
                           "protocol_type": "", "protocol_data": "", "members": []})
            continue
        d = _coordinator(ctx).describe_group(group_id)
        if header.api_version >= 3 and request.include_authorized_operations:
            operations = authorized_operations(ctx, conn, Res.GROUP, group_id)
        else:
            operations = -2147483648  # Kafka's "not asked for"
        groups.append({
            "authorized_operations": operations,
            "error_code": d.error, "group_id": d.group_id, "group_state": d.state,
            "protocol_type": d.protocol_type, "protocol_data": d.protocol_name,
            "members": [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                         "client_id": m.client_id, "client_host": m.client_host,
                         "member_metadata": m.metadata, "member_assignment": m.assignment} for m in d.members],
        })
    return {"throttle_time_ms": 0, "groups": groups}


@handles(msg.LIST_GROUPS)
def list_groups(ctx: BrokerContext, header: RequestHeader, request: msg.ListGroupsRequest,
                conn: ClientConnection) -> Answer[msg.ListGroupsResponse]:
    code, groups = _coordinator(ctx).list_groups(request.states_filter if header.api_version >= 4 else None)
    if ctx.security.authorizer is not None and not cluster_allowed(ctx, conn, Op.DESCRIBE):
        groups = [g for g in groups if allowed(ctx, conn, Op.DESCRIBE, Res.GROUP, g.group_id, log_denied=False)]
    return {"throttle_time_ms": 0, "error_code": code,
            "groups": [{"group_id": g.group_id, "protocol_type": g.protocol_type, "group_state": g.state}
                       for g in groups]}


@handles(msg.DELETE_GROUPS)
async def delete_groups(ctx: BrokerContext, header: RequestHeader, request: msg.DeleteGroupsRequest,
                        conn: ClientConnection) -> msg.DeleteGroupsResponse:
    names = [g for g in request.groups_names if allowed(ctx, conn, Op.DELETE, Res.GROUP, g)]
    codes = await _coordinator(ctx).delete_groups(names) if names else {}
    codes = {g: codes.get(g, _GROUP_DENIED) for g in request.groups_names}
    return {"throttle_time_ms": 0,
            "results": [{"group_id": g, "error_code": code} for g, code in codes.items()]}


@handles(msg.OFFSET_DELETE)
async def offset_delete(ctx: BrokerContext, header: RequestHeader, request: msg.OffsetDeleteRequest,
                        conn: ClientConnection) -> msg.OffsetDeleteResponse:
    """OffsetDelete: DELETE on the group, then READ on each topic (TOPIC_AUTHORIZATION_FAILED) and
    a partition the broker knows (UNKNOWN_TOPIC_OR_PARTITION), as Kafka's KafkaApis. A group-level
    error is answered alone, with no topics."""
    if not allowed(ctx, conn, Op.DELETE, Res.GROUP, request.group_id):
        return {"error_code": _GROUP_DENIED, "throttle_time_ms": 0, "topics": []}
    may_read = topic_filter(ctx, conn, Op.READ)
    codes: dict[TopicPartition, int] = {}
    wanted: list[TopicPartition] = []
    for topic in request.topics:
        for p in topic.partitions:
            tp = TopicPartition(topic.name, p.partition_index)
            if may_read is not None and not may_read(topic.name):
                codes[tp] = errors.TopicAuthorizationFailedError.code
            elif not ctx.topics.exists(topic.name, p.partition_index):
                codes[tp] = errors.UnknownTopicOrPartitionError.code
            else:
                wanted.append(tp)
    code, deleted = await _coordinator(ctx).delete_offsets(request.group_id, wanted)
    if code:
        return {"error_code": code, "throttle_time_ms": 0, "topics": []}
    codes.update(deleted)
    by_topic: dict[str, list[msg.OffsetDeleteResponse_Partition]] = {}
    for (name, index), c in codes.items():
        by_topic.setdefault(name, []).append({"partition_index": index, "error_code": c})
    return {"error_code": 0, "throttle_time_ms": 0,
            "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}
