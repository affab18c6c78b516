"""The log of one partition: ordered segments in ``<log dir>/<topic>-<partition>/``.

Offsets, kept as separate notions as in Kafka:
  log_start_offset  first offset a consumer may read (raised by retention and DeleteRecords)
  high_watermark    last committed offset + 1 (moved by replication; consumers read below it)
  log_end_offset    next offset to assign
  recovery_point    everything below is flushed and need not be re-validated after a crash

Every error raised to callers is a ``kbroker.errors.KafkaError``: a bad batch gets its Kafka code
and leaves the log untouched; an I/O failure marks the log offline (``KafkaStorageError``).
"""
from __future__ import annotations

import bisect
import collections
import itertools
import logging
import mmap
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from kbroker import errors
from kbroker._core import records
from kbroker._core.appender import Appender
from kbroker._core.index import CorruptIndexError
from kbroker.clock import wall_ms
from kbroker.config.topic import LogConfig
from kbroker.crashpoints import crash_point
from kbroker.log import legacy, legacy_append, record_checks
from kbroker.log.leader_epoch import CHECKPOINT_NAME as LEADER_EPOCH_CHECKPOINT, LeaderEpochCache
from kbroker.log.legacy_append import LegacyAppendInfo
from kbroker.log.names import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    TopicPartition,
    segment_paths,
)
from kbroker.log.segment import FileSlice, Segment
from kbroker.log.swap import complete_interrupted_swaps, fsync_dir, rename_segment_files

log = logging.getLogger(__name__)

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1


class AppendResult(NamedTuple):
    first_offset: int
    last_offset: int
    log_append_time: int  # -1 unless the topic uses LogAppendTime
    max_timestamp: int
    record_count: int
    size: int


@dataclass(slots=True)
class _PendingWrite:
    """An asynchronous write in flight: readers see up to ``end_position`` / ``next_offset`` once it
    and every earlier one are ``done``."""
    tag: int
    segment: Segment
    end_position: int
    next_offset: int
    done: bool = False


class UnexpectedAppendOffsetError(errors.OffsetOutOfRangeError):
    """Replicated batches do not continue the log: they start past its end or straddle it
    (Kafka's UnexpectedAppendOffsetException). Carries OFFSET_OUT_OF_RANGE's code."""


class WriteTracker:
    """Routes the appender's asynchronous completions to the logs that started the writes.
    One per appender (the log manager's); a log opened on its own gets a private one."""

    def __init__(self, appender: Appender) -> None:
        self.appender = appender
        self._next_tag = 1
        self._owners: dict[int, PartitionLog] = {}

    def new_tag(self, plog: PartitionLog) -> int:
        tag = self._next_tag
        self._next_tag += 1
        self._owners[tag] = plog
        return tag

    def reap(self, wait: bool = False) -> int:
        done = self.appender.reap(wait)
        for tag, err in done:
            owner = self._owners.pop(tag, None)
            if owner is not None:
                owner._write_done(tag, err)
        return len(done)

    def drain(self, plog: PartitionLog) -> None:
        while plog._pending:
            self.reap(wait=True)


class PartitionLog:
    def __init__(self, directory: Path, tp: TopicPartition, config: LogConfig, appender: Appender, *,
                 recovery_point: int = 0, log_start_offset: int = 0, high_watermark: int = 0,
                 recover: bool = True, clock: Callable[[], int] = wall_ms,
                 on_io_error: Callable[[PartitionLog, OSError], None] | None = None,
                 tracker: WriteTracker | None = None) -> None:
        self.directory = directory
        self.directory_name = str(directory)
        self._tracker = tracker if tracker is not None else WriteTracker(appender)
        self._pending: collections.deque[_PendingWrite] = collections.deque()  # oldest first
        self.tp = tp
        self.config = config
        self._appender = appender
        self._clock = clock
        self._on_io_error = on_io_error
        self.offline = False
        self.segments: list[Segment] = []
        self._bases: list[int] = []
        self._pending_deletes: list[tuple[int, Segment]] = []
        self.unflushed_messages = 0
        self.last_flush_ms = clock()
        # Lowest offset truncated to since the cleaner last looked (its checkpoint must not exceed it).
        self.truncated_to: int | None = None
        directory.mkdir(parents=True, exist_ok=True)
        self.recovery_point = recovery_point
        self._recovered_from: int | None = None
        self._load(recover, log_start_offset)  # sets log_end_offset and written_offset
        self.log_start_offset = min(max(log_start_offset, self.segments[0].base_offset), self.log_end_offset)
        self.high_watermark = min(max(high_watermark, self.log_start_offset), self.log_end_offset)
        self._load_leader_epochs()

    def __repr__(self) -> str:
        return (f"PartitionLog({self.tp}, start={self.log_start_offset}, hw={self.high_watermark}, "
                f"end={self.log_end_offset}, segments={len(self.segments)})")

    # -- loading and recovery ------------------------------------------------------------

    def _load(self, recover: bool, log_start_offset: int) -> None:
        bases = []
        for entry in os.scandir(self.directory):
            name = entry.name
            if name.endswith(DELETED_SUFFIX) or name.endswith(".tmp"):
                os.unlink(entry.path)  # a delete or write the last run did not finish
        swapped = complete_interrupted_swaps(self.directory)  # a cleaner swap the last run did not finish
        for entry in os.scandir(self.directory):
            name = entry.name
            if name.endswith(LOG_SUFFIX) and name[:-len(LOG_SUFFIX)].isdigit():
                bases.append(int(name[:-len(LOG_SUFFIX)]))
        for entry in os.scandir(self.directory):  # indexes whose segment is gone
            stem, _, suffix = entry.name.rpartition(".")
            if "." + suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX) and stem.isdigit() and int(stem) not in bases:
                os.unlink(entry.path)
        bases.sort()
        now = self._clock()
        for i, base in enumerate(bases):
            self._add_segment(Segment(self.directory, base, self.config, self._appender,
                                      active=i == len(bases) - 1, created_ms=now))
        if not self.segments:
            self._add_segment(Segment(self.directory, log_start_offset, self.config, self._appender,
                                      active=True, created_ms=now))
        for segment in self.segments:
            if segment.base_offset in swapped:
                log.info("%s: rebuilding the indexes of swapped-in segment %s", self.tp, segment.log_path)
                segment.recover()
        self._check_indexes(recover)
        if recover:
            self._recover()
        self.log_end_offset = self.written_offset = self.active.next_offset()
        if recover:
            self.flush()

    def _load_leader_epochs(self) -> None:
        """Read ``leader-epoch-checkpoint``. Missing or malformed: rebuilt from every batch header.
        After recovery: entries from the first revalidated segment on are redone from its batches
        (the file may describe bytes recovery cut). Then trimmed to [log start, log end), as Kafka."""
        try:
            cache = self.leader_epochs = LeaderEpochCache(self.directory / LEADER_EPOCH_CHECKPOINT)
            if not cache.loaded:
                cache.rebuild((h.partition_leader_epoch, h.base_offset)
                              for h in self.batch_headers(self.log_start_offset))
            elif self._recovered_from is not None:
                below = [entry for entry in cache.entries if entry[1] < self._recovered_from]
                cache.rebuild(itertools.chain(below, ((h.partition_leader_epoch, h.base_offset)
                                                      for h in self.batch_headers(self._recovered_from))))
            cache.truncate_from_end(self.log_end_offset)
            cache.truncate_from_start(self.log_start_offset)
        except OSError as exc:
            raise self._io_failure(exc) from None

    def _check_indexes(self, recover: bool) -> None:
        """Rebuild the indexes that fail their sanity check. With ``recover`` the segments from the
        recovery point on are skipped: ``_recover`` rebuilds theirs anyway (after a crash the active
        segment's index is at its preallocated size and always fails), and each rebuild is a CRC
        pass over the whole segment."""
        checked = self.segments
        if recover:
            checked = self.segments[:max(0, bisect.bisect_right(self._bases, self.recovery_point) - 1)]
        for segment in checked:
            try:
                segment.offset_index.sanity_check()
                segment.time_index.sanity_check()
            except CorruptIndexError as exc:
                log.warning("%s: rebuilding indexes of %s: %s", self.tp, segment.log_path, exc)
                segment.recover()

    def _recover(self) -> None:
        """Re-validate every segment from the recovery point on; at the first damage cut the
        segment there and drop every later segment (nothing after damage survives)."""
        first = max(0, bisect.bisect_right(self._bases, self.recovery_point) - 1)
        self._recovered_from = self._bases[first]
        for i in range(first, len(self.segments)):
            segment = self.segments[i]
            if segment.recover():
                for later in self.segments[i + 1:]:
                    log.warning("%s: deleting %s, which follows damaged data", self.tp, later.log_path)
                    later.remove_files()
                del self.segments[i + 1:]
                del self._bases[i + 1:]
                segment.make_active()
                break

    def _add_segment(self, segment: Segment) -> None:
        self.segments.append(segment)
        self._bases.append(segment.base_offset)

    @property
    def active(self) -> Segment:
        return self.segments[-1]

    @property
    def size_bytes(self) -> int:
        return sum(segment.size for segment in self.segments)

    # -- append --------------------------------------------------------------------------

    def append(self, batches: bytearray | memoryview, leader_epoch: int = -1) -> AppendResult:
        """Validate client batches, assign offsets in place, write them. ``batches`` must be
        writable (the receive buffer): offsets are written into it, then it is appended as is."""
        return self.append_validated(batches, self.validate(batches), leader_epoch)

    def validate(self, batches: bytearray | memoryview) -> records.AppendInfo | LegacyAppendInfo:
        """Kafka's produce-path checks; raises the KafkaError of the first problem (for refused
        records a ``record_checks`` error naming each of them). Below message format 0.11 the
        records are also converted to the magic 0/1 messages the log will store (``legacy_append``)."""
        self._check_online()
        if self.config.record_magic < 2 and legacy.is_legacy(batches):  # Produce v0-2, stored as sent
            try:
                return legacy_append.prepare_from_message_set(batches, self.config, str(self.tp), self._clock())
            except errors.KafkaError as exc:
                raise type(exc)(f"{self.tp}: {exc.message}") from None
        info = self._validate_batches(batches)
        if self.config.record_magic < 2:
            try:
                return legacy_append.prepare_from_batches(batches, self.config)
            except errors.KafkaError as exc:
                raise type(exc)(f"{self.tp}: {exc.message}") from None
        return info

    def _validate_batches(self, batches: bytearray | memoryview) -> records.AppendInfo:
        try:
            info = records.validate(batches, self.config.max_message_bytes, True)
        except records.InvalidTimestampError as exc:
            # A batch claiming LogAppendTime: Kafka refuses each of its records (record errors).
            self._check_records(batches, True)
            raise errors.InvalidTimestampError(f"{self.tp}: {exc}") from None
        except records.RecordBatchError as exc:
            raise errors.for_code(exc.code)(f"{self.tp}: {exc}") from None
        if info.size > self.config.segment_bytes:
            raise errors.RecordListTooLargeError(
                f"{self.tp}: {info.size} bytes in one append exceed segment.bytes={self.config.segment_bytes}")
        config = self.config
        per_record = record_checks.needs_record_checks(config.compact, config.message_timestamp_difference_max_ms,
                                                       config.log_append_time)
        if info.compression or per_record:
            self._check_records(batches, per_record)
        return info

    def _check_records(self, batches: bytearray | memoryview, per_record: bool) -> None:
        """Each compressed batch is decompressed and its records walked (a payload that does not
        decompress or holds malformed records would poison every consumer: CORRUPT_MESSAGE /
        INVALID_RECORD, as Kafka); with ``per_record`` (a compacted topic, a timestamp bound, a
        batch claiming LogAppendTime) every batch's records meet Kafka's per-record rules."""
        headers, _, _ = records.scan_batches(batches, verify_crc=False)
        view = memoryview(batches)
        config = self.config
        try:
            for header in headers:
                if header.compression or per_record:
                    record_checks.check_batch(
                        view[header.position:header.position + header.size], header, str(self.tp),
                        compacted=config.compact, log_append_time_topic=config.log_append_time,
                        timestamp_difference_max_ms=config.message_timestamp_difference_max_ms, now=self._clock())
        except errors.CorruptMessageError as exc:
            raise errors.CorruptMessageError(f"{self.tp}: {exc}") from None
        except records.RecordBatchError as exc:
            raise errors.for_code(exc.code)(f"{self.tp}: {exc}") from None
        finally:
            view.release()

    def append_validated(self, batches: bytearray | memoryview, info: records.AppendInfo | LegacyAppendInfo,
                         leader_epoch: int = -1, wait: bool = True) -> AppendResult:
        """The second half of ``append``: offsets, roll, write, for batches ``validate`` accepted.

        With ``wait=False`` the write is started asynchronously: the offsets are taken at once, but
        readers (and the high watermark) see the batches only once the write completed, which
        ``written_offset`` tracks. ``batches`` must then stay unmodified until that happens."""
        self._check_online()
        if wait and self._pending:
            self._tracker.drain(self)
        now = self._clock()
        first_offset = self.log_end_offset
        append_time = now if self.config.log_append_time else -1
        if isinstance(info, LegacyAppendInfo):  # magic 0/1 messages, written now that the offsets are known
            batches, max_timestamp, offset_of_max = legacy_append.build(info, first_offset, append_time)
            next_offset = first_offset + info.record_count
            last_offset = next_offset - 1
            leader_epoch = -1  # Kafka's epoch cache records magic-2 batches only
        else:
            next_offset = records.assign_offsets(batches, first_offset, leader_epoch, append_time)
            last_offset = next_offset - 1
            max_timestamp = append_time if append_time >= 0 else info.max_timestamp
            offset_of_max = last_offset if append_time >= 0 else first_offset + info.offset_delta_of_max_timestamp
        size = len(batches)
        try:
            segment = self._maybe_roll(size, max_timestamp, last_offset, now)
            tag = None if wait else self._tracker.new_tag(self)
            segment.append(batches, last_offset, max_timestamp, offset_of_max, tag)
        except OSError as exc:
            raise self._io_failure(exc) from None
        if tag is None:
            self.written_offset = next_offset
        else:
            self._pending.append(_PendingWrite(tag, segment, segment.size, next_offset))
        self.log_end_offset = next_offset
        if leader_epoch >= 0:
            self._assign_epoch(leader_epoch, first_offset)
        self.unflushed_messages += info.record_count
        if self.unflushed_messages >= self.config.flush_messages:
            self.flush()
        return AppendResult(first_offset, last_offset, append_time, max_timestamp, info.record_count, size)

    def append_as_follower(self, batches: bytes | bytearray | memoryview, allow_gaps: bool = False) -> AppendResult:
        """Append batches fetched from the leader: offsets, leader epochs and timestamps are kept
        byte for byte (nothing is assigned), and each batch's epoch goes into the epoch cache.

        ``batches`` may be a view into a larger receive buffer; it is not modified. Leading batches
        wholly below the log end offset (a retried fetch overlapping what was already appended) are
        skipped; a trailing incomplete batch is ignored, as Kafka's fetch-response parsing ignores
        one; after that the batches must continue the log exactly, else UnexpectedAppendOffsetError
        (with ``allow_gaps``, as a copy of a compacted log needs, each batch need only start past the last).
        Validation is the replication one (control batches, LogAppendTime, sparse batches are fine;
        no size limit, the leader accepted them) and covers every batch before anything is written.
        Returns first_offset -1 when nothing was left to append. Written synchronously."""
        self._check_online()
        if self._pending:
            self._tracker.drain(self)
        view = memoryview(batches).cast("B")
        try:
            return self._append_as_follower(view, allow_gaps)
        finally:
            view.release()

    def _append_as_follower(self, view: memoryview, allow_gaps: bool = False) -> AppendResult:
        headers, whole, status = records.scan_batches(view, verify_crc=False)
        if status == 2:
            position = headers[-1].position + headers[-1].size if headers else 0
            raise errors.CorruptMessageError(
                f"{self.tp}: replicated data has a corrupt batch frame at byte {position} of {len(view)}")
        leo = self.log_end_offset
        skip = 0
        while skip < len(headers) and headers[skip].last_offset < leo:
            skip += 1
        headers = headers[skip:]
        if not headers:
            return AppendResult(-1, -1, -1, -1, 0, 0)
        expected = leo
        for header in headers:
            # A copy of a compacted log (a future replica) has gaps between batches; a fetch never does.
            # A legacy compressed wrapper is known by its last offset only (its first is inside the payload).
            wrapped = header.magic < 2 and header.compression != 0
            if (header.base_offset < expected
                    or (header.base_offset > expected and not allow_gaps and not wrapped)):
                where = "the log end offset" if expected == leo else "the previous batch's end"
                raise UnexpectedAppendOffsetError(
                    f"{self.tp}: replicated batch at offsets [{header.base_offset}, {header.last_offset}] "
                    f"does not start at {where} {expected}")
            expected = header.last_offset + 1
        start = headers[0].position
        self._validate_replicated(view, headers, whole)

        # Written in groups of about index.interval.bytes (a group ends once it reaches that
        # size): each Segment.append adds at most one index entry, so one write per fetch would
        # leave a whole fetch behind a single entry; and each group may roll the segment.
        first_offset = headers[0].base_offset
        interval = max(1, self.config.index_interval_bytes)
        max_timestamp, record_count, i = -1, 0, 0
        now = self._clock()
        while i < len(headers):
            j = i
            group_max_ts, group_offset_of_max, size = -1, -1, 0
            while j < len(headers) and (j == i or (size < interval and
                                                  size + headers[j].size <= self.config.segment_bytes)):
                header = headers[j]
                if header.max_timestamp > group_max_ts:
                    group_max_ts, group_offset_of_max = header.max_timestamp, header.last_offset
                size += header.size
                j += 1
            last = headers[j - 1]
            position = headers[i].position
            try:
                segment = self._maybe_roll(size, group_max_ts, last.last_offset, now)
                with view[position:position + size] as part:
                    segment.append(part, last.last_offset, group_max_ts,
                                   group_offset_of_max if group_offset_of_max >= 0 else last.last_offset, None)
            except OSError as exc:
                raise self._io_failure(exc) from None
            self.log_end_offset = self.written_offset = last.last_offset + 1
            for header in headers[i:j]:
                record_count += header.record_count
                if header.partition_leader_epoch >= 0:
                    self._assign_epoch(header.partition_leader_epoch, header.base_offset)
            max_timestamp = max(max_timestamp, group_max_ts)
            i = j
        self.unflushed_messages += record_count
        if self.unflushed_messages >= self.config.flush_messages:
            self.flush()
        return AppendResult(first_offset, self.log_end_offset - 1, -1, max_timestamp, record_count,
                            whole - start)

    def _validate_replicated(self, view: memoryview, headers: list[records.BatchHeader], whole: int) -> None:
        """The replication checks over each run of one format: v2 batches by the core, magic 0/1
        entries (a topic below message format 0.11) by ``legacy``. Nothing is written before."""
        i = 0
        while i < len(headers):
            j = i
            while j < len(headers) and (headers[j].magic < 2) == (headers[i].magic < 2):
                j += 1
            start = headers[i].position
            end = headers[j].position if j < len(headers) else whole
            try:
                with view[start:end] as part:
                    if headers[i].magic < 2:
                        legacy.validate_stored(part)
                    else:
                        records.validate(part, max(self.config.max_message_bytes, end - start), False)
            except records.RecordBatchError as exc:
                raise errors.for_code(exc.code)(f"{self.tp}: replicated data: {exc}") from None
            except errors.KafkaError as exc:
                raise type(exc)(f"{self.tp}: replicated data: {exc.message}") from None
            i = j

    def _assign_epoch(self, epoch: int, start_offset: int) -> None:
        try:
            self.leader_epochs.assign(epoch, start_offset)
        except OSError as exc:
            raise self._io_failure(exc) from None

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """OffsetsForLeaderEpoch against this log: see ``LeaderEpochCache.end_offset_for``."""
        return self.leader_epochs.end_offset_for(epoch, self.log_end_offset)

    def append_async(self, batches: bytearray | memoryview, leader_epoch: int = -1) -> AppendResult:
        """``append`` with the write started asynchronously (see ``append_validated``)."""
        return self.append_validated(batches, self.validate(batches), leader_epoch, wait=False)

    def _write_done(self, tag: int, err: int) -> None:
        """An asynchronous write finished: advance what readers may see over the completed prefix."""
        if err:
            # Nothing from this write on may ever become visible: the log goes offline, and
            # recovery at the next start cuts whatever partial bytes the failed write left.
            self._pending.clear()
            if not self.offline:
                self._io_failure(OSError(err, os.strerror(err)))
            return
        for write in self._pending:
            if write.tag == tag:
                write.done = True
                break
        while self._pending and self._pending[0].done:
            write = self._pending.popleft()
            write.segment.written_size = write.end_position
            self.written_offset = write.next_offset

    def complete_writes(self) -> None:
        """Wait until every asynchronous write of this log is done."""
        if self._pending:
            self._tracker.drain(self)

    def _maybe_roll(self, size: int, max_timestamp: int, last_offset: int, now: int) -> Segment:
        segment = self.active
        if segment.size == 0:
            return segment
        if segment.rolling_base_timestamp >= 0:
            waited = max_timestamp - segment.rolling_base_timestamp
        else:
            waited = now - segment.created_ms
        if (segment.size > self.config.segment_bytes - size
                or waited > self.config.max_segment_ms - segment.roll_jitter_ms
                or segment.indexes_full()
                or not segment.can_hold_offset(last_offset)):
            return self.roll(now)
        return segment

    def roll(self, now: int | None = None) -> Segment:
        """Close the active segment to appends and start a new one at the log end offset."""
        self._check_online()
        if self.active.size == 0:
            return self.active
        try:
            self.active.become_inactive()
            crash_point("log.roll.after_old_trimmed")
            segment = Segment(self.directory, self.log_end_offset, self.config, self._appender,
                              active=True, created_ms=self._clock() if now is None else now)
            crash_point("log.roll.after_new_segment")
        except OSError as exc:
            raise self._io_failure(exc) from None
        self._add_segment(segment)
        log.debug("%s: rolled new segment at offset %d", self.tp, segment.base_offset)
        return segment

    def flush(self) -> None:
        """fdatasync every segment from the recovery point on; the recovery point becomes the LEO."""
        if self.offline:
            return
        self.complete_writes()
        first = max(0, bisect.bisect_right(self._bases, self.recovery_point) - 1)
        try:
            for segment in self.segments[first:]:
                segment.flush()
        except OSError as exc:
            raise self._io_failure(exc) from None
        self.recovery_point = self.written_offset
        self.unflushed_messages = 0
        self.last_flush_ms = self._clock()

    def maybe_flush(self, now: int) -> bool:
        """Flush if ``flush.ms`` has passed since the last flush and something is unflushed."""
        if self.unflushed_messages and now - self.last_flush_ms >= self.config.flush_ms:
            self.flush()
            return True
        return False

    # -- read ----------------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int, max_offset: int | None = None,
             min_one_batch: bool = True) -> FileSlice | None:
        """Batches from the one holding ``offset``, at most ``max_bytes`` (at least one whole batch
        with ``min_one_batch``), only below ``max_offset`` (the high watermark for consumers; None
        for the log end offset). None when there is nothing to read yet."""
        self._check_online()
        if offset < self.log_start_offset or offset > self.log_end_offset:
            raise errors.OffsetOutOfRangeError(
                f"{self.tp}: offset {offset} is outside [{self.log_start_offset}, {self.log_end_offset}]")
        limit = self.written_offset if max_offset is None else min(max_offset, self.written_offset)
        if offset >= limit:
            return None
        try:
            i = bisect.bisect_right(self._bases, offset) - 1
            for segment in self.segments[max(i, 0):]:
                max_position = None
                if limit < self.written_offset and segment.base_offset <= limit:
                    bound = segment.translate_offset(limit)
                    max_position = bound[0] if bound is not None else None
                found = segment.read(offset, max_bytes, max_position, min_one_batch)
                if found is not None:
                    return found if found.length else None
        except OSError as exc:
            raise self._io_failure(exc) from None
        return None

    def read_bytes(self, offset: int, max_bytes: int, max_offset: int | None = None) -> bytes:
        """``read`` then the bytes themselves: for tests and tools, never the Fetch path."""
        found = self.read(offset, max_bytes, max_offset)
        return found.read() if found is not None else b""

    def batch_headers(self, start_offset: int = 0) -> Iterator[records.BatchHeader]:
        """Headers of every stored batch that ends at or after ``start_offset`` (state rebuilds:
        producer ids, leader epochs); no CRC check, no record bytes. Not the whole segment holding
        ``start_offset``: a producer-state replay from a snapshot must not apply again the batches
        the snapshot already holds (each ABORT marker twice: duplicate aborted transactions)."""
        self._check_online()
        first = max(0, bisect.bisect_right(self._bases, start_offset) - 1)
        for segment in list(self.segments[first:]):
            if segment.size:
                with mmap.mmap(segment.fd, segment.size, prot=mmap.PROT_READ) as mm, memoryview(mm) as view:
                    headers, _, _ = records.scan_batches(view, verify_crc=False)
                if headers and headers[0].base_offset + headers[0].last_offset_delta < start_offset:
                    headers = [h for h in headers if h.base_offset + h.last_offset_delta >= start_offset]
                yield from headers

    def batch_headers_around(self, offset: int, wanted: int) -> tuple[list[records.BatchHeader],
                                                                    Iterator[records.BatchHeader]]:
        """For a producer-state load from a snapshot at ``offset``, one scan of each segment: the headers of
        the batches below ``offset`` in the segment holding ``offset - 1``, and in the one before it too when
        that holds fewer than ``wanted`` (a roll just before the snapshot): where the snapshot finds the
        batches it does not keep. Then those of every batch ending at or after ``offset`` (the tail to
        replay, as ``batch_headers(offset)``)."""
        self._check_online()
        first = max(0, bisect.bisect_right(self._bases, offset - 1) - 1)
        headers = self._segment_headers(self.segments[first])
        earlier = [h for h in headers if h.last_offset < offset]
        later: Iterator[records.BatchHeader] = iter(headers[len(earlier):])
        if len(earlier) < wanted and first > 0:
            earlier = self._segment_headers(self.segments[first - 1]) + earlier
        if first + 1 < len(self.segments):
            later = itertools.chain(later, self.batch_headers(self._bases[first + 1]))
        return earlier, later

    @staticmethod
    def _segment_headers(segment: Segment) -> list[records.BatchHeader]:
        if not segment.size:
            return []
        with mmap.mmap(segment.fd, segment.size, prot=mmap.PROT_READ) as mm, memoryview(mm) as view:
            headers, _, _ = records.scan_batches(view, verify_crc=False)
        return list(headers)

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """ListOffsets: (offset, timestamp) of the first record with a timestamp >= ``timestamp``;
        -2 (earliest) and -1 (latest) as Kafka. None when no record is that new."""
        self._check_online()
        if timestamp == EARLIEST_TIMESTAMP:
            return self.log_start_offset, -1
        if timestamp == LATEST_TIMESTAMP:
            return self.log_end_offset, -1
        try:
            for segment in self.segments:
                if segment.size and segment.largest_timestamp() >= timestamp:
                    found = segment.find_offset_by_timestamp(timestamp, self.log_start_offset)
                    if found is not None:
                        return found
        except OSError as exc:
            raise self._io_failure(exc) from None
        return None

    def max_timestamp_record(self) -> tuple[int, int, int] | None:
        """ListOffsets MAX_TIMESTAMP: (offset, timestamp, leader epoch of its batch) of the first
        record holding the largest timestamp, as Kafka finds it: the first segment with the
        largest max timestamp, its first batch with that max timestamp, that batch's first record
        with it (a LogAppendTime batch: its first record). None for an empty log. No request reaches it since
        ListOffsets is served to Kafka 2.8's v6 (v7, KIP-734, is 3.0's); its one caller is
        Partition.max_timestamp_record."""
        self._check_online()
        try:
            segments = [s for s in self.segments if s.written_size]
            if not segments:
                return None
            segment = max(segments, key=lambda s: s.max_timestamp)  # the first of equals, as Scala's maxBy
            target = segment.max_timestamp
            _, position = segment.offset_index.lookup(max(segment.offset_of_max_timestamp, segment.base_offset))
            for start in (position, 0):  # from the indexed batch; a whole scan if that missed it
                while start < segment.written_size:
                    header = segment.header_at(start)
                    if header.max_timestamp == target:
                        found = segment.first_record_at_or_after(header, start, target)
                        if found is not None:
                            return found[0], found[1], header.partition_leader_epoch
                    start += header.size
        except OSError as exc:
            raise self._io_failure(exc) from None
        return None

    # -- offsets, retention, truncation ---------------------------------------------------

    def update_high_watermark(self, offset: int) -> int:
        """Clamped to what is written: a consumer can never be promised bytes still in flight."""
        self.high_watermark = min(max(offset, self.log_start_offset), self.written_offset)
        return self.high_watermark

    def delete_records_before(self, offset: int) -> int:
        """DeleteRecords: raise the log start offset to ``offset`` (<= high watermark), drop whole
        segments below it. Returns the new log start offset."""
        if offset > self.high_watermark:
            raise errors.OffsetOutOfRangeError(
                f"{self.tp}: cannot delete records before {offset}, above the high watermark {self.high_watermark}")
        if offset > self.log_start_offset:
            self.log_start_offset = offset
            self._delete_segments(lambda seg, nxt: nxt is not None and nxt.base_offset <= self.log_start_offset,
                                  "below the log start offset")
            self._truncate_epochs_from_start()
        return self.log_start_offset

    def _truncate_epochs_from_start(self) -> None:
        try:
            self.leader_epochs.truncate_from_start(self.log_start_offset)
        except OSError as exc:
            raise self._io_failure(exc) from None

    def delete_old_segments(self, now: int | None = None) -> int:
        """Retention: whole segments past ``retention.ms`` or beyond ``retention.bytes``, and those
        below the log start offset. Only data below the high watermark is eligible."""
        now = self._clock() if now is None else now
        deleted = self._delete_segments(
            lambda seg, nxt: nxt is not None and nxt.base_offset <= self.log_start_offset, "below the log start offset")
        if not self.config.delete:
            return deleted  # cleanup.policy=compact: only the log start offset deletes segments
        if self.config.retention_ms >= 0:
            deleted += self._delete_segments(
                lambda seg, nxt: now - seg.largest_timestamp() > self.config.retention_ms,
                f"past retention.ms={self.config.retention_ms}")
        if self.config.retention_bytes >= 0:
            excess = self.size_bytes - self.config.retention_bytes

            def beyond_size(seg: Segment, nxt: Segment | None) -> bool:
                nonlocal excess
                if excess - seg.size >= 0:
                    excess -= seg.size
                    return True
                return False

            deleted += self._delete_segments(beyond_size, f"beyond retention.bytes={self.config.retention_bytes}")
        return deleted

    def _delete_segments(self, predicate: Callable[[Segment, Segment | None], bool], reason: str) -> int:
        doomed = []
        for i, segment in enumerate(self.segments):
            nxt = self.segments[i + 1] if i + 1 < len(self.segments) else None
            upper = nxt.base_offset if nxt is not None else self.log_end_offset
            if nxt is None and segment.size == 0:
                break
            if self.high_watermark >= upper and predicate(segment, nxt):
                doomed.append(segment)
            else:
                break
        if not doomed:
            return 0
        if len(doomed) == len(self.segments):
            self.roll()  # keep an active segment to append to
        now = self._clock()
        for segment in doomed:
            log.info("%s: deleting segment %s (%s)", self.tp, segment.log_path, reason)
            segment.mark_deleted()
            self._pending_deletes.append((now + self.config.file_delete_delay_ms, segment))
        del self.segments[:len(doomed)]
        del self._bases[:len(doomed)]
        self.log_start_offset = max(self.log_start_offset, self.segments[0].base_offset)
        self._truncate_epochs_from_start()
        self.remove_deleted_files(now)
        return len(doomed)

    def find_segments(self, old: list[Segment], sizes: list[int]) -> int | None:
        """Index of ``old`` in this log if those very segments are still there, consecutive,
        inactive and of these sizes; None otherwise (truncated, deleted or rolled away)."""
        first = next((i for i, seg in enumerate(self.segments) if seg is old[0]), None)
        if first is None or first + len(old) >= len(self.segments):
            return None
        current = self.segments[first:first + len(old)]
        if (any(a is not b for a, b in zip(current, old))
                or any(seg.active or seg.size != size or seg.written_size != size for seg, size in zip(old, sizes))):
            return None
        return first

    def replace_segments(self, old: list[Segment], sizes: list[int],
                         fault: Callable[[str], None] | None = None) -> bool:
        """Swap the cleaner's ``<base>.log.cleaned`` (+ indexes, base = ``old[0]``'s) in for the
        consecutive inactive segments ``old``, whose sizes must still be ``sizes``; False (nothing
        done) when the log changed since. Kafka's order, each step made durable (directory fsync)
        before the next: cleaned -> .swap (indexes, then the log file: a ``.log.swap`` means
        complete data); old segments -> .deleted (removed after file.delete.delay.ms); .swap ->
        final names. ``complete_interrupted_swaps`` finishes whatever a crash interrupted.
        ``fault(step)`` is called after each step (crash tests)."""
        self._check_online()
        first = self.find_segments(old, sizes)
        if first is None:
            return False
        base = old[0].base_offset
        cleaned, swap, final = (segment_paths(self.directory, base, suffix)
                                for suffix in (CLEANED_SUFFIX, SWAP_SUFFIX, ""))
        step = fault or (lambda name: crash_point(f"swap.{name}"))
        try:
            step("cleaned")
            rename_segment_files(self.directory, cleaned, swap, step, "swap")
            now = self._clock()
            for n, segment in enumerate(old):
                segment.mark_deleted()
                self._pending_deletes.append((now + self.config.file_delete_delay_ms, segment))
                if n == 0:
                    step("deleted-partial")
            fsync_dir(self.directory)
            step("deleted")
            rename_segment_files(self.directory, swap, final, step, "final")
            segment = Segment(self.directory, base, self.config, self._appender, active=False,
                              created_ms=old[0].created_ms)
        except OSError as exc:
            raise self._io_failure(exc) from None
        self.segments[first:first + len(old)] = [segment]
        self._bases[first:first + len(old)] = [base]
        log.info("%s: cleaned segments %s swapped in as %s (%d bytes, was %d)", self.tp,
                 [s.base_offset for s in old], final[0].name, segment.size, sum(sizes))
        return True

    def remove_deleted_files(self, now: int) -> None:
        """Close and unlink segments marked deleted once ``file.delete.delay.ms`` has passed (a
        fetch may still be sending from them until then)."""
        keep = []
        for due, segment in self._pending_deletes:
            if due <= now:
                segment.remove_files()
            else:
                keep.append((due, segment))
        self._pending_deletes = keep

    def truncate_to(self, offset: int) -> None:
        """Drop everything at or after ``offset`` (a follower diverging from its leader)."""
        self.complete_writes()
        if offset >= self.log_end_offset:
            return
        offset = max(offset, self.log_start_offset)
        self.truncated_to = offset if self.truncated_to is None else min(self.truncated_to, offset)
        try:
            while len(self.segments) > 1 and self.active.base_offset >= offset:
                self.segments.pop().remove_files()
                self._bases.pop()
            self.active.truncate_to(offset)
            self.active.make_active()
            self.log_end_offset = self.written_offset = self.active.next_offset()
            # Not ``offset``: a batch holding ``offset`` is kept whole, and so is its epoch's entry.
            self.leader_epochs.truncate_from_end(self.log_end_offset)
        except OSError as exc:
            raise self._io_failure(exc) from None
        self.high_watermark = min(self.high_watermark, self.log_end_offset)
        self.recovery_point = min(self.recovery_point, self.log_end_offset)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop every segment and restart the log empty at ``offset`` (Kafka's
        truncateFullyAndStartAt: a follower whose log end is below the leader's log start)."""
        self._check_online()
        self.complete_writes()
        try:
            for segment in self.segments:
                segment.remove_files()
            self.segments = []
            self._bases = []
            self._add_segment(Segment(self.directory, offset, self.config, self._appender,
                                      active=True, created_ms=self._clock()))
            self.leader_epochs.clear()
        except OSError as exc:
            raise self._io_failure(exc) from None
        self.log_start_offset = self.log_end_offset = self.written_offset = offset
        self.high_watermark = self.recovery_point = offset
        self.truncated_to = offset if self.truncated_to is None else min(self.truncated_to, offset)
        self.unflushed_messages = 0

    # -- lifecycle and failure -----------------------------------------------------------

    def close(self) -> None:
        if self._pending and not self.offline:
            self._tracker.drain(self)
        for segment in self.segments:
            segment.close()
        for _, segment in self._pending_deletes:
            segment.remove_files()
        self._pending_deletes = []

    def remove(self) -> None:
        """Delete this log's files and directory (topic deletion)."""
        self.close()
        for segment in self.segments:
            segment.remove_files()
        for entry in os.scandir(self.directory):
            os.unlink(entry.path)
        os.rmdir(self.directory)

    def _check_online(self) -> None:
        if self.offline:
            raise errors.KafkaStorageError(f"{self.tp}: log directory {self.directory.parent} is offline")

    def _io_failure(self, exc: OSError) -> errors.KafkaError:
        self.offline = True
        if self._on_io_error is not None:
            self._on_io_error(self, exc)
        else:
            log.error("%s: I/O error in %s, log is now offline: %s", self.tp, self.directory, exc)
        return errors.KafkaStorageError(f"{self.tp}: I/O error in {self.directory.parent}: {exc}")
