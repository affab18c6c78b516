"""Pure-Python reference for kbroker._core.index: plain lists searched with bisect, and the exact
bytes Kafka writes (struct). Deliberately naive: it is what the compiled index is checked against.
"""
from __future__ import annotations

import bisect
import struct

INT32_MAX = 2**31 - 1
OFFSET_ENTRY = struct.Struct(">iI")  # relative offset (int32, >= 0), position (int32, >= 0)
TIME_ENTRY = struct.Struct(">qi")  # timestamp (int64), relative offset (int32, >= 0)


def offset_index_bytes(base_offset: int, entries: list[tuple[int, int]]) -> bytes:
    """File contents of a trimmed .index holding (absolute offset, position) entries."""
    return b"".join(OFFSET_ENTRY.pack(o - base_offset, p) for o, p in entries)


def time_index_bytes(base_offset: int, entries: list[tuple[int, int]]) -> bytes:
    """File contents of a trimmed .timeindex holding (timestamp, absolute offset) entries."""
    return b"".join(TIME_ENTRY.pack(t, o - base_offset) for t, o in entries)


class OffsetIndexOracle:
    def __init__(self, base_offset: int, max_entries: int) -> None:
        self.base_offset = base_offset
        self.max_entries = max_entries
        self.offsets: list[int] = []
        self.positions: list[int] = []

    @property
    def entries(self) -> int:
        return len(self.offsets)

    @property
    def last_offset(self) -> int:
        return self.offsets[-1] if self.offsets else self.base_offset

    def append(self, offset: int, position: int) -> None:
        if len(self.offsets) >= self.max_entries:
            raise IndexError("full")
        if not 0 <= offset - self.base_offset <= INT32_MAX or not 0 <= position <= INT32_MAX:
            raise ValueError("out of range")
        if self.offsets and offset <= self.offsets[-1]:
            raise ValueError("not increasing")
        self.offsets.append(offset)
        self.positions.append(position)

    def lookup(self, offset: int) -> tuple[int, int]:
        i = bisect.bisect_right(self.offsets, offset) - 1
        return (self.base_offset, 0) if i < 0 else (self.offsets[i], self.positions[i])

    def lookup_by_position(self, position: int) -> tuple[int, int]:
        i = bisect.bisect_right(self.positions, position) - 1
        return (self.base_offset, 0) if i < 0 else (self.offsets[i], self.positions[i])

    def truncate_to(self, offset: int) -> None:
        self.truncate_entries(bisect.bisect_left(self.offsets, offset))

    def truncate_entries(self, n: int) -> None:
        del self.offsets[n:], self.positions[n:]

    def reset(self) -> None:
        self.truncate_entries(0)

    def all(self) -> list[tuple[int, int]]:
        return list(zip(self.offsets, self.positions))


class TimeIndexOracle:
    def __init__(self, base_offset: int, max_entries: int) -> None:
        self.base_offset = base_offset
        self.max_entries = max_entries
        self.timestamps: list[int] = []
        self.offsets: list[int] = []

    @property
    def entries(self) -> int:
        return len(self.timestamps)

    @property
    def last_entry(self) -> tuple[int, int]:
        return (self.timestamps[-1], self.offsets[-1]) if self.timestamps else (-1, self.base_offset)

    def maybe_append(self, timestamp: int, offset: int) -> bool:
        last_ts, last_offset = self.last_entry
        if timestamp <= last_ts:
            return False
        if len(self.timestamps) >= self.max_entries:
            raise IndexError("full")
        if offset < last_offset or offset - self.base_offset > INT32_MAX:
            raise ValueError("offset")
        self.timestamps.append(timestamp)
        self.offsets.append(offset)
        return True

    def lookup(self, timestamp: int) -> tuple[int, int]:
        i = bisect.bisect_right(self.timestamps, timestamp) - 1
        return (-1, self.base_offset) if i < 0 else (self.timestamps[i], self.offsets[i])

    def truncate_to(self, offset: int) -> None:
        self.truncate_entries(bisect.bisect_left(self.offsets, offset))

    def truncate_entries(self, n: int) -> None:
        del self.timestamps[n:], self.offsets[n:]

    def reset(self) -> None:
        self.truncate_entries(0)

    def all(self) -> list[tuple[int, int]]:
        return list(zip(self.timestamps, self.offsets))
