"""The follower side: one fetch loop per leader broker (Kafka's ReplicaFetcherThread, as a task).

A partition joins its leader's loop when this broker becomes its follower. It first asks the
leader where its log diverges (OffsetForLeaderEpoch for the latest epoch in its own epoch cache)
and truncates there (KIP-101/279): a former leader drops the tail the new leader never had. Then
it fetches from its log end offset with Fetch requests carrying its broker id, appends the
leader's batches unchanged and takes the leader's high watermark.

A partition listed for this broker in ``follower.replication.throttled.replicas`` is left out of a
fetch while the follower quota (``follower.replication.throttled.rate``) is exceeded, unless it is in sync
(caught up with the leader's high watermark at the last answer), as Kafka's ReplicaFetcherThread
(shouldFollowerThrottle); what it appends counts towards the quota.

The loop re-checks after every await that the partition still follows the same leader at the same
epoch: the cluster view may have moved it meanwhile, and a stale answer must not touch the log.
"""
from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from kbroker import errors
from kbroker.config.broker import BrokerConfig
from kbroker.interbroker.client import BrokerConnection
from kbroker.log import TopicPartition
from kbroker.metadata.zk_view import LiveBroker
from kbroker.metrics.hops import HOPS
from kbroker.replication.partition import Partition
from kbroker.replication.throttle import ReplicationQuotas, throttled
from zk_compat.jvm import java_int_hash

log = logging.getLogger(__name__)

FETCH_VERSION = 11
OFFSET_FOR_LEADER_EPOCH_VERSION = 3
LIST_OFFSETS_VERSION = 2
INITIAL_SESSION_EPOCH = 0
MAX_SESSION_EPOCH = 2**31 - 1
# At most one cut of a waiting Fetch (see ``LeaderFetcher.add``) per this long: a LeaderAndIsr adds thousands of
# partitions a few at a time, and each cut costs a full fetch of every partition followed from that leader.
CUT_INTERVAL_S = 0.1
# An incremental request looks at the partitions that moved; at least this often at every partition followed.
FULL_LOOK_S = 1.0
EARLIEST, LATEST = -2, -1

# Answers that mean "ask again once the metadata moved on": back off, the view re-assigns.
_WAIT_FOR_METADATA = frozenset({
    errors.NotLeaderOrFollowerError.code, errors.FencedLeaderEpochError.code, errors.UnknownLeaderEpochError.code,
    errors.UnknownTopicOrPartitionError.code, errors.LeaderNotAvailableError.code,
    errors.KafkaStorageError.code,
})


class FollowerBroker(Protocol):
    """Who fetches: the broker id sent as the replica id, and the replica.fetch.* settings."""
    broker_id: int
    config: BrokerConfig
    quotas: ReplicationQuotas  # the follower throttle

    def replicated_in(self, size: int) -> None:
        """``size`` record bytes appended from a leader (kafka_server_..._replicationbytesin_total)."""


_SERIALS = itertools.count()


@dataclass
class _Target:
    partition: Partition
    leader_epoch: int
    serial: int = field(default_factory=lambda: next(_SERIALS))  # tells a partition followed again from before
    truncating: bool = True
    not_before: float = 0.0   # monotonic seconds: backing off until then
    lag: int | None = None    # the leader's high watermark minus the log end, at the last answer with records

    def current(self, fetcher: LeaderFetcher) -> bool:
        """Still following this fetcher's leader at the epoch it was added with?"""
        p = self.partition
        return (fetcher.targets.get(p.tp) is self and not p.is_leader and p.leader_id == fetcher.leader.id
                and p.leader_epoch == self.leader_epoch)


# Where a partition stands in a request, and so in the leader's session: (fetch offset, leader epoch, max bytes,
# the target's serial).
Position = tuple[int, int, int, int]
# A request's positions, and the partitions it looked at (every one, or those that moved: ``LeaderFetcher._fetch``).
Look = tuple[dict[TopicPartition, Position], Iterable[TopicPartition]]


class Asked(Protocol):
    def get(self, tp: TopicPartition) -> tuple[_Target, int] | None: ...


class _Sent:
    """What a Fetch asked of each partition, (its target, fetch offset), looked up as the answers come: only a
    target still followed since the request (the same serial) is answered."""

    def __init__(self, targets: dict[TopicPartition, _Target], positions: dict[TopicPartition, Position]) -> None:
        self.targets = targets
        self.positions = positions

    def get(self, tp: TopicPartition) -> tuple[_Target, int] | None:
        position = self.positions.get(tp)
        target = self.targets.get(tp)
        if position is None or target is None or target.serial != position[3]:
            return None
        return target, position[0]


class LeaderFetcher:
    def __init__(self, broker: FollowerBroker, leader: LiveBroker) -> None:
        self.broker = broker
        self.leader = leader
        cfg = broker.config
        self.targets: dict[TopicPartition, _Target] = {}
        self.connection = BrokerConnection(leader.host, leader.port, f"broker-{broker.broker_id}-fetcher-{leader.id}",
                                           cfg.replica_socket_timeout_ms / 1000 + cfg.replica_fetch_wait_max_ms / 1000)
        self.backoff_s = cfg.replica_fetch_backoff_ms / 1000
        self._wake = asyncio.Event()
        self._polling = False      # a Fetch is waiting at the leader (up to replica.fetch.wait.max.ms)
        self._interrupted = False  # ... and add() cut it short to fetch the new partition too
        self._added = False        # a partition was added since the last Fetch was sent
        self._last_cut = 0.0       # monotonic seconds
        self._cut_timer: asyncio.TimerHandle | None = None
        # KIP-227 fetch session with the leader: after a full Fetch opens it, a request names only the
        # partitions whose fetch position changed (and the ones to forget), and the answer only those
        # with something new, instead of every followed partition both ways on every round trip.
        self._session_id = 0
        self._session_epoch = INITIAL_SESSION_EPOCH
        self._in_session: dict[TopicPartition, Position] = {}  # what the leader's session holds
        # Which partitions may have moved since the last request (added, removed, appended to, truncated, backing
        # off): an incremental request looks at those alone, not at every partition followed from this leader
        # (thousands: milliseconds per fetch, and a follower fetches after every append). A full request, a
        # bounded follower throttle or a second's time looks at all of them.
        self._moved: set[TopicPartition] = set()
        self._backing_off: dict[TopicPartition, float] = {}  # until when (monotonic seconds)
        self._truncating: set[TopicPartition] = set()  # those that may still have to ask where their log diverges
        self._full_look_at = 0.0  # monotonic seconds: the next look at every partition
        self._stopped = False
        self._task = asyncio.get_running_loop().create_task(self._run())

    def add(self, partition: Partition) -> None:
        self.targets[partition.tp] = _Target(partition, partition.leader_epoch)
        self._moved.add(partition.tp)
        self._truncating.add(partition.tp)
        self._added = True
        self._wake.set()
        if self._polling and not self._interrupted and self._cut_timer is None:
            # The Fetch in flight names only the partitions followed when it was sent, and an
            # idle leader holds it for replica.fetch.wait.max.ms: the new partition (and acks=all
            # writes waiting for this replica) would wait that long for its first fetch. Drop the
            # connection (the answer changes nothing here: nothing was appended from it) and
            # fetch again at once, with the new partition: at once for the first, and for a burst no
            # more than once per CUT_INTERVAL_S (each cut costs a full fetch).
            wait = self._last_cut + CUT_INTERVAL_S - time.monotonic()
            if wait <= 0:
                self._cut()
            else:
                self._cut_timer = asyncio.get_running_loop().call_later(wait, self._cut_if_waiting)

    def _cut_if_waiting(self) -> None:
        self._cut_timer = None
        if self._polling and not self._interrupted and self._added and not self._stopped:
            self._cut()

    def _cut(self) -> None:
        self._last_cut = time.monotonic()
        self._interrupted = True
        self.connection.close()
        self._reset_session()

    def remove(self, tp: TopicPartition) -> None:
        if self.targets.pop(tp, None) is not None:
            self._moved.add(tp)

    def stop(self) -> None:
        # Forget the targets first: on Python 3.11 a cancellation can be lost when the awaited
        # response arrives at the same moment (asyncio.wait_for), and an answer handled after the
        # broker closed its logs must find nothing to append to.
        self.targets.clear()
        self._stopped = True  # and should the cancellation be lost, the loop ends at its next turn
        if self._cut_timer is not None:
            self._cut_timer.cancel()
            self._cut_timer = None
        self._task.cancel()
        self.connection.close()
        self._wake.set()

    async def _run(self) -> None:
        while not self._stopped:
            if not self.targets:
                self._wake.clear()
                await self._wake.wait()
                continue
            try:
                progressed = await self._truncate()
                progressed = await self._fetch() or progressed
                if not progressed:
                    await self._sleep_until_ready()
            except asyncio.CancelledError:
                raise
            except OSError as exc:
                self._reset_session()  # whether the leader saw the last request is unknown
                if self._interrupted:
                    self._interrupted = False
                    continue
                log.info("fetcher %d -> %d: %s; retrying in %.1fs", self.broker.broker_id, self.leader.id, exc,
                         self.backoff_s)
                self.connection.close()
                await self._sleep(self.backoff_s)
            except Exception:
                log.exception("fetcher %d -> %d failed; retrying", self.broker.broker_id, self.leader.id)
                self.connection.close()
                self._reset_session()
                await self._sleep(self.backoff_s)
        self.connection.close()  # stopped while a connect or an answer was arriving: nothing stays open

    def _reset_session(self) -> None:
        """The next Fetch is a full one: it closes the old session at the leader and opens a new one."""
        self._session_epoch = INITIAL_SESSION_EPOCH
        self._in_session.clear()

    async def _sleep(self, seconds: float) -> None:
        self._wake.clear()
        try:
            await asyncio.wait_for(self._wake.wait(), seconds)
        except TimeoutError:
            pass

    async def _sleep_until_ready(self) -> None:
        now = time.monotonic()
        soonest = min((t.not_before for t in self.targets.values()), default=now + self.backoff_s)
        await self._sleep(max(0.01, soonest - now))

    def _ready(self, truncating: bool) -> list[_Target]:
        now = time.monotonic()
        return [t for t in self.targets.values() if t.truncating == truncating and t.not_before <= now]

    def _back_off(self, target: _Target, why: str) -> None:
        log.debug("fetcher %d -> %d: %s: %s", self.broker.broker_id, self.leader.id, target.partition.tp, why)
        target.not_before = time.monotonic() + self.backoff_s
        self._moved.add(target.partition.tp)
        self._backing_off[target.partition.tp] = target.not_before

    # -- truncation by leader epoch ------------------------------------------------------------

    def _pending_truncation(self) -> list[_Target]:
        now = time.monotonic()
        pending = []
        for tp in list(self._truncating):
            target = self.targets.get(tp)
            if target is None or not target.truncating:
                self._truncating.discard(tp)
            elif target.not_before <= now:
                pending.append(target)
        return pending

    async def _truncate(self) -> bool:
        pending = self._pending_truncation()
        if not pending:
            return False
        asked: dict[TopicPartition, tuple[_Target, int]] = {}
        by_topic: dict[str, list[dict[str, Any]]] = {}  # the request's partitions, as the encoder takes them
        for target in pending:
            p = target.partition
            epoch = p.log.leader_epochs.latest_epoch
            if epoch < 0:  # nothing with an epoch in the log: nothing can diverge
                p.truncate_to(p.log.high_watermark)
                target.truncating = False
                self._moved.add(p.tp)
                continue
            asked[p.tp] = (target, epoch)
            by_topic.setdefault(p.tp.topic, []).append(
                {"partition": p.tp.partition, "current_leader_epoch": target.leader_epoch, "leader_epoch": epoch})
        if not asked:
            return True
        response = await self.connection.request(23, OFFSET_FOR_LEADER_EPOCH_VERSION, {
            "replica_id": self.broker.broker_id,
            "topics": [{"topic": t, "partitions": parts} for t, parts in by_topic.items()]})
        for result, target, epoch in self._answers(response.topics, asked, lambda r: r.partition):
            if result.error_code:
                self._back_off(target, f"OffsetForLeaderEpoch: {errors.for_code(result.error_code).__name__}")
                continue
            p = target.partition
            leo = p.log.log_end_offset
            if result.leader_epoch < 0 or result.end_offset < 0:
                offset = p.log.high_watermark  # the leader knows no epoch this old: keep the committed part
            elif result.leader_epoch == epoch:
                offset = min(result.end_offset, leo)
            else:  # the leader's last epoch at or below ours ends there; ours may end earlier
                _, ours = p.end_offset_for_epoch(result.leader_epoch)
                offset = min(result.end_offset, ours if ours >= 0 else leo, leo)
            p.truncate_to(offset)
            target.truncating = False
            self._moved.add(p.tp)
        return True

    # -- fetching -------------------------------------------------------------------------------

    def _position(self, target: _Target) -> Position:
        return (target.partition.log.log_end_offset, target.leader_epoch, self.broker.config.replica_fetch_max_bytes,
                target.serial)

    def _look_at_all(self) -> Look | None | Literal["throttled"]:
        """Every partition followed: (the positions of those to fetch, the partitions looked at); None when none
        is ready, "throttled" when every ready one is."""
        ready = self._ready(truncating=False)
        if not ready:
            return None
        ready = [t for t in ready if not self._follower_throttled(t)]
        if not ready:
            return "throttled"
        self._moved.clear()
        now = time.monotonic()
        self._backing_off = {tp: t.not_before for tp, t in self.targets.items() if t.not_before > now}
        self._full_look_at = now + FULL_LOOK_S
        positions = {t.partition.tp: self._position(t) for t in ready}
        return positions, set(positions) | set(self._in_session)

    def _look_at_moved(self, now: float) -> Look | None:
        """The partitions that moved since the last request (and those whose back-off ended), against what the
        leader's session holds."""
        for tp, until in list(self._backing_off.items()):
            if until <= now:
                del self._backing_off[tp]
                self._moved.add(tp)
        looked_at, self._moved = self._moved, set()
        positions = dict(self._in_session)
        for tp in looked_at:
            target = self.targets.get(tp)
            if target is None or target.truncating or target.not_before > now:
                positions.pop(tp, None)
            else:
                positions[tp] = self._position(target)
        if not positions:
            self._moved = looked_at  # nothing to fetch: look again next time
            return None
        return positions, looked_at

    async def _fetch(self) -> bool:
        cfg = self.broker.config
        full = self._session_epoch == INITIAL_SESSION_EPOCH
        now = time.monotonic()
        if full or self.broker.quotas.follower.bounded or now >= self._full_look_at:
            found = self._look_at_all()
        else:
            found = self._look_at_moved(now)
        if found is None:
            return False
        if found == "throttled":  # Kafka's fetcher builds no request then and backs off; no longer than the quota
            await self._sleep(max(0.01, min(self.backoff_s, self.broker.quotas.follower.delay_s())))
            return True
        positions, looked_at = found
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for tp in looked_at:
            position = positions.get(tp)
            if position is None:
                continue
            p = self.targets[tp].partition
            if not full and self._in_session.get(tp) == position:
                continue  # the leader's session has it where it is
            by_topic.setdefault(tp.topic, []).append({
                "partition": tp.partition, "current_leader_epoch": position[1], "fetch_offset": position[0],
                "log_start_offset": p.log.log_start_offset, "partition_max_bytes": cfg.replica_fetch_max_bytes})
        forgotten: dict[str, list[int]] = {}
        if not full:
            for tp in looked_at:
                if tp in self._in_session and tp not in positions:  # backing off, truncating or no longer followed
                    forgotten.setdefault(tp.topic, []).append(tp.partition)
        epoch = self._session_epoch
        if HOPS.on:
            for tp, position in positions.items():
                HOPS.mark("fetch_out", tp.topic, tp.partition, position[0], self.leader.id)
        self._polling = True
        self._added = False
        try:
            response = await self.connection.request(1, FETCH_VERSION, {
                "replica_id": self.broker.broker_id, "max_wait_ms": cfg.replica_fetch_wait_max_ms,
                "min_bytes": cfg.replica_fetch_min_bytes, "max_bytes": cfg.replica_fetch_response_max_bytes,
                "isolation_level": 0, "session_id": self._session_id, "session_epoch": epoch,
                "topics": [{"topic": t, "partitions": parts} for t, parts in by_topic.items()],
                "forgotten_topics_data": [{"topic": t, "partitions": ps} for t, ps in forgotten.items()],
                "rack_id": self.broker.config.broker_rack})
        finally:
            self._polling = False
        self._interrupted = False  # the answer came before the cut: the next fetch has the new partition
        if response.error_code in (errors.FetchSessionIdNotFoundError.code, errors.InvalidFetchSessionEpochError.code):
            log.info("fetcher %d -> %d: fetch session %d: %s; opening a new one", self.broker.broker_id,
                     self.leader.id, self._session_id, errors.for_code(response.error_code).__name__)
            self._reset_session()
            return True  # again at once, in full
        if response.error_code:
            self._reset_session()
            raise OSError(f"fetch refused: {errors.for_code(response.error_code).__name__}")
        if self._session_epoch != epoch:  # reset while the request was out (add() cut the connection)
            return True
        if response.session_id:  # the leader keeps (or opened) the session: the next request is incremental
            self._session_id = response.session_id
            self._session_epoch = 1 if epoch == MAX_SESSION_EPOCH else epoch + 1
            self._in_session = positions
        else:  # no session (the leader's cache declined one): the next request is full again
            self._session_id = 0
            self._reset_session()
        for data, target, offset in self._answers(response.responses, _Sent(self.targets, positions),
                                                  lambda d: d.partition_index):
            if target.partition.log.log_end_offset != offset:
                continue
            if data.error_code == 0:
                self._append(target, data)
            elif data.error_code == errors.OffsetOutOfRangeError.code:
                await self._out_of_range(target, offset)
            elif data.error_code in _WAIT_FOR_METADATA:
                self._back_off(target, errors.for_code(data.error_code).__name__)
            else:
                log.warning("fetcher %d -> %d: %s: error %s", self.broker.broker_id, self.leader.id,
                            target.partition.tp, errors.for_code(data.error_code).__name__)
                self._back_off(target, "error")
        return True

    def _answers(self, topics: Iterable[Any], asked: Asked,
                 index_of: Callable[[Any], int]) -> Iterator[tuple[Any, _Target, int]]:
        """(answer, target, what was asked of it) for each answered partition this loop still follows (``topics``:
        the decoded response's, as the client decodes them)."""
        for topic in topics:
            for answer in topic.partitions:
                found = asked.get(TopicPartition(topic.topic, index_of(answer)))
                if found is not None and found[0].current(self):
                    yield answer, found[0], found[1]

    def _append(self, target: _Target, data: Any) -> None:
        p = target.partition
        self._moved.add(p.tp)
        records = data.records if data.records is not None else b""
        if HOPS.on and records:
            HOPS.mark("recv", p.tp.topic, p.tp.partition, p.log.log_end_offset, self.leader.id)
        try:
            p.append_as_follower(memoryview(records), data.high_watermark)
            if HOPS.on and records:
                HOPS.mark("appended", p.tp.topic, p.tp.partition, p.log.log_end_offset, self.leader.id)
            self.broker.replicated_in(len(records))
            target.lag = max(0, data.high_watermark - p.log.log_end_offset)
            if records and self._throttle_listed(p):
                self.broker.quotas.follower.record(len(records))
        except errors.KafkaError as exc:
            log.warning("%s: cannot append what leader %d sent: %s; truncating again", p.tp, self.leader.id, exc)
            target.truncating = True
            self._truncating.add(p.tp)
            self._back_off(target, str(exc))
            return
        if data.log_start_offset > p.log.log_start_offset:
            p.log.delete_records_before(min(data.log_start_offset, p.log.high_watermark))

    def _throttle_listed(self, p: Partition) -> bool:
        return throttled(p.log.config.follower_replication_throttled_replicas, p.tp.partition,
                         self.broker.broker_id)

    def _follower_throttled(self, target: _Target) -> bool:
        """Kafka's shouldFollowerThrottle: not in sync, listed, and the follower quota exceeded."""
        quota = self.broker.quotas.follower
        in_sync = target.lag is not None and target.lag <= 0
        return quota.bounded and not in_sync and self._throttle_listed(target.partition) and quota.exceeded()

    async def _out_of_range(self, target: _Target, offset: int) -> None:
        """Kafka's handleOutOfRange: above the leader's end, truncate to it; below its start,
        start over at its start."""
        p = target.partition
        earliest, latest = await self._leader_offsets(p)
        if not target.current(self):
            return
        if latest >= 0 and offset > latest:
            p.truncate_to(latest)
        elif earliest >= 0 and offset < earliest:
            p.truncate_fully_and_start_at(earliest)
        else:
            self._back_off(target, f"offset {offset} out of range [{earliest}, {latest}]")

    async def _leader_offsets(self, p: Partition) -> tuple[int, int]:
        found = []
        for timestamp in (EARLIEST, LATEST):
            response = await self.connection.request(2, LIST_OFFSETS_VERSION, {
                "replica_id": self.broker.broker_id, "isolation_level": 0,
                "topics": [{"name": p.tp.topic, "partitions": [{"partition_index": p.tp.partition,
                                                                 "timestamp": timestamp}]}]})
            result = response.topics[0].partitions[0]
            found.append(result.offset if result.error_code == 0 else -1)
        return found[0], found[1]


def fetcher_id(tp: TopicPartition, num_fetchers: int) -> int:
    """Kafka's AbstractFetcherManager.getFetcherId: abs(31 * topic.hashCode + partition) % num.replica.fetchers."""
    n = (31 * java_int_hash(tp.topic) + tp.partition) & 0xFFFFFFFF
    n = n - (1 << 32) if n >= 1 << 31 else n
    return (0 if n == -(1 << 31) else abs(n)) % num_fetchers


class ReplicaFetcherManager:
    """Which leader each followed partition fetches from: ``num.replica.fetchers`` LeaderFetchers (connections)
    per leader at most, a partition's chosen as Kafka chooses its fetcher thread."""

    def __init__(self, broker: FollowerBroker, num_fetchers: int = 1) -> None:
        self.broker = broker
        self.num_fetchers = max(1, num_fetchers)
        self.fetchers: dict[tuple[int, int], LeaderFetcher] = {}  # (leader id, fetcher id)

    def follow(self, partition: Partition, leader: LiveBroker) -> None:
        self.unfollow(partition.tp)
        key = (leader.id, fetcher_id(partition.tp, self.num_fetchers))
        fetcher = self.fetchers.get(key)
        if fetcher is not None and (fetcher.leader.host, fetcher.leader.port) != (leader.host, leader.port):
            fetcher.stop()  # the leader re-registered elsewhere
            fetcher = None
        if fetcher is None:
            fetcher = self.fetchers[key] = LeaderFetcher(self.broker, leader)
        fetcher.add(partition)

    def unfollow(self, tp: TopicPartition) -> None:
        for key, fetcher in list(self.fetchers.items()):
            fetcher.remove(tp)
            if not fetcher.targets:
                fetcher.stop()
                del self.fetchers[key]

    def following(self, tp: TopicPartition) -> int | None:
        for (leader_id, _), fetcher in self.fetchers.items():
            if tp in fetcher.targets:
                return leader_id
        return None

    def resize(self, num_fetchers: int) -> None:
        """A new num.replica.fetchers (a dynamic config): every followed partition is followed again, spread
        over the new number of fetchers (Kafka's resizeThreadPool)."""
        num_fetchers = max(1, num_fetchers)
        if num_fetchers == self.num_fetchers:
            return
        followed = [(t.partition, f.leader) for f in self.fetchers.values() for t in f.targets.values()]
        self.stop()
        self.num_fetchers = num_fetchers
        for partition, leader in followed:
            self.follow(partition, leader)

    def stop(self) -> None:
        for fetcher in self.fetchers.values():
            fetcher.stop()
        self.fetchers.clear()
