"""One consumer group under the classic protocol: its members and its state machine.

States, as DescribeGroups and ListGroups spell them::

    Empty ──join──▶ PreparingRebalance ──all joined / timeout──▶ CompletingRebalance
      ▲                 ▲        │                                   │ leader's SyncGroup
      │                 │        └─ nobody left ─▶ Empty             ▼
      │                 └──── join / leave / expiry ──────────── Stable
      └── Dead (deleted, expired, or the coordinator moved) from any state

A JoinGroup is held until every known member has re-joined or the rebalance timeout passes
(a fresh Empty group first waits ``group.initial.rebalance.delay.ms``, again while new members
keep arriving, up to the rebalance timeout). Completing the join bumps the generation, picks the
protocol by vote, answers every waiting member (the leader, the first member, gets everyone's
metadata), and moves to CompletingRebalance. A SyncGroup is held until the leader's arrives with
the assignment; once it is stored, every waiting member gets its own bytes and the group is
Stable. A member that sends no heartbeat for its session timeout is removed, which starts a
rebalance; members held in a join or sync count as alive.

Static members (KIP-345, ``group.instance.id``) keep their place across restarts: a join with an
empty member id and a known instance id takes over the old member under a new member id without
a rebalance when the group is Stable (and the chosen protocol would not change), and the old
member id is answered FENCED_INSTANCE_ID from then on.

Held requests are asyncio futures that this module completes; it never awaits. Time comes from
the context's clock and timer, so tests move it by hand. The request-level checks (group id,
coordinator ownership, session timeout bounds) are the coordinator's; this module starts once the
group object exists.

One module: ``Group``'s state machine and its ``Member`` records change together on every transition (a
member joins, syncs, leaves or expires only through the group's methods), and the result types are what those
methods answer; apart, the transitions' internals would be another module's business.
"""
from __future__ import annotations

import asyncio
import dataclasses
import enum
import logging
import uuid
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from kbroker import errors
from kbroker.config.broker import BrokerConfig, load_config
from kbroker.coordinator.group.offsets_log import (
    GroupMetadataRecord,
    MemberIdentity,
    MemberRecord,
    OffsetAndMetadata,
)
from kbroker.log.names import TopicPartition
from kbroker.timers import Timer

log = logging.getLogger(__name__)

NONE = 0
COORDINATOR_NOT_AVAILABLE = errors.CoordinatorNotAvailableError.code  # 15
ILLEGAL_GENERATION = errors.IllegalGenerationError.code  # 22
INCONSISTENT_GROUP_PROTOCOL = errors.InconsistentGroupProtocolError.code  # 23
UNKNOWN_MEMBER_ID = errors.UnknownMemberIdError.code  # 25
REBALANCE_IN_PROGRESS = errors.RebalanceInProgressError.code  # 27
MEMBER_ID_REQUIRED = errors.MemberIdRequiredError.code  # 79
GROUP_MAX_SIZE_REACHED = errors.GroupMaxSizeReachedError.code  # 81
FENCED_INSTANCE_ID = errors.FencedInstanceIdError.code  # 82

CONSUMER_PROTOCOL_TYPE = "consumer"


class GroupState(str, enum.Enum):  # noqa: UP042  (str() must stay the member name; StrEnum changes it)
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"

    def __str__(self) -> str:
        return self.value


EMPTY = GroupState.EMPTY
PREPARING_REBALANCE = GroupState.PREPARING_REBALANCE
COMPLETING_REBALANCE = GroupState.COMPLETING_REBALANCE
STABLE = GroupState.STABLE
DEAD = GroupState.DEAD

# The states each state may be entered from (Kafka's GroupState.validPreviousStates).
_VALID_PREVIOUS: dict[GroupState, frozenset[GroupState]] = {
    EMPTY: frozenset({PREPARING_REBALANCE}),
    PREPARING_REBALANCE: frozenset({EMPTY, STABLE, COMPLETING_REBALANCE}),
    COMPLETING_REBALANCE: frozenset({PREPARING_REBALANCE}),
    STABLE: frozenset({COMPLETING_REBALANCE}),
    DEAD: frozenset(GroupState),
}


_DEFAULTS = load_config()  # the config registry's values, which are Kafka's defaults


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """The broker settings the coordinator reads. Defaults come from the config registry, where
    Kafka's defaults are written down once."""
    group_min_session_timeout_ms: int = _DEFAULTS.group_min_session_timeout_ms
    group_max_session_timeout_ms: int = _DEFAULTS.group_max_session_timeout_ms
    group_initial_rebalance_delay_ms: int = _DEFAULTS.group_initial_rebalance_delay_ms
    group_max_size: int = _DEFAULTS.group_max_size
    offset_metadata_max_bytes: int = 4096  # Kafka's default; not a registry key (yet)
    offsets_retention_ms: int = _DEFAULTS.offsets_retention_minutes * 60_000
    offsets_topic_num_partitions: int = _DEFAULTS.offsets_topic_num_partitions
    # Kafka's GroupCoordinator.NewMemberJoinTimeoutMs: how long a brand-new member's JoinGroup may
    # be held before the member is dropped (it cannot heartbeat yet, so the session cannot tell).
    new_member_join_timeout_ms: int = 300000

    @classmethod
    def from_broker_config(cls, cfg: BrokerConfig) -> GroupConfig:
        """Pick the group settings out of a ``BrokerConfig`` (attributes it lacks keep the
        defaults); ``offsets.retention.minutes`` becomes ``offsets_retention_ms``."""
        values = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cls) if hasattr(cfg, f.name)}
        minutes = getattr(cfg, "offsets_retention_minutes", None)
        if minutes is not None:
            values["offsets_retention_ms"] = minutes * 60_000
        return cls(**values)


# --- results handed back to request handlers --------------------------------------------------

@dataclass(frozen=True, slots=True)
class GroupResult:
    """What every answer of a group starts with: Kafka's error code (NONE, 0, on success)."""
    error: int


@dataclass(frozen=True, slots=True)
class JoinMember(MemberIdentity):
    """One entry of the leader's JoinGroup ``Members``: metadata for the chosen protocol."""
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinResult(GroupResult):
    member_id: str
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    members: tuple[JoinMember, ...] = ()
    skip_assignment: bool = False


@dataclass(frozen=True, slots=True)
class SyncResult(GroupResult):
    assignment: bytes = b""
    protocol_type: str | None = None
    protocol_name: str | None = None


@dataclass(frozen=True, slots=True)
class LeaveMemberResult(MemberIdentity):
    error: int


@dataclass(frozen=True, slots=True)
class LeaveResult(GroupResult):
    """``error`` is the top-level code; ``members`` the per-member codes (LeaveGroup v3+)."""
    members: tuple[LeaveMemberResult, ...] = ()

    @property
    def legacy_error(self) -> int:
        """The single code LeaveGroup v0-2 carries: the top-level one, else the member's."""
        if self.error:
            return self.error
        return next((m.error for m in self.members if m.error), NONE)


@dataclass(frozen=True, slots=True)
class MemberDescription(MemberIdentity):
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupDescription(GroupResult):
    """DescribeGroups for one group. ``protocol_name`` is DescribeGroups' ``ProtocolData``; member
    metadata and assignment are filled only when the group is Stable, as Kafka does."""
    group_id: str
    state: str
    protocol_type: str = ""
    protocol_name: str = ""
    members: tuple[MemberDescription, ...] = ()


@dataclass(frozen=True, slots=True)
class GroupOverview:
    group_id: str
    protocol_type: str
    state: str


# --- what a group needs from its coordinator --------------------------------------------------

class GroupContext(Protocol):
    config: GroupConfig
    timer: Timer

    def now_ms(self) -> int: ...

    def store_group(self, group: Group, assignment: Mapping[str, bytes],
                    callback: Callable[[int], None] | None) -> None:
        """Write the group's metadata record; call ``callback(error_code)`` once it is stored (at
        once when the write is synchronous)."""


class Member:
    """One member of a group (Kafka's MemberMetadata)."""

    __slots__ = ("member_id", "group_instance_id", "client_id", "client_host", "rebalance_timeout_ms",
                 "session_timeout_ms", "protocol_type", "protocols", "assignment", "join_future",
                 "sync_future", "is_new", "session_handle")

    def __init__(self, member_id: str, group_instance_id: str | None, client_id: str, client_host: str,
                 rebalance_timeout_ms: int, session_timeout_ms: int, protocol_type: str,
                 protocols: Sequence[tuple[str, bytes]]) -> None:
        self.member_id = member_id
        self.group_instance_id = group_instance_id
        self.client_id = client_id
        self.client_host = client_host
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.session_timeout_ms = session_timeout_ms
        self.protocol_type = protocol_type
        self.protocols: list[tuple[str, bytes]] = [(name, bytes(meta)) for name, meta in protocols]
        self.assignment = b""
        self.join_future: asyncio.Future[JoinResult] | None = None
        self.sync_future: asyncio.Future[SyncResult] | None = None
        self.is_new = False
        self.session_handle: Any = None

    @property
    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    def metadata(self, protocol: str) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        raise KeyError(f"member {self.member_id} does not support protocol {protocol}")

    def matches(self, protocols: Sequence[tuple[str, bytes]]) -> bool:
        """Same protocols with the same metadata in the same order."""
        return len(protocols) == len(self.protocols) and all(
            name == n and bytes(meta) == m for (name, meta), (n, m) in zip(protocols, self.protocols))

    def vote(self, candidates: set[str]) -> str:
        """The member's most preferred protocol among ``candidates``."""
        return next(name for name in self.protocol_names if name in candidates)

    def copy_as(self, member_id: str) -> Member:
        other = Member(member_id, self.group_instance_id, self.client_id, self.client_host,
                       self.rebalance_timeout_ms, self.session_timeout_ms, self.protocol_type, self.protocols)
        other.assignment = self.assignment
        return other

    def __repr__(self) -> str:
        return f"Member({self.member_id!r}, instance={self.group_instance_id!r})"


T = TypeVar("T")


def _resolve(future: asyncio.Future[T] | None, result: T) -> None:
    if future is not None and not future.done():
        future.set_result(result)


class Group:
    """A classic consumer group (Kafka's GroupMetadata plus the membership half of its
    GroupCoordinator). All methods run on the event loop thread and never await."""

    def __init__(self, group_id: str, ctx: GroupContext,
                 offsets: dict[TopicPartition, OffsetAndMetadata] | None = None) -> None:
        self.group_id = group_id
        self.ctx = ctx
        self.state = EMPTY
        self.state_timestamp_ms: int | None = None
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.generation_id = 0
        self.leader_id: str | None = None
        self.members: dict[str, Member] = {}
        self.static_members: dict[str, str] = {}  # group.instance.id -> member id
        self.pending_members: dict[str, Any] = {}  # member id handed out with MEMBER_ID_REQUIRED -> timer
        self.new_member_added = False
        self.offsets: dict[TopicPartition, OffsetAndMetadata] = offsets if offsets is not None else {}
        self.pending_offset_commits: Counter[TopicPartition] = Counter()
        self._join_handle: Any = None
        self._join_token = 0
        self._initial_delay: tuple[int, int] | None = None  # (delay_ms, remaining_ms) while initial

    # --- small queries ---------------------------------------------------------------------

    def __repr__(self) -> str:
        return f"Group({self.group_id!r}, {self.state.value}, generation={self.generation_id})"

    @property
    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def has_all_members_joined(self) -> bool:
        return not self.pending_members and all(m.join_future is not None for m in self.members.values())

    def _named_member(self, member_id: str, group_instance_id: str | None) -> tuple[int, Member | None]:
        """The member a request names, or (its error, None): FENCED_INSTANCE_ID when the instance
        id now belongs to another member id, UNKNOWN_MEMBER_ID when there is no such member."""
        if self.is_static_member_fenced(member_id, group_instance_id):
            return FENCED_INSTANCE_ID, None
        member = self.members.get(member_id)
        return (NONE, member) if member is not None else (UNKNOWN_MEMBER_ID, None)

    def is_static_member_fenced(self, member_id: str, group_instance_id: str | None) -> bool:
        """A request naming an instance id whose current member id is another one."""
        if group_instance_id is None:
            return False
        current = self.static_members.get(group_instance_id)
        return current is not None and current != member_id

    def transition_to(self, state: GroupState) -> None:
        if self.state not in _VALID_PREVIOUS[state]:
            raise RuntimeError(f"group {self.group_id}: illegal transition {self.state.value} -> {state.value}")
        self.state = state
        self.state_timestamp_ms = self.ctx.now_ms()

    def supports_protocols(self, protocol_type: str, names: Sequence[str], member: Member | None = None) -> bool:
        """Whether a (re)joining member fits: same protocol type, and one of its protocols is
        supported by every other member. ``member`` is the member's current entry if it is
        rejoining, so that its own old protocols do not count against it."""
        if not self.members:
            return bool(protocol_type) and bool(names)
        if protocol_type != self.protocol_type or not names:
            return False
        others = [m for m in self.members.values() if m is not member]
        return any(all(name in m.protocol_names for m in others) for name in names)

    def select_protocol(self) -> str:
        """The protocol every member supports that most members rank first among those
        (ties go to the protocol whose first vote came earliest in member order)."""
        if not self.members:
            raise RuntimeError(f"group {self.group_id}: cannot select a protocol without members")
        members = list(self.members.values())
        candidates = set(members[0].protocol_names)
        for m in members[1:]:
            candidates.intersection_update(m.protocol_names)
        if not candidates:
            raise RuntimeError(f"group {self.group_id}: members share no protocol")
        votes = Counter(m.vote(candidates) for m in members)
        best = max(votes.values())
        return next(name for name in votes if votes[name] == best)

    def current_member_metadata(self) -> tuple[JoinMember, ...]:
        assert self.protocol_name is not None
        return tuple(JoinMember(m.member_id, m.group_instance_id, m.metadata(self.protocol_name))
                     for m in self.members.values())

    # --- membership primitives ---------------------------------------------------------------

    def _add(self, member: Member, future: asyncio.Future[JoinResult] | None) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        member.join_future = future
        handle = self.pending_members.pop(member.member_id, None)
        if handle is not None:
            self.ctx.timer.cancel(handle)

    def _remove(self, member: Member) -> None:
        """Drop a member from the tables (no callbacks, no rebalance: see ``remove_member``)."""
        self.members.pop(member.member_id, None)
        instance_id = member.group_instance_id
        if instance_id is not None and self.static_members.get(instance_id) == member.member_id:
            del self.static_members[instance_id]
        self._cancel_session(member)
        if self.leader_id == member.member_id:
            self.leader_id = next(iter(self.members), None)

    def _update_member(self, member: Member, protocols: Sequence[tuple[str, bytes]], rebalance_timeout_ms: int,
                       session_timeout_ms: int, future: asyncio.Future[JoinResult] | None) -> None:
        member.protocols = [(name, bytes(meta)) for name, meta in protocols]
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        if member.join_future is not None and member.join_future is not future:
            # The same member joined again while its previous JoinGroup was held (a client retry
            # after a request timeout). Kafka drops the older request on the floor; we answer it so
            # no handler waits forever.
            _resolve(member.join_future, JoinResult(REBALANCE_IN_PROGRESS, member.member_id))
        member.join_future = future

    def _replace_static_member(self, instance_id: str, old_id: str, new_id: str) -> Member:
        """Move a static member to a new member id, fencing the old id's outstanding requests."""
        old = self.members[old_id]
        if old.join_future is not None:
            _resolve(old.join_future, JoinResult(FENCED_INSTANCE_ID, old_id))
            old.join_future = None
        if old.sync_future is not None:
            _resolve(old.sync_future, SyncResult(FENCED_INSTANCE_ID))
            old.sync_future = None
        self._cancel_session(old)
        new = old.copy_as(new_id)
        self.members = {(new_id if mid == old_id else mid): (new if mid == old_id else m)
                        for mid, m in self.members.items()}
        if self.leader_id == old_id:
            self.leader_id = new_id
        self.static_members[instance_id] = new_id
        return new

    def _complete_join(self, member: Member, result: JoinResult) -> None:
        future, member.join_future = member.join_future, None
        _resolve(future, result)

    def _complete_sync(self, member: Member, result: SyncResult) -> None:
        future, member.sync_future = member.sync_future, None
        _resolve(future, result)

    # --- session timers ----------------------------------------------------------------------

    def _cancel_session(self, member: Member) -> None:
        if member.session_handle is not None:
            self.ctx.timer.cancel(member.session_handle)
            member.session_handle = None

    def schedule_session(self, member: Member, timeout_ms: int | None = None) -> None:
        """Restart the member's liveness deadline (Kafka's completeAndScheduleNextExpiration)."""
        self._cancel_session(member)
        deadline = self.ctx.now_ms() + (member.session_timeout_ms if timeout_ms is None else timeout_ms)
        member.session_handle = self.ctx.timer.add(deadline, lambda: self._on_session_expired(member))

    def _on_session_expired(self, member: Member) -> None:
        if self.members.get(member.member_id) is not member or self.state is DEAD:
            return
        member.session_handle = None
        if not member.is_new and (member.join_future is not None or member.sync_future is not None):
            return  # held in a join or sync: alive; the next completion re-arms the deadline
        log.info("group %s: member %s failed to heartbeat within %d ms; removing it",
                 self.group_id, member.member_id, member.session_timeout_ms)
        self.remove_member(member, "session timeout")

    def _on_pending_expired(self, member_id: str) -> None:
        if self.pending_members.pop(member_id, None) is None:
            return
        log.info("group %s: pending member %s never re-joined; dropping it", self.group_id, member_id)
        if self.state is PREPARING_REBALANCE:
            self.try_complete_join()

    # --- rebalance ---------------------------------------------------------------------------

    def maybe_prepare_rebalance(self, reason: str) -> None:
        if self.state in (STABLE, COMPLETING_REBALANCE, EMPTY):
            self.prepare_rebalance(reason)

    def prepare_rebalance(self, reason: str) -> None:
        if self.state is COMPLETING_REBALANCE:
            self._reset_and_propagate_assignment_error(REBALANCE_IN_PROGRESS)
        delay_ms = self.ctx.config.group_initial_rebalance_delay_ms
        if self.state is EMPTY and delay_ms > 0:
            remaining = max(self.rebalance_timeout_ms - delay_ms, 0)
            self.transition_to(PREPARING_REBALANCE)
            self._arm_join(delay_ms, (delay_ms, remaining))
        else:
            self.transition_to(PREPARING_REBALANCE)
            self._arm_join(self.rebalance_timeout_ms, None)
        log.info("group %s: preparing to rebalance (generation %d): %s", self.group_id, self.generation_id, reason)
        self.try_complete_join()

    def _arm_join(self, delay_ms: int, initial: tuple[int, int] | None) -> None:
        self._cancel_join_timer()
        self._initial_delay = initial
        self._join_token += 1
        token = self._join_token
        self._join_handle = self.ctx.timer.add(self.ctx.now_ms() + delay_ms, lambda: self._on_join_deadline(token))

    def _cancel_join_timer(self) -> None:
        if self._join_handle is not None:
            self.ctx.timer.cancel(self._join_handle)
            self._join_handle = None
        self._join_token += 1

    def _on_join_deadline(self, token: int) -> None:
        if token != self._join_token or self.state is not PREPARING_REBALANCE:
            return
        self._join_handle = None
        if self._initial_delay is not None:
            delay_ms, remaining_ms = self._initial_delay
            if self.new_member_added and remaining_ms != 0:
                # Members are still arriving at a fresh group: wait another delay, within the
                # rebalance timeout (Kafka's InitialDelayedJoin).
                self.new_member_added = False
                next_delay = min(self.ctx.config.group_initial_rebalance_delay_ms, remaining_ms)
                self._arm_join(next_delay, (next_delay, max(remaining_ms - delay_ms, 0)))
                return
        self.complete_join()

    def try_complete_join(self) -> None:
        """Finish the join phase now if nobody is missing (never during the initial delay)."""
        if self.state is PREPARING_REBALANCE and self._initial_delay is None and self.has_all_members_joined():
            self._cancel_join_timer()
            self.complete_join()

    def complete_join(self) -> None:
        self._cancel_join_timer()
        self._initial_delay = None
        for member in [m for m in self.members.values() if m.join_future is None and not m.is_static]:
            log.info("group %s: member %s did not re-join in time; removing it", self.group_id, member.member_id)
            self._complete_sync(member, SyncResult(REBALANCE_IN_PROGRESS))
            self._remove(member)
        if self.state is DEAD:
            return
        if not self._maybe_elect_joined_leader() and self.members:
            # Only static members that have not re-joined are left: wait another rebalance
            # timeout; their sessions will expire if they are really gone.
            log.warning("group %s: no member re-joined; extending the rebalance", self.group_id)
            self._arm_join(self.rebalance_timeout_ms, None)
            return
        self._init_next_generation()
        if self.state is EMPTY:
            log.info("group %s: generation %d is empty", self.group_id, self.generation_id)
            self.ctx.store_group(self, {}, None)
            return
        log.info("group %s: generation %d with %d members, protocol %s", self.group_id, self.generation_id,
                 len(self.members), self.protocol_name)
        everyone = self.current_member_metadata()
        for member in self.members.values():
            self._complete_join(member, JoinResult(
                NONE, member.member_id, self.generation_id, self.protocol_type, self.protocol_name,
                self.leader_id or "", everyone if member.member_id == self.leader_id else ()))
            self.schedule_session(member)
            member.is_new = False

    def _maybe_elect_joined_leader(self) -> bool:
        if self.leader_id is None:
            return False
        leader = self.members.get(self.leader_id)
        if leader is not None and leader.join_future is not None:
            return True
        for member in self.members.values():
            if member.join_future is not None:
                self.leader_id = member.member_id
                return True
        return False

    def _init_next_generation(self) -> None:
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.transition_to(COMPLETING_REBALANCE)
        else:
            self.protocol_name = None
            self.transition_to(EMPTY)

    def _reset_and_propagate_assignment_error(self, error: int) -> None:
        for member in self.members.values():
            member.assignment = b""
        self._propagate_assignment(error)

    def _propagate_assignment(self, error: int) -> None:
        for member in self.members.values():
            if member.sync_future is not None:
                self._complete_sync(member, SyncResult(error, member.assignment if error == NONE else b"",
                                                       self.protocol_type, self.protocol_name))
                self.schedule_session(member)

    def remove_member(self, member: Member, reason: str) -> None:
        """Take a member out (leave, expiry) and let the group react (Kafka's
        removeMemberAndUpdateGroup). Its held requests are answered UNKNOWN_MEMBER_ID."""
        self._complete_join(member, JoinResult(UNKNOWN_MEMBER_ID, ""))
        self._complete_sync(member, SyncResult(UNKNOWN_MEMBER_ID))
        self._remove(member)
        if self.state in (STABLE, COMPLETING_REBALANCE):
            self.maybe_prepare_rebalance(reason)
        elif self.state is PREPARING_REBALANCE:
            self.try_complete_join()

    # --- JoinGroup ---------------------------------------------------------------------------

    def _accept_joining_member(self, member_id: str) -> bool:
        limit = self.ctx.config.group_max_size
        if self.state in (EMPTY, DEAD):
            return True
        member = self.members.get(member_id)
        if self.state is PREPARING_REBALANCE:
            awaiting = sum(1 for m in self.members.values() if m.join_future is not None)
            return (member is not None and member.join_future is not None) or awaiting < limit
        return member is not None or len(self.members) < limit

    def join(self, future: asyncio.Future[JoinResult], *, member_id: str, group_instance_id: str | None, client_id: str,
             client_host: str, session_timeout_ms: int, rebalance_timeout_ms: int, protocol_type: str,
             protocols: Sequence[tuple[str, bytes]], require_known_member_id: bool) -> None:
        """Handle one JoinGroup; ``future`` receives the JoinResult, now or when the join phase ends."""
        if not self._accept_joining_member(member_id):
            member = self.members.get(member_id)
            if member is not None:
                self.remove_member(member, "group is over group.max.size")
            _resolve(future, JoinResult(GROUP_MAX_SIZE_REACHED, ""))
        elif not member_id:
            self._join_new_member(future, group_instance_id, client_id, client_host, session_timeout_ms,
                                  rebalance_timeout_ms, protocol_type, protocols,
                                  require_known_member_id and group_instance_id is None)
        else:
            self._join_known_member(future, member_id, group_instance_id, client_id, client_host,
                                    session_timeout_ms, rebalance_timeout_ms, protocol_type, protocols)
        if self.state is PREPARING_REBALANCE:
            self.try_complete_join()

    def _join_new_member(self, future: asyncio.Future[JoinResult], instance_id: str | None, client_id: str,
                         client_host: str, session_timeout_ms: int, rebalance_timeout_ms: int, protocol_type: str,
                         protocols: Sequence[tuple[str, bytes]], require_known_member_id: bool) -> None:
        names = [name for name, _ in protocols]
        if self.state is DEAD:
            _resolve(future, JoinResult(COORDINATOR_NOT_AVAILABLE, ""))
            return
        replaced = self.members.get(self.static_members.get(instance_id, "")) if instance_id is not None else None
        if not self.supports_protocols(protocol_type, names, replaced):
            _resolve(future, JoinResult(INCONSISTENT_GROUP_PROTOCOL, ""))
            return
        new_id = f"{instance_id if instance_id is not None else client_id}-{uuid.uuid4()}"
        if instance_id is not None and instance_id in self.static_members:
            self._rejoin_static_member(future, new_id, instance_id, protocols, rebalance_timeout_ms,
                                       session_timeout_ms)
        elif require_known_member_id:
            # KIP-394: hand out the id and let the client come back with it, so that a client
            # that never saw this response does not leave a phantom member behind.
            self.pending_members[new_id] = self.ctx.timer.add(
                self.ctx.now_ms() + session_timeout_ms, lambda: self._on_pending_expired(new_id))
            _resolve(future, JoinResult(MEMBER_ID_REQUIRED, new_id))
        else:
            self._add_member_and_rebalance(future, new_id, instance_id, client_id, client_host, session_timeout_ms,
                                           rebalance_timeout_ms, protocol_type, protocols)

    def _join_known_member(self, future: asyncio.Future[JoinResult], member_id: str, instance_id: str | None,
                           client_id: str, client_host: str, session_timeout_ms: int, rebalance_timeout_ms: int,
                           protocol_type: str, protocols: Sequence[tuple[str, bytes]]) -> None:
        names = [name for name, _ in protocols]
        if self.state is DEAD:
            _resolve(future, JoinResult(COORDINATOR_NOT_AVAILABLE, member_id))
            return
        if not self.supports_protocols(protocol_type, names, self.members.get(member_id)):
            _resolve(future, JoinResult(INCONSISTENT_GROUP_PROTOCOL, member_id))
            return
        if member_id in self.pending_members:
            self._add_member_and_rebalance(future, member_id, instance_id, client_id, client_host,
                                           session_timeout_ms, rebalance_timeout_ms, protocol_type, protocols)
            return
        if self.is_static_member_fenced(member_id, instance_id):
            _resolve(future, JoinResult(FENCED_INSTANCE_ID, member_id))
            return
        member = self.members.get(member_id)
        if member is None or (instance_id is not None and instance_id not in self.static_members):
            _resolve(future, JoinResult(UNKNOWN_MEMBER_ID, member_id))
            return
        if self.state is PREPARING_REBALANCE:
            self._update_member_and_rebalance(member, future, protocols, rebalance_timeout_ms, session_timeout_ms,
                                              "member re-joined during the rebalance")
        elif self.state is COMPLETING_REBALANCE:
            if member.matches(protocols):
                # The member lost our JoinGroup response: send this generation's answer again.
                _resolve(future, JoinResult(
                    NONE, member_id, self.generation_id, self.protocol_type, self.protocol_name, self.leader_id or "",
                    self.current_member_metadata() if member_id == self.leader_id else ()))
            else:
                self._update_member_and_rebalance(member, future, protocols, rebalance_timeout_ms,
                                                  session_timeout_ms, "member changed its protocols")
        elif self.state is STABLE:
            if member_id == self.leader_id or not member.matches(protocols):
                # A leader's JoinGroup (e.g. its subscription changed) or a changed member rebalances.
                self._update_member_and_rebalance(member, future, protocols, rebalance_timeout_ms,
                                                  session_timeout_ms, f"member {member_id} re-joined")
            else:
                _resolve(future, JoinResult(NONE, member_id, self.generation_id, self.protocol_type,
                                            self.protocol_name, self.leader_id or ""))
        else:
            _resolve(future, JoinResult(UNKNOWN_MEMBER_ID, member_id))

    def _add_member_and_rebalance(self, future: asyncio.Future[JoinResult], member_id: str, instance_id: str | None,
                                  client_id: str, client_host: str, session_timeout_ms: int,
                                  rebalance_timeout_ms: int, protocol_type: str,
                                  protocols: Sequence[tuple[str, bytes]]) -> None:
        member = Member(member_id, instance_id, client_id, client_host, rebalance_timeout_ms, session_timeout_ms,
                        protocol_type, protocols)
        member.is_new = True
        if self.state is PREPARING_REBALANCE and self.generation_id == 0:
            self.new_member_added = True
        self._add(member, future)
        # A new member cannot heartbeat until it has its first JoinGroup answer, so its held join
        # is bounded separately (a disconnected client would otherwise linger for the rebalance).
        self.schedule_session(member, self.ctx.config.new_member_join_timeout_ms)
        self.maybe_prepare_rebalance(f"adding new member {member_id}")

    def _update_member_and_rebalance(self, member: Member, future: asyncio.Future[JoinResult],
                                     protocols: Sequence[tuple[str, bytes]], rebalance_timeout_ms: int,
                                     session_timeout_ms: int, reason: str) -> None:
        self._update_member(member, protocols, rebalance_timeout_ms, session_timeout_ms, future)
        self.maybe_prepare_rebalance(reason)

    def _rejoin_static_member(self, future: asyncio.Future[JoinResult], new_id: str, instance_id: str,
                              protocols: Sequence[tuple[str, bytes]], rebalance_timeout_ms: int,
                              session_timeout_ms: int) -> None:
        old_id = self.static_members[instance_id]
        current_leader = self.leader_id
        member = self._replace_static_member(instance_id, old_id, new_id)
        self.schedule_session(member)
        old_protocols = member.protocols
        old_timeouts = (member.rebalance_timeout_ms, member.session_timeout_ms)
        self._update_member(member, protocols, rebalance_timeout_ms, session_timeout_ms, future)
        if self.state is STABLE:
            if self.select_protocol() == self.protocol_name:
                log.info("group %s: static member %s rejoined as %s without a rebalance",
                         self.group_id, instance_id, new_id)
                generation = self.generation_id

                def stored(error: int) -> None:
                    if self.members.get(new_id) is not member or member.join_future is not future:
                        return  # the member moved on (fenced again, removed, or re-joined)
                    if self.state is not STABLE or self.generation_id != generation:
                        return  # a rebalance began meanwhile; the member's join is part of it
                    if error:
                        member.join_future = None
                        self._update_member(member, old_protocols, *old_timeouts, None)
                        restored = self._replace_static_member(instance_id, new_id, old_id)
                        self.schedule_session(restored)
                        _resolve(future, JoinResult(error, "", self.generation_id, self.protocol_type,
                                                    self.protocol_name, current_leader or ""))
                        return
                    # Answer with the previous leader id so that, if this member used to lead,
                    # it does not compute an assignment a Stable group would never distribute.
                    self._complete_join(member, JoinResult(NONE, new_id, self.generation_id, self.protocol_type,
                                                           self.protocol_name, current_leader or ""))

                self.ctx.store_group(self, {m.member_id: m.assignment for m in self.members.values()}, stored)
            else:
                self.maybe_prepare_rebalance(f"static member {instance_id} re-joined with other protocols")
        elif self.state is COMPLETING_REBALANCE:
            # The leader may already be assigning to the old member id; start over.
            self.prepare_rebalance(f"static member {instance_id} re-joined during the sync phase")
        # PreparingRebalance: the member simply takes part in the rebalance under its new id.

    # --- SyncGroup ---------------------------------------------------------------------------

    def sync(self, future: asyncio.Future[SyncResult], *, member_id: str, group_instance_id: str | None,
             generation_id: int, protocol_type: str | None, protocol_name: str | None,
             assignments: Mapping[str, bytes]) -> None:
        """Handle one SyncGroup; ``future`` receives the SyncResult, now or once the leader's
        assignment is stored."""
        if self.state is DEAD:
            _resolve(future, SyncResult(COORDINATOR_NOT_AVAILABLE))
        elif self.is_static_member_fenced(member_id, group_instance_id):
            _resolve(future, SyncResult(FENCED_INSTANCE_ID))
        elif member_id not in self.members:
            _resolve(future, SyncResult(UNKNOWN_MEMBER_ID))
        elif generation_id != self.generation_id:
            _resolve(future, SyncResult(ILLEGAL_GENERATION))
        elif (protocol_type is not None and protocol_type != self.protocol_type) or (
                protocol_name is not None and protocol_name != self.protocol_name):
            _resolve(future, SyncResult(INCONSISTENT_GROUP_PROTOCOL))
        elif self.state is EMPTY:
            _resolve(future, SyncResult(UNKNOWN_MEMBER_ID))
        elif self.state is PREPARING_REBALANCE:
            _resolve(future, SyncResult(REBALANCE_IN_PROGRESS))
        elif self.state is STABLE:
            member = self.members[member_id]
            _resolve(future, SyncResult(NONE, member.assignment, self.protocol_type, self.protocol_name))
            self.schedule_session(member)
        else:  # CompletingRebalance: hold until the leader's assignment is stored
            member = self.members[member_id]
            if member.sync_future is not None and member.sync_future is not future:
                _resolve(member.sync_future, SyncResult(REBALANCE_IN_PROGRESS))
            member.sync_future = future
            if member_id == self.leader_id:
                self._store_leader_assignment(member_id, assignments)

    def _store_leader_assignment(self, leader_id: str, assignments: Mapping[str, bytes]) -> None:
        log.info("group %s: assignment received from leader %s for generation %d",
                 self.group_id, leader_id, self.generation_id)
        missing = [mid for mid in self.members if mid not in assignments]
        if missing:
            log.warning("group %s: leader gave no assignment to %s; they get an empty one", self.group_id, missing)
        assignment = {mid: bytes(assignments.get(mid, b"")) for mid in self.members}
        generation = self.generation_id

        def stored(error: int) -> None:
            if self.state is not COMPLETING_REBALANCE or self.generation_id != generation:
                return  # someone joined or left while the record was being written
            if error:
                self._reset_and_propagate_assignment_error(error)
                self.maybe_prepare_rebalance("failed to store the group assignment")
                return
            for mid, member in self.members.items():
                member.assignment = assignment.get(mid, b"")
            self._propagate_assignment(NONE)
            self.transition_to(STABLE)

        self.ctx.store_group(self, assignment, stored)

    # --- Heartbeat ---------------------------------------------------------------------------

    def heartbeat(self, member_id: str, group_instance_id: str | None, generation_id: int) -> int:
        if self.state is DEAD:
            return COORDINATOR_NOT_AVAILABLE
        error, member = self._named_member(member_id, group_instance_id)
        if member is None:
            return error
        if generation_id != self.generation_id:
            return ILLEGAL_GENERATION
        if self.state is EMPTY:
            return UNKNOWN_MEMBER_ID
        self.schedule_session(member)
        return REBALANCE_IN_PROGRESS if self.state is PREPARING_REBALANCE else NONE

    # --- LeaveGroup --------------------------------------------------------------------------

    def leave(self, member_id: str, group_instance_id: str | None) -> int:
        """Remove one member (by member id, or by instance id alone as admin tools do)."""
        if not member_id:
            current = self.static_members.get(group_instance_id) if group_instance_id is not None else None
            if current is None:
                return UNKNOWN_MEMBER_ID
            self.remove_member(self.members[current], f"static member {group_instance_id} removed")
            return NONE
        if member_id in self.pending_members:
            self.ctx.timer.cancel(self.pending_members.pop(member_id))
            if self.state is PREPARING_REBALANCE:
                self.try_complete_join()
            return NONE
        error, member = self._named_member(member_id, group_instance_id)
        if member is None:
            return error
        self.remove_member(member, f"member {member_id} left the group")
        return NONE

    # --- OffsetCommit checks -------------------------------------------------------------------

    def validate_offset_commit(self, member_id: str, group_instance_id: str | None, generation_id: int) -> int:
        """Kafka's rules (doCommitOffsets): generation -1 on an Empty group only stores offsets,
        whatever member id it names (ZooKeeper-era clients such as pykafka send their own);
        otherwise the member and generation must match."""
        if self.state is DEAD:
            return COORDINATOR_NOT_AVAILABLE
        if generation_id < 0 and self.state is EMPTY and not self.is_static_member_fenced(member_id,
                                                                                          group_instance_id):
            return NONE
        if generation_id >= 0 or member_id or group_instance_id is not None:
            if self.is_static_member_fenced(member_id, group_instance_id):
                return FENCED_INSTANCE_ID
            if member_id not in self.members:
                return UNKNOWN_MEMBER_ID
            if generation_id != self.generation_id:
                return ILLEGAL_GENERATION
            if self.state is COMPLETING_REBALANCE:
                return REBALANCE_IN_PROGRESS
            return NONE
        if self.state is not EMPTY:
            return UNKNOWN_MEMBER_ID
        return NONE

    # --- teardown, description, persistence ----------------------------------------------------

    def shutdown(self, error: int) -> None:
        """Mark the group Dead (deleted, or its partition moved away) and answer held requests."""
        self._cancel_join_timer()
        for handle in self.pending_members.values():
            self.ctx.timer.cancel(handle)
        self.pending_members.clear()
        for member in self.members.values():
            self._complete_join(member, JoinResult(error, member.member_id))
            self._complete_sync(member, SyncResult(error))
            self._cancel_session(member)
        self.transition_to(DEAD)

    def describe(self) -> GroupDescription:
        ptype = self.protocol_type or ""
        if self.state is STABLE:
            assert self.protocol_name is not None
            members = tuple(MemberDescription(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                                              m.metadata(self.protocol_name), m.assignment)
                            for m in self.members.values())
            return GroupDescription(NONE, self.group_id, self.state.value, ptype, self.protocol_name, members)
        members = tuple(MemberDescription(m.member_id, m.group_instance_id, m.client_id, m.client_host, b"", b"")
                        for m in self.members.values())
        return GroupDescription(NONE, self.group_id, self.state.value, ptype, "", members)

    def overview(self) -> GroupOverview:
        return GroupOverview(self.group_id, self.protocol_type or "", self.state.value)

    def to_record(self, assignment: Mapping[str, bytes]) -> GroupMetadataRecord:
        """The group metadata value Kafka writes: members with their subscription for the chosen
        protocol and their assignment."""
        members = tuple(
            MemberRecord(m.member_id, m.group_instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
                         m.session_timeout_ms, m.metadata(self.protocol_name) if self.protocol_name else b"",
                         bytes(assignment.get(m.member_id, b"")))
            for m in self.members.values())
        state_timestamp_ms = self.state_timestamp_ms if self.state_timestamp_ms is not None else -1
        return GroupMetadataRecord(self.protocol_type or "", self.generation_id, self.protocol_name,
                                   self.leader_id, state_timestamp_ms, members)

    @classmethod
    def from_record(cls, group_id: str, record: GroupMetadataRecord, ctx: GroupContext,
                    offsets: dict[TopicPartition, OffsetAndMetadata] | None = None) -> Group:
        """Rebuild a group from its stored metadata (and committed offsets): Stable with its members, or Empty."""
        group = cls(group_id, ctx, offsets)
        group.protocol_type = record.protocol_type or None
        group.generation_id = record.generation_id
        group.protocol_name = record.protocol_name
        group.leader_id = record.leader_id
        group.state_timestamp_ms = record.state_timestamp_ms if record.state_timestamp_ms >= 0 else None
        for m in record.members:
            protocols = [(record.protocol_name, m.subscription)] if record.protocol_name else []
            member = Member(m.member_id, m.group_instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
                            m.session_timeout_ms, record.protocol_type, protocols)
            member.assignment = m.assignment
            group.members[m.member_id] = member
            if m.group_instance_id is not None:
                group.static_members[m.group_instance_id] = m.member_id
        if group.members:
            group.state = STABLE
            if group.leader_id not in group.members:
                group.leader_id = next(iter(group.members))
        else:
            group.leader_id = None
        return group

    def subscribed_topics(self) -> set[str] | None:
        """Topics the members subscribe to, from ConsumerProtocolSubscription bytes; None when
        they cannot be known (not a consumer group, no protocol yet, or bytes we cannot parse)."""
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE or not self.protocol_name:
            return None
        topics: set[str] = set()
        try:
            for member in self.members.values():
                topics.update(_subscription_topics(member.metadata(self.protocol_name)))
        except (ValueError, KeyError, UnicodeDecodeError):
            return None
        return topics


def _subscription_topics(data: bytes) -> list[str]:
    """Topics of a ConsumerProtocolSubscription (int16 version, then [string]), any version."""
    if len(data) < 6:
        raise ValueError("short subscription")
    count = int.from_bytes(data[2:6], "big", signed=True)
    pos, topics = 6, []
    for _ in range(max(count, 0)):
        n = int.from_bytes(data[pos:pos + 2], "big", signed=True)
        if n < 0 or pos + 2 + n > len(data):
            raise ValueError("bad subscription topic")
        topics.append(data[pos + 2:pos + 2 + n].decode("utf-8"))
        pos += 2 + n
    return topics
