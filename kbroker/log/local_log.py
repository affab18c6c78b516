"""One partition's segments on disk and the offsets over them (Kafka's LocalLog and LogSegments): the
segment list, rolls, flushes, header scans, the offline state. What the other parts of a partition log
(``log_loader``, ``log_reads``, ``retention``, ``swap``) build on; ``partition_log.PartitionLog`` joins them.

Offsets, kept as separate notions as in Kafka:
  log_start_offset  first offset a consumer may read (raised by retention and DeleteRecords)
  high_watermark    last committed offset + 1 (moved by replication; consumers read below it)
  log_end_offset    next offset to assign
  recovery_point    everything below is flushed and need not be re-validated after a crash

Every error raised to callers is a ``kbroker.errors.KafkaError``: an I/O failure marks the log offline
(``KafkaStorageError``).
"""
from __future__ import annotations

import bisect
import logging
import mmap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple, Self

from kbroker import errors
from kbroker._core import records
from kbroker._core.appender import Appender
from kbroker.config.topic import LogConfig
from kbroker.crashpoints import crash_point
from kbroker.log.leader_epoch import LeaderEpochCache
from kbroker.log.names import TopicPartition
from kbroker.log.segment import Segment

log = logging.getLogger(__name__)


class AppendResult(NamedTuple):
    first_offset: int
    last_offset: int
    log_append_time: int  # -1 unless the topic uses LogAppendTime
    max_timestamp: int
    record_count: int
    size: int


class UnexpectedAppendOffsetError(errors.OffsetOutOfRangeError):
    """Replicated batches do not continue the log: they start past its end or straddle it
    (Kafka's UnexpectedAppendOffsetException). Carries OFFSET_OUT_OF_RANGE's code."""


class LocalLog:
    # Set once the segments are loaded (``log_loader.LogLoader``), before the log is handed out.
    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    leader_epochs: LeaderEpochCache

    def __init__(self, directory: Path, tp: TopicPartition, config: LogConfig, appender: Appender, *,
                 recovery_point: int, clock: Callable[[], int],
                 on_io_error: Callable[[Self, OSError], None] | None) -> None:
        self.directory = directory
        self.directory_name = str(directory)
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

    def __repr__(self) -> str:
        return (f"PartitionLog({self.tp}, start={self.log_start_offset}, hw={self.high_watermark}, "
                f"end={self.log_end_offset}, segments={len(self.segments)})")

    def _add_segment(self, segment: Segment) -> None:
        self.segments.append(segment)
        self._bases.append(segment.base_offset)

    @property
    def active(self) -> Segment:
        return self.segments[-1]

    @property
    def size_bytes(self) -> int:
        return sum(segment.size for segment in self.segments)

    def update_high_watermark(self, offset: int) -> int:
        """Clamped to [log start, log end]."""
        self.high_watermark = min(max(offset, self.log_start_offset), self.log_end_offset)
        return self.high_watermark

    # -- leader epochs -------------------------------------------------------------------

    def _assign_epoch(self, epoch: int, start_offset: int) -> None:
        try:
            self.leader_epochs.assign(epoch, start_offset)
        except OSError as exc:
            raise self._io_failure(exc) from None

    def _truncate_epochs_from_start(self) -> None:
        try:
            self.leader_epochs.truncate_from_start(self.log_start_offset)
        except OSError as exc:
            raise self._io_failure(exc) from None

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """OffsetsForLeaderEpoch against this log: see ``LeaderEpochCache.end_offset_for``."""
        return self.leader_epochs.end_offset_for(epoch, self.log_end_offset)

    # -- rolls and flushes ---------------------------------------------------------------

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
        first = max(0, bisect.bisect_right(self._bases, self.recovery_point) - 1)
        try:
            for segment in self.segments[first:]:
                segment.flush()
        except OSError as exc:
            raise self._io_failure(exc) from None
        self.recovery_point = self.log_end_offset
        self.unflushed_messages = 0
        self.last_flush_ms = self._clock()

    def maybe_flush(self, now: int) -> bool:
        """Flush if ``flush.ms`` has passed since the last flush and something is unflushed."""
        if self.unflushed_messages and now - self.last_flush_ms >= self.config.flush_ms:
            self.flush()
            return True
        return False

    # -- header scans --------------------------------------------------------------------

    def batch_headers(self, start_offset: int = 0) -> Iterator[records.BatchHeader]:
        """Headers of every stored batch that ends at or after ``start_offset`` (state rebuilds:
        producer ids, leader epochs); no CRC check, no record bytes. Not the whole segment holding
        ``start_offset``: a producer-state replay from a snapshot must not apply again the batches
        the snapshot already holds (each ABORT marker twice: duplicate aborted transactions)."""
        self._check_online()
        first = max(0, bisect.bisect_right(self._bases, start_offset) - 1)
        for segment in list(self.segments[first:]):
            if segment.size:
                headers = self._segment_headers(segment)
                if headers and headers[0].base_offset + headers[0].last_offset_delta < start_offset:
                    headers = [h for h in headers if h.base_offset + h.last_offset_delta >= start_offset]
                yield from headers

    @staticmethod
    def _segment_headers(segment: Segment) -> list[records.BatchHeader]:
        if not segment.size:
            return []
        with mmap.mmap(segment.fd, segment.size, prot=mmap.PROT_READ) as mm, memoryview(mm) as view:
            headers, _, _ = records.scan_batches(view, verify_crc=False)
        return list(headers)

    # -- lifecycle and failure -----------------------------------------------------------

    def close(self) -> None:
        for segment in self.segments:
            segment.close()
        for _, segment in self._pending_deletes:
            segment.remove_files()
        self._pending_deletes = []

    def _check_online(self) -> None:
        if self.offline:
            raise errors.KafkaStorageError(f"{self.tp}: log directory {self.directory.parent} is offline")

    def _io_failure(self: Self, exc: OSError) -> errors.KafkaError:
        self.offline = True
        if self._on_io_error is not None:
            self._on_io_error(self, exc)
        else:
            log.error("%s: I/O error in %s, log is now offline: %s", self.tp, self.directory, exc)
        return errors.KafkaStorageError(f"{self.tp}: I/O error in {self.directory.parent}: {exc}")
