"""One log segment: ``<base>.log`` plus its ``.index`` and ``.timeindex``, as in Kafka.

The base offset is <= every offset in the segment. Appends go through the shared appender; an
offset index entry (largest offset of the append, its file position) is added once more than
``index.interval.bytes`` were appended since the last entry, so lookups land within ~4 KiB of the
target and the rest is a scan of batch headers. Reads return file ranges, never bytes.

``preallocate``: a segment file created for the log gets the length segment.bytes at once, and is cut to its data
when the segment is rolled or closed (apache/kafka clients/.../common/record/FileRecords.java: ``openChannel``'s
RandomAccessFile.setLength, an ftruncate on Linux, and ``trim``); after a crash, recovery cuts the zero tail.
``roll_jitter_ms``: drawn for each segment as it is opened (LogConfig.randomSegmentJitter, as LogSegment.open),
the time-based roll comes that much before segment.ms.

Not thread-safe: one event loop owns a partition's log.
"""
from __future__ import annotations

import logging
import mmap
import os
from pathlib import Path
from typing import NamedTuple

from kbroker import crashpoints
from kbroker._core import records
from kbroker._core.appender import Appender
from kbroker._core.index import OffsetIndex, TimeIndex
from kbroker.config.topic import LogConfig
from kbroker.log import legacy
from kbroker.log.compression import decompress_records
from kbroker.log.names import DELETED_SUFFIX, INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, segment_file_stem

log = logging.getLogger(__name__)

INT32_MAX = (1 << 31) - 1


class FileSlice(NamedTuple):
    """``length`` bytes of an open segment file from ``position``: what a Fetch sends with sendfile."""

    fd: int
    position: int
    length: int

    def read(self) -> bytes:
        """The bytes themselves (tests and tools only; Fetch never copies)."""
        return os.pread(self.fd, self.length, self.position)


class Segment:
    def __init__(self, directory: Path, base_offset: int, config: LogConfig, appender: Appender,
                 *, active: bool, created_ms: int) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.config = config
        self._appender = appender
        stem = directory / segment_file_stem(base_offset)
        self.log_path = stem.with_suffix(LOG_SUFFIX)
        self.index_path = stem.with_suffix(INDEX_SUFFIX)
        self.time_index_path = stem.with_suffix(TIME_INDEX_SUFFIX)
        try:
            self.fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
            created = True
        except FileExistsError:
            self.fd = os.open(self.log_path, os.O_RDWR | os.O_CLOEXEC)
            created = False
        if created and config.preallocate:
            try:
                os.ftruncate(self.fd, config.segment_bytes)
            except OSError:
                os.close(self.fd)
                raise
        # a file found here is all data (a preallocated one was cut when closed; after a crash recovery cuts it)
        self.size = 0 if created else os.fstat(self.fd).st_size
        self.roll_jitter_ms = config.random_segment_jitter()
        self.active = active
        self.created_ms = created_ms
        self._open_indexes(writable=active)
        last_ts, last_ts_offset = self.time_index.last_entry
        self.max_timestamp = last_ts
        self.offset_of_max_timestamp = last_ts_offset
        # Time-based roll counts from the first batch's max timestamp (Kafka's rollingBasedTimestamp).
        self.rolling_base_timestamp = -1
        if self.size:  # a magic 0/1 entry may be shorter than a v2 header
            try:
                self.rolling_base_timestamp = self.header_at(0).max_timestamp
            except records.RecordBatchError:
                pass  # damaged: recovery decides
        self.bytes_since_last_index_entry = 0

    def _open_indexes(self, writable: bool) -> None:
        size = self.config.segment_index_bytes
        self.offset_index = OffsetIndex(str(self.index_path), self.base_offset, size, writable)
        self.time_index = TimeIndex(str(self.time_index_path), self.base_offset, size, writable)

    def __repr__(self) -> str:
        return f"Segment({self.log_path}, size={self.size})"

    # -- writing -----------------------------------------------------------------------------

    def append(self, buf: bytearray | memoryview, largest_offset: int, largest_timestamp: int,
               offset_of_largest_timestamp: int) -> int:
        """Write validated, offset-assigned batches at the end, done when this returns; returns their
        file position. On an OSError the file is cut back to its old size and the error propagates."""
        position = self.size
        if crashpoints.ARMED:  # a write cut short by the crash: part of these batches on disk
            crashpoints.crash_point("segment.append.torn", lambda rng: os.pwrite(
                self.fd, crashpoints.torn_prefix(buf, rng), position))
        try:
            self._appender.write(self.fd, position, buf)
        except OSError:
            self._cut_back(position)
            raise
        self.size = position + len(buf)
        if self.rolling_base_timestamp < 0:
            self.rolling_base_timestamp = largest_timestamp
        if largest_timestamp > self.max_timestamp:
            self.max_timestamp = largest_timestamp
            self.offset_of_max_timestamp = offset_of_largest_timestamp
        if crashpoints.ARMED:
            crashpoints.crash_point("segment.append.before_index")
        if self.bytes_since_last_index_entry > self.config.index_interval_bytes:
            self.offset_index.append(largest_offset, position)
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            self.bytes_since_last_index_entry = 0
        self.bytes_since_last_index_entry += len(buf)
        return position

    def _cut_back(self, size: int) -> None:
        try:
            os.ftruncate(self.fd, size)
        except OSError as exc:  # the dir goes offline anyway; recovery trims the tail
            log.error("could not cut %s back to %d bytes after a failed write: %s", self.log_path, size, exc)

    def indexes_full(self) -> bool:
        # The time index keeps its last slot for the final entry of become_inactive (Kafka's TimeIndex.isFull).
        return self.offset_index.is_full or self.time_index.entries >= self.time_index.max_entries - 1

    def can_hold_offset(self, offset: int) -> bool:
        return offset - self.base_offset <= INT32_MAX

    def flush(self) -> None:
        self._appender.sync(self.fd)
        self.offset_index.flush()
        self.time_index.flush()

    def become_inactive(self) -> None:
        """On roll: record the final max timestamp and trim both indexes to their entries."""
        try:
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
        except IndexError:
            pass  # full: the last entry stays the best available
        self.offset_index.trim()
        self.time_index.trim()
        self.trim()
        self.active = False

    def trim(self) -> None:
        """Cut a preallocated file to its data (Kafka's FileRecords.trim); nothing to do for any other."""
        if os.fstat(self.fd).st_size > self.size:
            os.ftruncate(self.fd, self.size)

    # -- reading -----------------------------------------------------------------------------

    def header_at(self, position: int) -> records.BatchHeader:
        """The header of the batch at ``position``, or a magic 0/1 entry's (a topic below message
        format 0.11 stores them) described as one batch: its last offset, its timestamp."""
        return records.parse_header(os.pread(self.fd, records.HEADER_SIZE, position), 0, True)

    def translate_offset(self, offset: int, start_position: int = 0) -> tuple[int, records.BatchHeader] | None:
        """Position and header of the first batch whose last offset is >= ``offset``."""
        _, position = self.offset_index.lookup(offset)
        position = max(position, start_position)
        while position < self.size:
            header = self.header_at(position)
            if header.base_offset + header.last_offset_delta >= offset:
                return position, header
            position += header.size
        return None

    def read(self, start_offset: int, max_bytes: int, max_position: int | None = None,
             min_one_batch: bool = False) -> FileSlice | None:
        """Bytes from the batch holding ``start_offset``, at most ``max_bytes`` (raised to one whole
        batch with ``min_one_batch``), never past ``max_position``. None if no such batch here."""
        found = self.translate_offset(start_offset)
        if found is None:
            return None
        position, header = found
        limit = self.size if max_position is None else min(self.size, max_position)
        if position >= limit:
            return FileSlice(self.fd, position, 0)
        wanted = max(max_bytes, header.size) if min_one_batch else max_bytes
        return FileSlice(self.fd, position, min(limit - position, wanted))

    def next_offset(self) -> int:
        """One past the last offset in the segment (base offset when empty)."""
        last_indexed, position = self.offset_index.lookup(self.offset_index.last_offset)
        next_offset = self.base_offset
        while position < self.size:
            header = self.header_at(position)
            next_offset = header.base_offset + header.last_offset_delta + 1
            position += header.size
        return next_offset

    def find_offset_by_timestamp(self, timestamp: int, start_offset: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record at or after ``start_offset`` whose timestamp is
        >= ``timestamp``; None if this segment has none."""
        _, ts_offset = self.time_index.lookup(timestamp)
        _, position = self.offset_index.lookup(max(ts_offset, start_offset))
        while position < self.size:
            header = self.header_at(position)
            if header.max_timestamp >= timestamp and header.base_offset + header.last_offset_delta >= start_offset:
                found = self.first_record_at_or_after(header, position, timestamp)
                if found is not None:
                    return max(found[0], start_offset), found[1]
            position += header.size
        return None

    def first_record_at_or_after(self, header: records.BatchHeader, position: int,
                                 timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record of the batch at ``position`` whose timestamp is
        >= ``timestamp`` (the batch is read and, if compressed, decompressed); None if none is."""
        batch = os.pread(self.fd, header.size, position)
        if header.magic < 2:  # a magic 0/1 entry (message.format.version < 0.11): its messages in order
            for m in legacy.read_records(batch, verify_crc=False):
                if m.timestamp >= timestamp:
                    return m.offset, m.timestamp
            return None
        section = None
        if header.compression:
            section = decompress_records(header.compression, memoryview(batch)[records.HEADER_SIZE:])
        return records.first_record_at_or_after(batch, timestamp, section)

    def largest_timestamp(self) -> int:
        """Newest record timestamp, or the file's mtime when the segment has none (Kafka's rule)."""
        if self.max_timestamp >= 0:
            return self.max_timestamp
        return int(os.fstat(self.fd).st_mtime * 1000)

    # -- recovery and truncation ----------------------------------------------------------

    def recover(self) -> int:
        """Re-validate every batch, rebuild both indexes, cut the file at the first bad byte.
        Returns how many bytes were cut."""
        if not self.active:
            self._reopen_indexes(writable=True)
        self.offset_index.reset()
        self.time_index.reset()
        self.max_timestamp, self.offset_of_max_timestamp = -1, self.base_offset
        self.rolling_base_timestamp = -1
        self.bytes_since_last_index_entry = 0
        valid = 0
        if self.size:
            with mmap.mmap(self.fd, self.size, prot=mmap.PROT_READ) as mm, memoryview(mm) as view:
                headers, valid, _ = records.scan_batches(view, verify_crc=True)
            valid = self._reindex(headers, valid)
        cut = self.size - valid
        if cut:
            log.warning("%s: found %d bytes of invalid or torn data at byte position %d; truncating",
                        self.log_path, cut, valid)
            os.ftruncate(self.fd, valid)
            self.size = valid
            crashpoints.crash_point("segment.recover.after_cut")  # a second crash, during recovery
        if not self.active:
            self.become_inactive()
        return cut

    def _reindex(self, headers: list[records.BatchHeader], valid: int) -> int:
        expected = self.base_offset
        for header in headers:
            # Offsets must rise and stay addressable from this segment's base: anything else is damage.
            if header.base_offset < expected or not self.can_hold_offset(header.base_offset + header.last_offset_delta):
                log.warning("%s: batch at byte position %d has base offset %d, expected >= %d",
                            self.log_path, header.position, header.base_offset, expected)
                return header.position
            expected = header.base_offset + header.last_offset_delta + 1
            last_offset = header.base_offset + header.last_offset_delta
            if self.rolling_base_timestamp < 0:
                self.rolling_base_timestamp = header.max_timestamp
            if header.max_timestamp > self.max_timestamp:
                self.max_timestamp = header.max_timestamp
                self.offset_of_max_timestamp = last_offset
            if self.bytes_since_last_index_entry > self.config.index_interval_bytes:
                self.offset_index.append(last_offset, header.position)
                self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
                self.bytes_since_last_index_entry = 0
            self.bytes_since_last_index_entry += header.size
        return valid

    def _reopen_indexes(self, writable: bool) -> None:
        self.offset_index.close()
        self.time_index.close()
        self._open_indexes(writable)

    def make_active(self) -> None:
        """Reopen the indexes for appending (after truncation made this the last segment again)."""
        if not self.active:
            self._reopen_indexes(writable=True)
            self.active = True

    def truncate_to(self, offset: int) -> int:
        """Drop every batch whose base offset is >= ``offset``; returns the bytes removed."""
        found = self.translate_offset(offset)
        if found is None:
            return 0
        position, header = found
        if header.base_offset < offset:  # ``offset`` falls inside a batch: keep that batch whole
            position += header.size
        removed = self.size - position
        if removed:
            self.make_active()
            os.ftruncate(self.fd, position)
            self.size = position
            self.offset_index.truncate_to(offset)
            self.time_index.truncate_to(offset)
            self._load_largest_timestamp()
            _, last_position = self.offset_index.lookup(self.offset_index.last_offset)
            self.bytes_since_last_index_entry = position - last_position
        return removed

    def _load_largest_timestamp(self) -> None:
        """Kafka's loadLargestTimestamp: the last time-index entry, then the batches after its offset,
        which an index written every ``index.interval.bytes`` does not cover."""
        self.max_timestamp, self.offset_of_max_timestamp = self.time_index.last_entry
        _, position = self.offset_index.lookup(self.offset_of_max_timestamp)
        while position < self.size:
            header = self.header_at(position)
            if header.max_timestamp > self.max_timestamp:
                self.max_timestamp = header.max_timestamp
                self.offset_of_max_timestamp = header.base_offset + header.last_offset_delta
            position += header.size

    # -- lifecycle ---------------------------------------------------------------------------

    def close(self) -> None:
        """Close files (idempotent); a writable index is trimmed to its entries on close. The active
        segment first records its max timestamp in the time index, as Kafka's LogSegment.close does:
        a clean restart opens segments without recovery and takes their max timestamp from there."""
        if self.fd < 0:
            return
        if self.active and self.max_timestamp >= 0:
            try:
                self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            except (IndexError, ValueError, OSError) as exc:  # closing must not fail; recovery rebuilds it
                log.warning("%s: could not record the max timestamp on close: %s", self.log_path, exc)
        self.offset_index.close()
        self.time_index.close()
        if self.active:
            try:
                self.trim()
            except OSError as exc:  # closing must not fail; recovery cuts the tail after an unclean stop
                log.warning("%s: could not cut the preallocated file to its data on close: %s", self.log_path, exc)
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def mark_deleted(self) -> None:
        """Rename the files with ``.deleted`` (Kafka's asynchronous delete); readers still holding
        the fd keep working until ``remove_files``. The paths follow the rename, so that
        ``remove_files`` never touches a new segment created meanwhile at the same base offset
        (the cleaner's swap does exactly that)."""
        for attr in ("log_path", "index_path", "time_index_path"):
            path = getattr(self, attr)
            if path.name.endswith(DELETED_SUFFIX):
                continue
            deleted = path.with_name(path.name + DELETED_SUFFIX)
            try:
                os.rename(path, deleted)
            except FileNotFoundError:
                pass
            setattr(self, attr, deleted)
        # the indexes keep no descriptor: a trim on close opens the file by its name, which is now this one
        self.offset_index.renamed(self.index_path)
        self.time_index.renamed(self.time_index_path)

    def remove_files(self) -> None:
        self.close()
        for path in (self.log_path, self.index_path, self.time_index_path):
            candidates = (str(path),) if path.name.endswith(DELETED_SUFFIX) else (str(path) + DELETED_SUFFIX, str(path))
            for candidate in candidates:
                try:
                    os.unlink(candidate)
                except FileNotFoundError:
                    pass
