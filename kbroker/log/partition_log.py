"""The log of one partition: ordered segments in ``<log dir>/<topic>-<partition>/``, built from its parts,
each a module of its own: the segments and offsets (``local_log``), opening and recovery (``log_loader``),
reads (``log_reads``), retention (``retention``), the cleaner's swap (``swap``) and the checks batches
meet first (``log_validator``). What stays here is what writes: appends, a leader's and a follower's,
and truncation.

Every error raised to callers is a ``kbroker.errors.KafkaError``: a bad batch gets its Kafka code
and leaves the log untouched; an I/O failure marks the log offline (``KafkaStorageError``).
"""
from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from kbroker import errors
from kbroker._core import records
from kbroker._core.appender import Appender
from kbroker.clock import wall_ms
from kbroker.config.topic import LogConfig
from kbroker.log import legacy_append
from kbroker.log.legacy_append import LegacyAppendInfo
from kbroker.log.local_log import AppendResult, UnexpectedAppendOffsetError
from kbroker.log.log_loader import LogLoader
from kbroker.log.log_reads import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, LogReads
from kbroker.log.log_validator import validate_produce, validate_replicated
from kbroker.log.names import TopicPartition
from kbroker.log.retention import LogRetention
from kbroker.log.segment import Segment
from kbroker.log.swap import SegmentSwaps

__all__ = ["AppendResult", "EARLIEST_TIMESTAMP", "LATEST_TIMESTAMP", "PartitionLog", "UnexpectedAppendOffsetError"]


class PartitionLog(LogLoader, LogReads, LogRetention, SegmentSwaps):
    def __init__(self, directory: Path, tp: TopicPartition, config: LogConfig, appender: Appender, *,
                 recovery_point: int = 0, log_start_offset: int = 0, high_watermark: int = 0,
                 recover: bool = True, clock: Callable[[], int] = wall_ms,
                 on_io_error: Callable[[PartitionLog, OSError], None] | None = None) -> None:
        super().__init__(directory, tp, config, appender, recovery_point=recovery_point, clock=clock,
                         on_io_error=on_io_error)
        self._load(recover, log_start_offset)  # sets log_end_offset
        self.log_start_offset = min(max(log_start_offset, self.segments[0].base_offset), self.log_end_offset)
        self.high_watermark = min(max(high_watermark, self.log_start_offset), self.log_end_offset)
        self._load_leader_epochs()

    # -- append --------------------------------------------------------------------------

    def append(self, batches: bytearray | memoryview, leader_epoch: int = -1) -> AppendResult:
        """Validate client batches, assign offsets in place, write them. ``batches`` must be
        writable (the receive buffer): offsets are written into it, then it is appended as is."""
        return self.append_validated(batches, self.validate(batches), leader_epoch)

    def validate(self, batches: bytearray | memoryview) -> records.AppendInfo | LegacyAppendInfo:
        """Kafka's produce-path checks (``log_validator.validate_produce``); raises the KafkaError of
        the first problem."""
        self._check_online()
        return validate_produce(batches, self.config, str(self.tp), self._clock())

    def append_validated(self, batches: bytearray | memoryview, info: records.AppendInfo | LegacyAppendInfo,
                         leader_epoch: int = -1) -> AppendResult:
        """The second half of ``append``: offsets, roll, write, for batches ``validate`` accepted."""
        self._check_online()
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
            segment.append(batches, last_offset, max_timestamp, offset_of_max)
        except OSError as exc:
            raise self._io_failure(exc) from None
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
        Returns first_offset -1 when nothing was left to append."""
        self._check_online()
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
        validate_replicated(view, headers, whole, self.config, str(self.tp))

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
                                   group_offset_of_max if group_offset_of_max >= 0 else last.last_offset)
            except OSError as exc:
                raise self._io_failure(exc) from None
            self.log_end_offset = last.last_offset + 1
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

    def truncate_to(self, offset: int) -> None:
        """Drop everything at or after ``offset`` (a follower diverging from its leader)."""
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
            self.log_end_offset = self.active.next_offset()
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
        self.log_start_offset = self.log_end_offset = offset
        self.high_watermark = self.recovery_point = offset
        self.truncated_to = offset if self.truncated_to is None else min(self.truncated_to, offset)
        self.unflushed_messages = 0

    # -- lifecycle ------------------------------------------------------------------------

    def remove(self) -> None:
        """Delete this log's files and directory (topic deletion)."""
        self.close()
        for segment in self.segments:
            segment.remove_files()
        for entry in os.scandir(self.directory):
            os.unlink(entry.path)
        os.rmdir(self.directory)
