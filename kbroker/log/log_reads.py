"""Reading a partition log: Fetch's file ranges (``read``: no bytes copied, ``network`` sends them
with sendfile), ListOffsets' lookups by timestamp, and the header scans a producer-state load from a
snapshot needs."""
from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterator

from kbroker import errors
from kbroker._core import records
from kbroker.log.local_log import LocalLog
from kbroker.log.segment import FileSlice

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1


class LogReads(LocalLog):
    def read(self, offset: int, max_bytes: int, max_offset: int | None = None,
             min_one_batch: bool = True) -> FileSlice | None:
        """Batches from the one holding ``offset``, at most ``max_bytes`` (at least one whole batch
        with ``min_one_batch``), only below ``max_offset`` (the high watermark for consumers; None
        for the log end offset). None when there is nothing to read yet."""
        self._check_online()
        if offset < self.log_start_offset or offset > self.log_end_offset:
            raise errors.OffsetOutOfRangeError(
                f"{self.tp}: offset {offset} is outside [{self.log_start_offset}, {self.log_end_offset}]")
        limit = self.log_end_offset if max_offset is None else min(max_offset, self.log_end_offset)
        if offset >= limit:
            return None
        try:
            i = bisect.bisect_right(self._bases, offset) - 1
            for segment in self.segments[max(i, 0):]:
                max_position = None
                if limit < self.log_end_offset and segment.base_offset <= limit:
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
            segments = [s for s in self.segments if s.size]
            if not segments:
                return None
            segment = max(segments, key=lambda s: s.max_timestamp)  # the first of equals, as Scala's maxBy
            target = segment.max_timestamp
            _, position = segment.offset_index.lookup(max(segment.offset_of_max_timestamp, segment.base_offset))
            for start in (position, 0):  # from the indexed batch; a whole scan if that missed it
                while start < segment.size:
                    header = segment.header_at(start)
                    if header.max_timestamp == target:
                        found = segment.first_record_at_or_after(header, start, target)
                        if found is not None:
                            return found[0], found[1], header.partition_leader_epoch
                    start += header.size
        except OSError as exc:
            raise self._io_failure(exc) from None
        return None
