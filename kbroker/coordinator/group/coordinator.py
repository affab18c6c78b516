"""The group coordinator: the API the group and offset request handlers call.

One ``GroupCoordinator`` per broker serves the groups whose ``__consumer_offsets`` partition this
broker leads (all partitions unless told otherwise). It checks what Kafka checks before a group
is touched (group id, coordinator ownership and loading, session timeout bounds), keeps the group
cache, stores offsets and group metadata through ``OffsetsLog``, and rebuilds both from the log
when a partition is loaded.

Handlers translate requests into these calls and results into responses:

==================  =============================================================  ==========
request             call                                                            result
==================  =============================================================  ==========
JoinGroup           ``await join_group(...)``                                       JoinResult
SyncGroup           ``await sync_group(...)``                                       SyncResult
Heartbeat           ``heartbeat(...)``                                              error code
LeaveGroup          ``leave_group(group_id, members)``                              LeaveResult
OffsetCommit        ``await commit_offsets(...)``                                   {tp: code}
OffsetFetch         ``fetch_offsets(group_id, partitions)`` (raises KafkaError)     {tp: tuple}
DescribeGroups      ``describe_group(group_id)``                                    GroupDescription
ListGroups          ``list_groups(states_filter)``                                  (code, [GroupOverview])
DeleteGroups        ``await delete_groups(group_ids)``                              {group: code}
OffsetDelete        ``await delete_offsets(group_id, partitions)``                  (code, {tp: code})
FindCoordinator     ``partition_for(group_id)``                                     partition
==================  =============================================================  ==========

Version-dependent details stay with the handlers: JoinGroup v0 has no rebalance timeout (pass -1:
the session timeout is used), MEMBER_ID_REQUIRED only exists from v4 (``require_known_member_id``),
LeaveGroup v0-2 carries one member and one code (``LeaveResult.legacy_error``), OffsetFetch v0-1
repeat a group-level error in every partition, and OffsetCommit's UNKNOWN_TOPIC_OR_PARTITION
for topics the broker does not know is decided before calling here, as Kafka's KafkaApis does.

One module: ``GroupCoordinator`` is the API of the table above, each call a short check-then-delegate into
``Group`` and ``OffsetsLog``, which are modules of their own.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence

from kbroker import errors
from kbroker.clock import wall_ms
from kbroker.coordinator.group.group import (
    CONSUMER_PROTOCOL_TYPE,
    DEAD,
    EMPTY,
    FENCED_INSTANCE_ID,
    NONE,
    PREPARING_REBALANCE,
    REBALANCE_IN_PROGRESS,
    STABLE,
    UNKNOWN_MEMBER_ID,
    Group,
    GroupConfig,
    GroupDescription,
    GroupOverview,
    JoinResult,
    LeaveMemberResult,
    LeaveResult,
    SyncResult,
)
from kbroker.coordinator.group.offsets_log import AppendFn, OffsetAndMetadata, OffsetsLog, is_awaitable
from kbroker.log.names import TopicPartition
from kbroker.timers import LoopTimer, Timer

log = logging.getLogger(__name__)

UNKNOWN_SERVER_ERROR = errors.UnknownServerError.code  # -1
OFFSET_METADATA_TOO_LARGE = errors.OffsetMetadataTooLargeError.code  # 12
COORDINATOR_LOAD_IN_PROGRESS = errors.CoordinatorLoadInProgressError.code  # 14
COORDINATOR_NOT_AVAILABLE = errors.CoordinatorNotAvailableError.code  # 15
NOT_COORDINATOR = errors.NotCoordinatorError.code  # 16
ILLEGAL_GENERATION = errors.IllegalGenerationError.code  # 22
INVALID_GROUP_ID = errors.InvalidGroupIdError.code  # 24
INVALID_SESSION_TIMEOUT = errors.InvalidSessionTimeoutError.code  # 26
INVALID_COMMIT_OFFSET_SIZE = errors.InvalidCommitOffsetSizeError.code  # 28
NON_EMPTY_GROUP = errors.NonEmptyGroupError.code  # 68
GROUP_ID_NOT_FOUND = errors.GroupIdNotFoundError.code  # 69
GROUP_SUBSCRIBED_TO_TOPIC = errors.GroupSubscribedToTopicError.code  # 86
UNSTABLE_OFFSET_COMMIT = errors.UnstableOffsetCommitError.code  # 88

# What a failed write of the offsets topic becomes for the client (Kafka's GroupMetadataManager).
_GROUP_STORE_ERRORS = {
    errors.UnknownTopicOrPartitionError.code: COORDINATOR_NOT_AVAILABLE,
    errors.NotEnoughReplicasError.code: COORDINATOR_NOT_AVAILABLE,
    errors.NotEnoughReplicasAfterAppendError.code: COORDINATOR_NOT_AVAILABLE,
    errors.RequestTimedOutError.code: COORDINATOR_NOT_AVAILABLE,
    errors.NotLeaderOrFollowerError.code: NOT_COORDINATOR,
    errors.KafkaStorageError.code: NOT_COORDINATOR,
    errors.MessageTooLargeError.code: UNKNOWN_SERVER_ERROR,
    errors.RecordListTooLargeError.code: UNKNOWN_SERVER_ERROR,
    errors.InvalidFetchSizeError.code: UNKNOWN_SERVER_ERROR,
}
_OFFSET_STORE_ERRORS = {
    errors.UnknownTopicOrPartitionError.code: COORDINATOR_NOT_AVAILABLE,
    errors.NotEnoughReplicasError.code: COORDINATOR_NOT_AVAILABLE,
    errors.NotEnoughReplicasAfterAppendError.code: COORDINATOR_NOT_AVAILABLE,
    errors.NotLeaderOrFollowerError.code: NOT_COORDINATOR,
    errors.KafkaStorageError.code: NOT_COORDINATOR,
    errors.MessageTooLargeError.code: INVALID_COMMIT_OFFSET_SIZE,
    errors.RecordListTooLargeError.code: INVALID_COMMIT_OFFSET_SIZE,
    errors.InvalidFetchSizeError.code: INVALID_COMMIT_OFFSET_SIZE,
}

# A partition without a committed offset (OffsetFetch): offset -1, leader epoch -1, metadata "".
NO_OFFSET = (-1, -1, "", NONE)

# (offset, leader_epoch, metadata) or (offset, leader_epoch, metadata, commit_timestamp_ms)
OffsetCommitEntry = tuple[int, int, str | None] | tuple[int, int, str | None, int]
OffsetFetchEntry = tuple[int, int, str, int]  # (offset, leader_epoch, metadata, error)


def _java_length(text: str) -> int:
    """Java's String.length(): UTF-16 code units (what offset.metadata.max.bytes is compared to)."""
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


class GroupCoordinator:
    """Consumer groups and their committed offsets for this broker's ``__consumer_offsets``
    partitions.

    ``append(partition, batch) -> offset`` (or an awaitable of it) writes a batch to a partition of
    ``__consumer_offsets``; without it, state lives in memory only. ``clock()`` gives milliseconds
    (wall clock: it also stamps commits) and ``timer`` schedules deadlines on that scale (see
    ``kbroker.timers``). ``active_partitions`` are the partitions this broker is the
    coordinator for; None means all of them (a single broker). Partitions change hands through
    ``begin_loading``/``load_partition`` and ``unload_partition``.
    """

    def __init__(self, config: GroupConfig | None = None, *, append: AppendFn | None = None,
                 clock: Callable[[], int] = wall_ms, timer: Timer | None = None,
                 active_partitions: Iterable[int] | None = None) -> None:
        self.config = config or GroupConfig()
        self._clock = clock
        self.timer: Timer = timer if timer is not None else LoopTimer(clock)
        self.offsets_log = OffsetsLog(append, self.config.offsets_topic_num_partitions)
        self._groups: dict[str, Group] = {}
        self._all_active = active_partitions is None
        self._active: set[int] = set(active_partitions or ())
        self._loading: set[int] = set()
        self._running = True
        self._tasks: set[asyncio.Future[None]] = set()
        # TxnOffsetCommit: (group, producer id) -> offsets waiting for the transaction's marker
        self._txn_offsets: dict[tuple[str, int], dict[TopicPartition, OffsetAndMetadata]] = {}

    # --- GroupContext ------------------------------------------------------------------------

    def now_ms(self) -> int:
        return self._clock()

    def store_group(self, group: Group, assignment: Mapping[str, bytes],
                    callback: Callable[[int], None] | None) -> None:
        """Write the group's metadata record, then ``callback(error_code)``."""
        batch = self.offsets_log.group_metadata_batch(group.group_id, group.to_record(assignment), self.now_ms())

        def done(error: int) -> None:
            if error:
                log.warning("group %s: storing group metadata failed with error %d", group.group_id, error)
            if callback is not None:
                callback(_GROUP_STORE_ERRORS.get(error, error))

        self._append_then(self.partition_for(group.group_id), batch, done)

    # --- ownership ---------------------------------------------------------------------------

    def partition_for(self, group_id: str) -> int:
        """The ``__consumer_offsets`` partition (and so the coordinator) of a group."""
        return self.offsets_log.partition_for(group_id)

    def is_active(self, partition: int) -> bool:
        return partition not in self._loading and (self._all_active or partition in self._active)

    def _group_error(self, group_id: str | None, allow_empty: bool = False) -> int:
        """Kafka's validateGroupStatus. OffsetCommit/OffsetFetch/DescribeGroups/DeleteGroups
        accept the empty group id (for old clients); the membership APIs do not."""
        if group_id is None or (not group_id and not allow_empty):
            return INVALID_GROUP_ID
        if not self._running:
            return COORDINATOR_NOT_AVAILABLE
        partition = self.partition_for(group_id)
        if partition in self._loading:
            return COORDINATOR_LOAD_IN_PROGRESS
        if not (self._all_active or partition in self._active):
            return NOT_COORDINATOR
        return NONE

    def get_group(self, group_id: str) -> Group | None:
        return self._groups.get(group_id)

    # --- JoinGroup / SyncGroup / Heartbeat / LeaveGroup ----------------------------------------

    async def join_group(self, group_id: str, member_id: str, group_instance_id: str | None = None, *,
                         client_id: str, client_host: str, session_timeout_ms: int, rebalance_timeout_ms: int = -1,
                         protocol_type: str, protocols: Sequence[tuple[str, bytes]],
                         require_known_member_id: bool = True) -> JoinResult:
        """JoinGroup. Held until the join phase completes. ``require_known_member_id`` is
        ``version >= 4`` (ignored for static members); ``rebalance_timeout_ms`` -1 (v0) means the
        session timeout; ``client_host`` is shown as is by DescribeGroups (Kafka shows "/1.2.3.4")."""
        error = self._group_error(group_id)
        if error:
            return JoinResult(error, member_id)
        cfg = self.config
        if not cfg.group_min_session_timeout_ms <= session_timeout_ms <= cfg.group_max_session_timeout_ms:
            return JoinResult(INVALID_SESSION_TIMEOUT, member_id)
        if rebalance_timeout_ms < 0:
            rebalance_timeout_ms = session_timeout_ms
        group = self._groups.get(group_id)
        created = group is None
        if group is None:
            if member_id:
                return JoinResult(UNKNOWN_MEMBER_ID, member_id)
            group = self._groups[group_id] = Group(group_id, self)
        future: asyncio.Future[JoinResult] = asyncio.get_running_loop().create_future()
        group.join(future, member_id=member_id, group_instance_id=group_instance_id, client_id=client_id,
                   client_host=client_host, session_timeout_ms=session_timeout_ms,
                   rebalance_timeout_ms=rebalance_timeout_ms, protocol_type=protocol_type, protocols=protocols,
                   require_known_member_id=require_known_member_id)
        if created:
            self._forget_if_unused(group)
        return await future

    async def sync_group(self, group_id: str, generation_id: int, member_id: str,
                         group_instance_id: str | None = None, *, protocol_type: str | None = None,
                         protocol_name: str | None = None,
                         assignments: Mapping[str, bytes] | Iterable[tuple[str, bytes]] = ()) -> SyncResult:
        """SyncGroup. Held until the leader's assignment is stored. ``assignments`` (member id ->
        bytes) matters only from the leader; ``protocol_type``/``protocol_name`` are v5+ (None: not
        sent)."""
        error = self._group_error(group_id)
        if error == COORDINATOR_LOAD_IN_PROGRESS:
            # The rebalance state was lost with the coordinator move: make the member re-join.
            return SyncResult(REBALANCE_IN_PROGRESS)
        if error:
            return SyncResult(error)
        group = self._groups.get(group_id)
        if group is None:
            return SyncResult(UNKNOWN_MEMBER_ID)
        future: asyncio.Future[SyncResult] = asyncio.get_running_loop().create_future()
        group.sync(future, member_id=member_id, group_instance_id=group_instance_id, generation_id=generation_id,
                   protocol_type=protocol_type, protocol_name=protocol_name, assignments=dict(assignments))
        return await future

    def heartbeat(self, group_id: str, member_id: str, generation_id: int,
                  group_instance_id: str | None = None) -> int:
        """Heartbeat: NONE, or the code that tells the member what to do (27 = re-join)."""
        error = self._group_error(group_id)
        if error == COORDINATOR_LOAD_IN_PROGRESS:
            return NONE  # Kafka answers blindly while loading
        if error:
            return error
        group = self._groups.get(group_id)
        if group is None:
            return UNKNOWN_MEMBER_ID
        return group.heartbeat(member_id, group_instance_id, generation_id)

    def leave_group(self, group_id: str, members: Iterable[str | tuple[str, str | None]]) -> LeaveResult:
        """LeaveGroup for one member id (v0-2) or a batch of (member id, instance id) (v3+). An
        empty member id with an instance id removes that static member (admin removal)."""
        leaving = [(m, None) if isinstance(m, str) else (m[0], m[1]) for m in members]
        error = self._group_error(group_id)
        if error:
            return LeaveResult(error)
        group = self._groups.get(group_id)
        if group is None:
            return LeaveResult(NONE, tuple(LeaveMemberResult(mid, iid, UNKNOWN_MEMBER_ID) for mid, iid in leaving))
        if group.state is DEAD:
            return LeaveResult(COORDINATOR_NOT_AVAILABLE)
        return LeaveResult(NONE, tuple(LeaveMemberResult(mid, iid, group.leave(mid, iid)) for mid, iid in leaving))

    # --- offsets -------------------------------------------------------------------------------

    async def commit_offsets(self, group_id: str, member_id: str, generation_id: int,
                             group_instance_id: str | None,
                             offsets: Mapping[TopicPartition, OffsetCommitEntry],
                             retention_ms: int = -1) -> dict[TopicPartition, int]:
        """OffsetCommit. ``offsets`` maps (topic, partition) to (offset, leader_epoch, metadata)
        or, for v1, (offset, leader_epoch, metadata, commit_timestamp_ms) where -1 is "now".
        leader_epoch -1 = unknown, metadata None = "". ``retention_ms`` is v2-4's RetentionTimeMs
        (-1 = broker default); any other value is stored as an expire timestamp (value v1).
        Generation -1 with an empty member id is a "simple" commit, allowed while the group is
        Empty or unknown. Returns a code per partition, in the order given."""
        partitions = list(offsets)
        error = self._group_error(group_id, allow_empty=True)
        if error:
            return dict.fromkeys(partitions, error)
        group = self._groups.get(group_id)
        created = None
        if group is None:
            if generation_id >= 0:
                return dict.fromkeys(partitions, ILLEGAL_GENERATION)  # a member of a generation we never saw
            group = created = Group(group_id, self)
        error = group.validate_offset_commit(member_id, group_instance_id, generation_id)
        if error:
            return dict.fromkeys(partitions, error)
        if created is not None:
            self._groups[group_id] = created
        member = group.members.get(member_id)
        if member is not None and group.state in (STABLE, PREPARING_REBALANCE):
            group.schedule_session(member)  # a commit is as good as a heartbeat
        return await self._store_offsets(group, offsets, retention_ms)

    async def _store_offsets(self, group: Group, offsets: Mapping[TopicPartition, OffsetCommitEntry],
                             retention_ms: int) -> dict[TopicPartition, int]:
        now = self.now_ms()
        results: dict[TopicPartition, int] = {}
        accepted: dict[TopicPartition, OffsetAndMetadata] = {}
        for tp, entry in offsets.items():
            offset, leader_epoch, metadata = entry[0], entry[1], entry[2]
            commit_ts = entry[3] if len(entry) > 3 and entry[3] is not None and entry[3] != -1 else now
            metadata = metadata if metadata is not None else ""
            if _java_length(metadata) > self.config.offset_metadata_max_bytes:
                results[tp] = OFFSET_METADATA_TOO_LARGE
                continue
            accepted[tp] = OffsetAndMetadata(
                offset, leader_epoch if leader_epoch is not None and leader_epoch >= 0 else -1, metadata, commit_ts,
                now + retention_ms if retention_ms != -1 else None)
        if accepted:
            batch = self.offsets_log.offset_commit_batch(group.group_id, accepted, now)
            group.pending_offset_commits.update(accepted.keys())
            try:
                error = await self._append(self.partition_for(group.group_id), batch)
            finally:
                group.pending_offset_commits.subtract(accepted.keys())
                for tp in accepted:
                    if group.pending_offset_commits[tp] <= 0:
                        del group.pending_offset_commits[tp]
            if error == NONE and group.state is not DEAD:
                group.offsets.update(accepted)
            error = _OFFSET_STORE_ERRORS.get(error, error)
            for tp in accepted:
                results[tp] = error
        return {tp: results[tp] for tp in offsets}

    async def txn_commit_offsets(self, group_id: str, producer_id: int, producer_epoch: int,
                                 offsets: Mapping[TopicPartition, OffsetCommitEntry], member_id: str = "",
                                 group_instance_id: str | None = None,
                                 generation_id: int = -1) -> dict[TopicPartition, int]:
        """TxnOffsetCommit: write the offsets as a transactional batch of the producer; they count
        once the transaction's COMMIT marker reaches the group's partition (``complete_txn_offsets``,
        or the replay at load); an ABORT drops them. Meanwhile OffsetFetch with require_stable
        answers UNSTABLE_OFFSET_COMMIT for them. v3 (KIP-447) names the consumer's member and
        generation: as Kafka's doTxnCommitOffsets, a member id that is set must be in the group and a
        generation that is set must be the group's, so a zombie of an old generation is fenced."""
        error = self._group_error(group_id, allow_empty=True)
        if error:
            return dict.fromkeys(offsets, error)
        group = self._groups.get(group_id)
        if group is not None and group.state is DEAD:
            return dict.fromkeys(offsets, COORDINATOR_NOT_AVAILABLE)
        if group is not None and group.is_static_member_fenced(member_id, group_instance_id):
            return dict.fromkeys(offsets, FENCED_INSTANCE_ID)
        if member_id and (group is None or member_id not in group.members):
            return dict.fromkeys(offsets, UNKNOWN_MEMBER_ID)
        if generation_id >= 0 and generation_id != (group.generation_id if group is not None else 0):
            return dict.fromkeys(offsets, ILLEGAL_GENERATION)
        now = self.now_ms()
        values = {tp: OffsetAndMetadata(e[0], e[1] if e[1] is not None and e[1] >= 0 else -1,
                                        e[2] if e[2] is not None else "", now, None)
                  for tp, e in offsets.items()}
        batch = self.offsets_log.offset_commit_batch(group_id, values, now, producer_id, producer_epoch)
        error = await self._append(self.partition_for(group_id), batch)
        if error:
            return dict.fromkeys(offsets, _OFFSET_STORE_ERRORS.get(error, error))
        self._stage_txn_offsets(group_id, producer_id, values)
        return dict.fromkeys(offsets, NONE)

    def _stage_txn_offsets(self, group_id: str, producer_id: int,
                           values: Mapping[TopicPartition, OffsetAndMetadata]) -> None:
        self._txn_offsets.setdefault((group_id, producer_id), {}).update(values)
        group = self._groups.get(group_id)
        if group is None:
            group = self._groups[group_id] = Group(group_id, self)
        group.pending_offset_commits.update(values.keys())

    async def complete_txn_offsets(self, producer_id: int, commit: bool, partition: int) -> None:
        """The marker of ``producer_id``'s transaction is in ``__consumer_offsets-<partition>``:
        its staged offsets become the group's (they are in the log already) or are dropped."""
        for key in [k for k in self._txn_offsets if k[1] == producer_id and self.partition_for(k[0]) == partition]:
            values = self._txn_offsets.pop(key)
            group = self._groups.get(key[0])
            if group is None:
                continue
            group.pending_offset_commits.subtract(values.keys())
            for tp in values:
                if group.pending_offset_commits[tp] <= 0:
                    del group.pending_offset_commits[tp]
            if commit and group.state is not DEAD:
                group.offsets.update(values)

    def fetch_offsets(self, group_id: str, partitions: Iterable[TopicPartition] | None = None,
                      require_stable: bool = False) -> dict[TopicPartition, OffsetFetchEntry]:
        """OffsetFetch: (offset, leader_epoch, metadata, error) per partition; ``partitions`` None
        means every partition the group has an offset for. A partition without an offset gets
        (-1, -1, "", NONE). Group-level errors (INVALID_GROUP_ID, NOT_COORDINATOR,
        COORDINATOR_LOAD_IN_PROGRESS, ...) raise the matching ``KafkaError``."""
        error = self._group_error(group_id, allow_empty=True)
        if error:
            raise errors.for_code(error)(f"group {group_id!r}")
        group = self._groups.get(group_id)
        if group is None or group.state is DEAD:
            return {tp: NO_OFFSET for tp in partitions or ()}
        wanted = list(partitions) if partitions is not None else list(group.offsets)
        out: dict[TopicPartition, OffsetFetchEntry] = {}
        for tp in wanted:
            if require_stable and group.pending_offset_commits.get(tp):
                out[tp] = (-1, -1, "", UNSTABLE_OFFSET_COMMIT)
                continue
            value = group.offsets.get(tp)
            out[tp] = NO_OFFSET if value is None else (value.offset, value.leader_epoch, value.metadata, NONE)
        return out

    # --- admin ---------------------------------------------------------------------------------

    def describe_group(self, group_id: str) -> GroupDescription:
        """DescribeGroups for one group. An unknown group is reported Dead with NONE, as Kafka does."""
        error = self._group_error(group_id, allow_empty=True)
        if error:
            return GroupDescription(error, group_id, "")
        group = self._groups.get(group_id)
        if group is None:
            return GroupDescription(NONE, group_id, DEAD.value)
        return group.describe()

    def list_groups(self, states_filter: Iterable[str] | None = None) -> tuple[int, list[GroupOverview]]:
        """ListGroups: (error, groups). ``states_filter`` (v4+) matches state names case-insensitively;
        empty or None lists every group. The error is COORDINATOR_LOAD_IN_PROGRESS while any
        partition is loading (the groups known so far are still returned)."""
        if not self._running:
            return COORDINATOR_NOT_AVAILABLE, []
        wanted = {s.lower() for s in states_filter} if states_filter else None
        groups = [g.overview() for g in self._groups.values()
                  if g.state is not DEAD and (wanted is None or g.state.value.lower() in wanted)]
        return (COORDINATOR_LOAD_IN_PROGRESS if self._loading else NONE), groups

    async def delete_groups(self, group_ids: Iterable[str]) -> dict[str, int]:
        """DeleteGroups: only Empty groups go (NON_EMPTY_GROUP otherwise, GROUP_ID_NOT_FOUND if
        unknown). Their offsets and metadata are removed with tombstones."""
        ids = list(group_ids)
        if not self._running:
            return dict.fromkeys(ids, COORDINATOR_NOT_AVAILABLE)
        results: dict[str, int] = {}
        doomed: list[Group] = []
        for group_id in ids:
            error = self._group_error(group_id, allow_empty=True)
            group = self._groups.get(group_id)
            if error:
                results[group_id] = error
            elif group is None or group.state is DEAD:
                results[group_id] = GROUP_ID_NOT_FOUND
            elif group.state is not EMPTY:
                results[group_id] = NON_EMPTY_GROUP
            else:
                group.shutdown(NOT_COORDINATOR)
                del self._groups[group_id]
                doomed.append(group)
                results[group_id] = NONE
        for group in doomed:
            await self._write_tombstones(group, list(group.offsets), group.generation_id > 0)
            log.info("group %s deleted (%d offsets)", group.group_id, len(group.offsets))
            group.offsets.clear()
        return results

    async def delete_offsets(self, group_id: str,
                             partitions: Iterable[TopicPartition]) -> tuple[int, dict[TopicPartition, int]]:
        """OffsetDelete (Kafka's handleDeleteOffsets): (group error, {tp: code}). An Empty group
        loses the offsets asked for; a consumer group with members keeps those of topics its
        members subscribe to (GROUP_SUBSCRIBED_TO_TOPIC) and loses the rest; any other group with
        members is NON_EMPTY_GROUP. A group left Empty with no offsets is removed, as Kafka does."""
        wanted = list(dict.fromkeys(partitions))
        error = self._group_error(group_id)
        if error:
            return error, {}
        group = self._groups.get(group_id)
        if group is None or group.state is DEAD:
            return GROUP_ID_NOT_FOUND, {}
        results: dict[TopicPartition, int] = {}
        if group.state is EMPTY:
            doomed = wanted
        elif group.protocol_type == CONSUMER_PROTOCOL_TYPE:
            subscribed = group.subscribed_topics() or set()
            doomed = [tp for tp in wanted if tp[0] not in subscribed]
            results = {tp: GROUP_SUBSCRIBED_TO_TOPIC for tp in wanted if tp[0] in subscribed}
        else:
            return NON_EMPTY_GROUP, {}
        removed = [tp for tp in doomed if tp in group.offsets]
        for tp in doomed:
            group.offsets.pop(tp, None)
            group.pending_offset_commits.pop(tp, None)
        for (gid, _pid), staged in self._txn_offsets.items():
            if gid == group_id:
                for tp in doomed:
                    staged.pop(tp, None)
        drop = group.state is EMPTY and not group.offsets and not group.pending_members
        if drop:
            group.shutdown(NOT_COORDINATOR)
            del self._groups[group_id]
            log.info("group %s has no offsets left after OffsetDelete: removed", group_id)
        if removed or (drop and group.generation_id > 0):
            await self._write_tombstones(group, removed, drop and group.generation_id > 0)
        results.update(dict.fromkeys(doomed, NONE))
        return NONE, {tp: results[tp] for tp in wanted}

    async def cleanup_expired_offsets(self, now_ms: int | None = None) -> int:
        """Expire offsets past ``offsets.retention.minutes`` and drop Empty groups left without
        offsets (Kafka's periodic cleanup; the broker calls this every
        ``offsets.retention.check.interval.ms``). Returns how many offsets were removed."""
        now = self.now_ms() if now_ms is None else now_ms
        removed = 0
        for group in list(self._groups.values()):
            expired = self._expired_offsets(group, now)
            for tp in expired:
                del group.offsets[tp]
            removed += len(expired)
            drop = group.state is EMPTY and not group.offsets and not group.pending_members
            if drop:
                group.shutdown(NOT_COORDINATOR)
                del self._groups[group.group_id]
                log.info("group %s is empty and has no offsets left: removed", group.group_id)
            if expired or (drop and group.generation_id > 0):
                await self._write_tombstones(group, expired, drop and group.generation_id > 0)
        return removed

    def _expired_offsets(self, group: Group, now: int) -> list[TopicPartition]:
        retention = self.config.offsets_retention_ms

        def older_than_retention(base: Callable[[OffsetAndMetadata], int],
                                 keep_topics: set[str]) -> list[TopicPartition]:
            return [tp for tp, value in group.offsets.items()
                    if tp[0] not in keep_topics and not group.pending_offset_commits.get(tp)
                    and (now >= value.expire_timestamp_ms if value.expire_timestamp_ms is not None
                         else now - base(value) >= retention)]

        if group.protocol_type is not None and group.state is EMPTY:
            # Nobody is consuming: offsets expire a retention period after the group emptied.
            emptied = group.state_timestamp_ms
            return older_than_retention(lambda v: emptied if emptied is not None else v.commit_timestamp_ms, set())
        if group.protocol_type == CONSUMER_PROTOCOL_TYPE:
            topics = group.subscribed_topics()
            if topics is None:
                return []
            return older_than_retention(lambda v: v.commit_timestamp_ms, topics)
        if group.protocol_type is None:
            return older_than_retention(lambda v: v.commit_timestamp_ms, set())  # offsets-only group
        return []

    async def _write_tombstones(self, group: Group, partitions: list[TopicPartition], with_group: bool) -> None:
        batch = self.offsets_log.tombstone_batch(group.group_id, partitions, with_group, self.now_ms())
        if batch is not None:
            error = await self._append(self.partition_for(group.group_id), batch)
            if error:
                log.warning("group %s: writing tombstones failed with error %d", group.group_id, error)

    # --- partition loading --------------------------------------------------------------------

    def begin_loading(self, partition: int) -> None:
        """This broker became leader of ``partition``: its groups answer
        COORDINATOR_LOAD_IN_PROGRESS until ``load_partition`` has run."""
        self._drop_groups(partition)
        self._loading.add(partition)

    def load_partition(self, partition: int, batches: Iterable[bytes | bytearray | memoryview]) -> int:
        """Rebuild the groups of ``partition`` from what its log holds and start serving them.
        Groups with stored members come back Stable with their generation, leader and
        assignments, and must heartbeat within their session timeout. Returns the number of
        groups loaded. A corrupt batch raises ValueError and leaves the partition unserved."""
        self._drop_groups(partition)
        self._loading.add(partition)
        loaded = self.offsets_log.load_partition(partition, batches)
        count = 0
        for group_id, record in loaded.groups.items():
            group = Group.from_record(group_id, record, self, loaded.offsets.pop(group_id, {}))
            self._groups[group_id] = group
            for member in group.members.values():
                group.schedule_session(member)
            count += 1
        for group_id, offsets in loaded.offsets.items():
            group = Group(group_id, self, offsets)
            self._groups[group_id] = group
            count += 1
        for (group_id, producer_id), values in loaded.pending.items():  # their markers come later
            self._stage_txn_offsets(group_id, producer_id, values)
        self._loading.discard(partition)
        if not self._all_active:
            self._active.add(partition)
        log.info("__consumer_offsets-%d loaded: %d groups", partition, count)
        return count

    def unload_partition(self, partition: int) -> None:
        """Leadership of ``partition`` moved away: forget its groups (held requests are answered
        NOT_COORDINATOR so the clients look the coordinator up again)."""
        self._drop_groups(partition)
        self._loading.discard(partition)
        if self._all_active:
            self._all_active = False
            self._active = set(range(self.offsets_log.num_partitions))
        self._active.discard(partition)

    def _drop_groups(self, partition: int) -> None:
        for group_id, group in list(self._groups.items()):
            if self.partition_for(group_id) == partition:
                group.shutdown(NOT_COORDINATOR)
                del self._groups[group_id]

    def shutdown(self) -> None:
        """Stop serving: held requests get NOT_COORDINATOR, later ones COORDINATOR_NOT_AVAILABLE."""
        self._running = False
        for group in self._groups.values():
            if group.state is not DEAD:
                group.shutdown(NOT_COORDINATOR)
        self._groups.clear()
        for task in list(self._tasks):
            task.cancel()

    # --- helpers -------------------------------------------------------------------------------

    def _forget_if_unused(self, group: Group) -> None:
        """A JoinGroup that failed on a group it created leaves nothing worth keeping."""
        if (group.state is EMPTY and group.generation_id == 0 and not group.members and not group.pending_members
                and not group.offsets and self._groups.get(group.group_id) is group):
            del self._groups[group.group_id]

    @staticmethod
    def _error_of(exc: BaseException) -> int:
        if isinstance(exc, errors.KafkaError):
            return exc.code
        log.error("unexpected error writing __consumer_offsets", exc_info=exc)
        return UNKNOWN_SERVER_ERROR

    async def _append(self, partition: int, batch: bytearray) -> int:
        try:
            result = self.offsets_log.append(partition, batch)
            if is_awaitable(result):
                await result
        except Exception as exc:  # noqa: BLE001 - becomes an error code
            return self._error_of(exc)
        return NONE

    def _append_then(self, partition: int, batch: bytearray, done: Callable[[int], None]) -> None:
        """Write from synchronous code: ``done(code)`` runs at once for a synchronous append, or
        when an awaitable append finishes."""
        try:
            result = self.offsets_log.append(partition, batch)
        except Exception as exc:  # noqa: BLE001 - becomes an error code
            done(self._error_of(exc))
            return
        if not is_awaitable(result):
            done(NONE)
            return

        async def finish(pending: Awaitable[object]) -> None:
            try:
                await pending
            except Exception as exc:  # noqa: BLE001 - becomes an error code
                done(self._error_of(exc))
                return
            done(NONE)

        task = asyncio.ensure_future(finish(result))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


