"""One partition as this broker hosts it: its log, its role (leader or follower), leader epoch,
replica set and ISR, producer state and the offsets consumers may see. Errors become Kafka codes
here, at the partition boundary.

As leader it tracks every follower's log end offset (learnt from the fetch offsets of their
Fetch requests) and moves the high watermark to the lowest log end offset in the ISR; it decides
which followers the ISR should lose (no catch-up for ``replica.lag.time.max.ms``) or gain (caught
up to the high watermark and the current epoch), but the ISR itself changes only once ZooKeeper
has the change (``kbroker.replication.isr``), so the ISR in memory never claims more than
ZooKeeper does. As follower it appends what the leader sent with the leader's offsets and epochs,
and takes the leader's high watermark, bounded by its own log end offset.

Single-replica partitions (the embedded, ZooKeeper-less mode) have an ISR of this broker only, so
the high watermark follows the log end offset as soon as an append is written.
"""
from __future__ import annotations

import bisect
import logging
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from kbroker import errors
from kbroker.clock import monotonic_ms, wall_ms
from kbroker.log import (
    FileSlice,
    PartitionLog,
    TopicPartition,
    batch_format as core_records,
    batches as markers,  # transaction markers: control batches, written and read below txn
    producer_snapshot,
)
from kbroker.log.legacy import LegacyBytes
from kbroker.log.partition_log import AppendResult
from kbroker.log.producer_state import MAX_CACHED_BATCHES, AbortedTxn, ProducerStateManager

log = logging.getLogger(__name__)

READ_UNCOMMITTED = 0
READ_COMMITTED = 1


class ReadResult(NamedTuple):
    records: FileSlice | LegacyBytes | None  # LegacyBytes: down-converted for Fetch v0-3
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted: list[AbortedTxn] | None = None  # read_committed: AbortedTxn the records may contain


class SessionClock(Protocol):
    """A follower's fetch session as a clock: when it last fetched (``kbroker.replication.quiet``)."""
    last_fetch_ms: int


@dataclass
class FollowerState:
    """What the leader knows of one follower (Kafka's remote replica state)."""
    log_end_offset: int = -1          # unknown until its first fetch in this leadership
    last_caught_up_ms: int = 0
    last_fetch_ms: int = 0
    last_fetch_leader_leo: int = -1   # the leader's log end offset at that fetch
    # A quiet partition of the follower's fetch session (kbroker.replication.quiet): its incremental fetches
    # skip this partition, which stood at the log end with nothing to send; each of them is a fetch of it
    # caught up, at the session's clock, until a read of it again (``update_follower``).
    resting_on: SessionClock | None = None

    def rest_on(self, session: SessionClock) -> None:
        self.resting_on = session

    def wake(self, session: SessionClock) -> None:
        """The session stops skipping this partition (forgotten): its fetches no longer stand for one of it."""
        if self.resting_on is session:
            self.last_caught_up_ms = max(self.last_caught_up_ms, session.last_fetch_ms)
            self.last_fetch_ms = max(self.last_fetch_ms, session.last_fetch_ms)
            self.resting_on = None

    def caught_up_ms(self) -> int:
        session = self.resting_on
        return self.last_caught_up_ms if session is None else max(self.last_caught_up_ms, session.last_fetch_ms)


class Partition:
    def __init__(self, tp: TopicPartition, plog: PartitionLog, broker_id: int, leader_epoch: int = 0,
                 single_replica: bool = True) -> None:
        self.tp = tp
        self.log = plog
        self.broker_id = broker_id
        self.leader_epoch = leader_epoch
        self.replicas = [broker_id]
        self.isr = [broker_id]
        self.leader_id = broker_id
        self.zk_version = -1              # of the state znode this view came from
        self.controller_epoch = -1
        self.followers: dict[int, FollowerState] = {}
        self.isr_change_pending = False   # one ISR write at a time
        self.leader_epoch_start_offset = plog.log_end_offset
        self.producer_state = ProducerStateManager()
        self._load_producer_state()
        self._snapshot_segment = plog.active.base_offset if plog.segments else -1
        if single_replica:
            plog.update_high_watermark(plog.log_end_offset)
        else:
            self.leader_id = -1  # neither leader nor follower until the partition state says

    def _load_producer_state(self) -> None:
        """The latest producer snapshot not beyond the log end, the aborted transactions of the
        .txnindex files before it, and a replay of the batches after it; without a usable
        snapshot, a replay of the whole log (which rewrites the .txnindex files)."""
        plog = self.log
        directory = plog.directory
        usable = []
        for offset in producer_snapshot.snapshot_offsets(directory):
            if offset > plog.log_end_offset:  # written before a truncation: never valid again
                producer_snapshot.snapshot_path(directory, offset).unlink(missing_ok=True)
            elif offset >= plog.log_start_offset:
                usable.append(offset)
        if usable:
            start = usable[-1]
            try:
                state = producer_snapshot.read_snapshot(producer_snapshot.snapshot_path(directory, start))
            except (OSError, ValueError) as exc:
                log.warning("%s: producer snapshot unusable (%s); replaying the whole log", self.tp, exc)
            else:
                state.aborted = [a for a in producer_snapshot.read_aborted(directory)
                                 if plog.log_start_offset <= a.last_offset < start]
                self.producer_state = state
                earlier, later = plog.batch_headers_around(start, MAX_CACHED_BATCHES)
                state.restore_windows(earlier)  # the snapshot kept one batch per producer
                for header in later:
                    self._track_producer(header, index_aborts=True)
                return
        self._rebuild_producer_state()

    def _rebuild_producer_state(self) -> None:
        """Replay batch headers so sequence checks and open transactions survive a restart (and
        a truncation); the .txnindex files are written again from what the replay found."""
        self.producer_state = ProducerStateManager()
        for header in self.log.batch_headers(self.log.log_start_offset):
            self._track_producer(header)
        directory = self.log.directory
        producer_snapshot.remove_stale_txn_indexes(directory, ())
        for aborted in self.producer_state.aborted:
            producer_snapshot.append_aborted(directory, self._segment_base(aborted.last_offset), aborted, -1)

    def _segment_base(self, offset: int) -> int:
        bases = [s.base_offset for s in self.log.segments]
        return bases[max(bisect.bisect_right(bases, offset) - 1, 0)]

    def _snapshot_if_rolled(self) -> None:
        """As Kafka takes a producer snapshot at every roll: after an append that started a segment, the
        state at the log end goes to disk, so a crash replays about a segment rather than the whole log.
        Called once the producer state has taken in the whole append (a follower's append may roll in the
        middle of its batches)."""
        base = self.log.active.base_offset
        if base != self._snapshot_segment:
            self._snapshot_segment = base
            self.write_snapshot()

    def write_snapshot(self) -> None:
        """Producer state at the log end (clean shutdown, and after each roll), so the next open replays
        nothing (or only what came after the roll)."""
        plog = self.log
        if plog.offline:
            return
        try:
            producer_snapshot.write_snapshot(plog.directory, plog.log_end_offset, self.producer_state)
            producer_snapshot.remove_stale_txn_indexes(plog.directory, [s.base_offset for s in plog.segments])
        except OSError as exc:
            log.warning("%s: producer snapshot not written: %s", self.tp, exc)

    def _track_producer(self, header: core_records.BatchHeader, batch: memoryview | None = None,
                        index_aborts: bool = False) -> None:
        """Producer state from one batch header; a control batch's marker type needs its bytes
        (read from the log when not given). With ``index_aborts`` an ABORT is also written to
        the .txnindex of its segment."""
        if header.producer_id < 0:
            return
        if header.is_control:
            if batch is None:
                batch = memoryview(self.log.read_bytes(header.base_offset, header.size))[:header.size]
            found = markers.read_marker(batch)
            if found is not None:
                self._complete(header.producer_id, header.producer_epoch, header.base_offset,
                               found[0] == markers.COMMIT, index_aborts, found[1])
            return
        self.producer_state.update(header.producer_id, header.producer_epoch, header.base_sequence,
                                   header.last_sequence, header.base_offset, header.last_offset,
                                   header.max_timestamp)
        if header.is_transactional:
            self.producer_state.begin(header.producer_id, header.base_offset)

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.broker_id

    # -- role changes (from the partition state in ZooKeeper) ------------------------------

    def become_leader(self, leader_epoch: int, isr: list[int], replicas: list[int], zk_version: int,
                      controller_epoch: int) -> bool:
        """Returns True when this is a new leadership (not just a new ISR or epoch)."""
        new = not self.is_leader
        now = monotonic_ms()
        if new or leader_epoch != self.leader_epoch:
            # Kafka's leader epoch cache entry: this epoch starts at the current log end offset
            self.log.leader_epochs.assign(leader_epoch, self.log.log_end_offset)
            self.leader_epoch_start_offset = self.log.log_end_offset
        if new:
            # A new leader knows nothing of its followers; those in the ISR get a full lag period.
            self.followers = {r: FollowerState(last_caught_up_ms=now if r in isr else 0) for r in replicas
                              if r != self.broker_id}
        else:
            for r in replicas:
                if r != self.broker_id and r not in self.followers:
                    self.followers[r] = FollowerState(last_caught_up_ms=now if r in isr else 0)
            for r in list(self.followers):
                if r not in replicas:
                    del self.followers[r]
        self.leader_id = self.broker_id
        self.leader_epoch = leader_epoch
        self.isr = list(isr)
        self.replicas = list(replicas)
        self.zk_version = zk_version
        self.controller_epoch = controller_epoch
        self.isr_change_pending = False
        self.maybe_advance_high_watermark()
        return new

    def become_follower(self, leader_id: int, leader_epoch: int, isr: list[int], replicas: list[int],
                        zk_version: int, controller_epoch: int) -> bool:
        """Returns True when the leader or epoch changed (the fetcher must start over)."""
        changed = leader_id != self.leader_id or leader_epoch != self.leader_epoch
        self.leader_id = leader_id
        self.leader_epoch = leader_epoch
        self.isr = list(isr)
        self.replicas = list(replicas)
        self.zk_version = zk_version
        self.controller_epoch = controller_epoch
        self.followers = {}
        self.isr_change_pending = False
        return changed

    # -- leader: appends, follower progress, high watermark ---------------------------------

    def append_as_leader(self, batches: memoryview, required_acks: int = 1, from_client: bool = True) -> AppendResult:
        """Validate, check producer sequences, write. A duplicate of one of the producer's last
        five batches is answered with its original offsets and not written again. Coordinators'
        own batches (``from_client=False``) may carry a producer without sequences."""
        plog = self.log
        if required_acks == -1 and len(self.isr) < plog.config.min_insync_replicas:
            raise errors.NotEnoughReplicasError(
                f"{self.tp}: the ISR {self.isr} is smaller than min.insync.replicas="
                f"{plog.config.min_insync_replicas}")
        if from_client:
            info = plog.validate(batches)
        else:
            try:
                info = core_records.validate(batches, max(plog.config.max_message_bytes, len(batches)), False)
            except core_records.RecordBatchError as exc:
                raise errors.for_code(exc.code)(f"{self.tp}: {exc}") from None
        sequenced = info.producer_id >= 0 and info.base_sequence >= 0  # coordinators write without sequences
        if sequenced:
            duplicate = self.producer_state.check(info.producer_id, info.producer_epoch, info.base_sequence,
                                                  info.last_sequence)
            if duplicate is not None:
                log.debug("%s: duplicate batch of producer %d (seq %d-%d)", self.tp, info.producer_id,
                          duplicate.first_sequence, duplicate.last_sequence)
                return AppendResult(duplicate.first_offset, duplicate.last_offset, -1, duplicate.timestamp,
                                    0, 0)
        result = plog.append_validated(batches, info, self.leader_epoch)
        if sequenced:
            self.producer_state.update(info.producer_id, info.producer_epoch, info.base_sequence,
                                       info.last_sequence, result.first_offset, result.last_offset,
                                       result.max_timestamp)
        if info.producer_id >= 0 and info.is_transactional:
            self.producer_state.begin(info.producer_id, result.first_offset)
        self._snapshot_if_rolled()
        self.maybe_advance_high_watermark()
        return result

    def write_marker(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int) -> int:
        """WriteTxnMarkers: append the COMMIT/ABORT control batch that closes the producer's
        transaction here; returns its offset. An older producer epoch or coordinator epoch is refused."""
        self.producer_state.check_marker_epoch(producer_id, producer_epoch, coordinator_epoch)
        batch = markers.control_batch(producer_id, producer_epoch, commit, coordinator_epoch, wall_ms())
        info = core_records.validate(batch, len(batch), False)
        result = self.log.append_validated(batch, info, self.leader_epoch)
        self._complete(producer_id, producer_epoch, result.first_offset, commit, True, coordinator_epoch)
        self._snapshot_if_rolled()
        self.maybe_advance_high_watermark()
        return result.first_offset

    def _complete(self, producer_id: int, epoch: int, marker_offset: int, commit: bool, index: bool,
                  coordinator_epoch: int = -1) -> None:
        before = len(self.producer_state.aborted)
        self.producer_state.complete(producer_id, epoch, marker_offset, commit, coordinator_epoch)
        if index and len(self.producer_state.aborted) > before:
            first = self.producer_state.first_unstable_offset()  # Kafka's LSO once the marker is in
            try:
                producer_snapshot.append_aborted(self.log.directory, self._segment_base(marker_offset),
                                                 self.producer_state.aborted[-1],
                                                 first if first is not None else marker_offset + 1)
            except OSError as exc:
                log.warning("%s: .txnindex not written: %s", self.tp, exc)

    @property
    def last_stable_offset(self) -> int:
        """Below the oldest open transaction and the high watermark: what read_committed sees."""
        first = self.producer_state.first_unstable_offset()
        hw = self.log.high_watermark
        return hw if first is None else min(first, hw)

    def update_follower(self, replica_id: int, fetch_offset: int, now: int) -> None:
        """A follower's Fetch: its fetch offset is its log end offset (Kafka's updateFetchState)."""
        state = self.followers.get(replica_id)
        if state is None:
            raise errors.NotLeaderOrFollowerError(
                f"broker {replica_id} is not a replica of {self.tp} (replicas {self.replicas})")
        if state.resting_on is not None:  # the session's fetches that skipped it found it caught up
            state.wake(state.resting_on)
        leader_leo = self.log.log_end_offset
        if fetch_offset >= leader_leo:
            state.last_caught_up_ms = max(state.last_caught_up_ms, now)
        elif fetch_offset >= state.last_fetch_leader_leo >= 0:
            state.last_caught_up_ms = max(state.last_caught_up_ms, state.last_fetch_ms)
        state.log_end_offset = fetch_offset
        state.last_fetch_leader_leo = leader_leo
        state.last_fetch_ms = now

    def maybe_advance_high_watermark(self) -> bool:
        """The high watermark is the lowest log end offset in the ISR; it never moves back."""
        plog = self.log
        hw = plog.log_end_offset
        if plog.high_watermark >= hw:
            return False  # at the log end already (every follower fetch of an idle partition asks)
        for r in self.isr:
            if r != self.broker_id:
                state = self.followers.get(r)
                hw = min(hw, state.log_end_offset if state is not None else -1)
        if hw > plog.high_watermark:
            plog.update_high_watermark(hw)
            return True
        return False

    def lagging_isr_members(self, now: int, max_lag_ms: int) -> list[int]:
        """ISR followers that have not caught up for longer than replica.lag.time.max.ms."""
        out = []
        for r in self.isr:
            if r == self.broker_id:
                continue
            state = self.followers.get(r)
            if state is None or now - state.caught_up_ms() > max_lag_ms:
                out.append(r)
        return out

    def may_join_isr(self, replica_id: int) -> bool:
        """Kafka's isFollowerInSync for expansion: caught up to the high watermark and into the
        current leader epoch."""
        if replica_id in self.isr or replica_id not in self.replicas:
            return False
        state = self.followers.get(replica_id)
        return (state is not None and state.log_end_offset >= self.log.high_watermark
                and state.log_end_offset >= self.leader_epoch_start_offset)

    def check_leader_epoch(self, current_leader_epoch: int) -> None:
        """KIP-320 fencing: -1 means the requester does not know epochs."""
        if current_leader_epoch < 0 or current_leader_epoch == self.leader_epoch:
            return
        if current_leader_epoch < self.leader_epoch:
            raise errors.FencedLeaderEpochError(
                f"{self.tp}: leader epoch {current_leader_epoch} is older than the current {self.leader_epoch}")
        raise errors.UnknownLeaderEpochError(
            f"{self.tp}: leader epoch {current_leader_epoch} is newer than the known {self.leader_epoch}")

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        return self.log.leader_epochs.end_offset_for(epoch, self.log.log_end_offset)

    # -- follower: appends from the leader and truncation -----------------------------------

    def append_as_follower(self, batches: memoryview, leader_high_watermark: int) -> int:
        """Append what the leader sent (its offsets and epochs, byte for byte); returns the bytes
        appended. A trailing partial batch (cut by the fetch size) is left for the next fetch."""
        plog = self.log
        appended = 0
        if len(batches):
            headers, valid, _ = core_records.scan_batches(batches, verify_crc=False)
            if valid:
                leo = plog.log_end_offset
                result = plog.append_as_follower(batches[:valid])
                if result.first_offset >= 0:
                    appended = valid
                    for header in headers:
                        if header.base_offset >= leo:
                            self._track_producer(header, batches[header.position:header.position + header.size],
                                                 index_aborts=True)
                    self._snapshot_if_rolled()
        plog.update_high_watermark(min(leader_high_watermark, plog.log_end_offset))
        return appended

    def truncate_to(self, offset: int) -> None:
        if offset >= self.log.log_end_offset:
            return
        log.info("%s: truncating from %d to %d (leader epoch %d)", self.tp, self.log.log_end_offset, offset,
                 self.leader_epoch)
        self.log.truncate_to(offset)
        for snapshot in producer_snapshot.snapshot_offsets(self.log.directory):
            if snapshot > self.log.log_end_offset:
                producer_snapshot.snapshot_path(self.log.directory, snapshot).unlink(missing_ok=True)
        self._rebuild_producer_state()  # open and aborted transactions included

    def truncate_fully_and_start_at(self, offset: int) -> None:
        log.info("%s: log restarts at %d (below the leader's log start offset)", self.tp, offset)
        self.log.truncate_fully_and_start_at(offset)
        self.producer_state = ProducerStateManager()
        for snapshot in producer_snapshot.snapshot_offsets(self.log.directory):
            producer_snapshot.snapshot_path(self.log.directory, snapshot).unlink(missing_ok=True)
        producer_snapshot.remove_stale_txn_indexes(self.log.directory, ())

    # -- reads --------------------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int, isolation_level: int, from_follower: bool,
             min_one_batch: bool) -> ReadResult:
        """Followers read to the log end, read_uncommitted consumers to the high watermark,
        read_committed ones to the last stable offset, with the aborted transactions in range."""
        plog = self.log
        hw = plog.high_watermark
        lso = self.last_stable_offset
        if from_follower:
            upper = None
        else:
            upper = lso if isolation_level == READ_COMMITTED else hw
        records = plog.read(offset, max_bytes, upper, min_one_batch)
        aborted = None
        if isolation_level == READ_COMMITTED and not from_follower:
            # every aborted transaction overlapping [offset, lso) (this read's upper bound): a superset of
            # those in the returned bytes, which clients filter by producer id and offsets anyway
            aborted = self.producer_state.aborted_between(offset, lso) if records is not None else []
        return ReadResult(records, hw, lso, plog.log_start_offset, aborted)

    def offset_for_timestamp(self, timestamp: int, isolation_level: int,
                             lagging_is_error: bool = True) -> tuple[int, int] | None:
        """ListOffsets from a consumer: latest answers the high watermark (read_uncommitted) or the
        last stable offset (read_committed), what those consumers can read, as Kafka. A new leader
        whose high watermark is still below the start of its epoch does not know the true one yet:
        latest, and a lookup that finds nothing below it, answer OFFSET_NOT_AVAILABLE (retriable),
        as Kafka 2.8 does (KIP-207) from v1 on, rather than an offset a consumer would wrongly reset
        to (``lagging_is_error=False``: v0, which Kafka answers the old way)."""
        bound = self.last_stable_offset if isolation_level == READ_COMMITTED else self.log.high_watermark
        if timestamp == -2:  # earliest: the log start offset, also while the log is empty
            return self.log.log_start_offset, -1
        if timestamp != -1:
            found = self.log.offset_for_timestamp(timestamp)
            if found is not None and found[0] < bound:
                return found
        if lagging_is_error and self.leader_epoch_start_offset > self.log.high_watermark:
            raise errors.OffsetNotAvailableError(
                f"{self.tp}: the high watermark {self.log.high_watermark} is not known yet; leader epoch "
                f"{self.leader_epoch} starts at {self.leader_epoch_start_offset}")
        return (bound, -1) if timestamp == -1 else None

    def max_timestamp_record(self, isolation_level: int, from_replica: bool = False) -> tuple[int, int, int] | None:
        """ListOffsets MAX_TIMESTAMP (KIP-734): (offset, timestamp, leader epoch) of the record with
        the largest timestamp; None when the log is empty or, for a consumer, when that record is
        not below what it may read (Kafka filters the answer by the last fetchable offset)."""
        found = self.log.max_timestamp_record()
        if found is None or from_replica:
            return found
        bound = self.last_stable_offset if isolation_level == READ_COMMITTED else self.log.high_watermark
        return found if found[0] < bound else None


def error_code_of(exc: BaseException) -> int:
    return exc.code if isinstance(exc, errors.KafkaError) else errors.UnknownServerError.code
