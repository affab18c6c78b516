"""Kafka's sparse indexes over preallocated, memory-mapped files, byte-compatible with Kafka.

``.index``: 8-byte entries, big-endian (int32 offset relative to the segment base, int32 file position).
``.timeindex``: 12-byte entries, big-endian (int64 timestamp, int32 relative offset).
A file opened for writing is extended to ``max_index_bytes`` (rounded down to whole entries);
the number of valid entries of an existing file is its length / entry size (Kafka's rule: the file is
trimmed to its entries on clean close; after a crash the log layer rebuilds it).
"""
import os

import numpy as np
import numpy.typing as npt

class CorruptIndexError(ValueError): ...

class _AbstractIndex:
    """What both indexes share: the file, its mapping and the entry count."""
    path: str
    base_offset: int
    writable: bool
    entry_size: int  # 8 in an OffsetIndex, 12 in a TimeIndex
    def __init__(self, path: str, base_offset: int, max_index_bytes: int = 10485760, writable: bool = True) -> None: ...
    @property
    def entries(self) -> int: ...
    @property
    def max_entries(self) -> int: ...
    @property
    def is_full(self) -> bool: ...
    @property
    def closed(self) -> bool: ...
    def entry(self, n: int) -> tuple[int, int]:
        """Entry ``n`` (negative counts from the end), as ``lookup`` returns it."""
    def truncate_to(self, offset: int) -> None:
        """Drop every entry with offset >= ``offset``."""
    def truncate_entries(self, n: int) -> None: ...
    def reset(self) -> None:
        """Drop every entry (recovery rebuilds)."""
    def sanity_check(self) -> None:
        """Raise CorruptIndexError when the file is not whole entries or its entries are out of order."""
    def trim(self) -> None:
        """Shrink the file to exactly its entries (on roll and on close)."""
    def resize(self, max_index_bytes: int) -> None: ...
    def flush(self) -> None: ...
    def close(self) -> None:
        """Trim and unmap; the object is unusable afterwards."""
    def renamed(self, path: str | os.PathLike[str]) -> None: ...
    def array(self) -> npt.NDArray[np.void]:
        """Read-only numpy view of the valid entries."""

class OffsetIndex(_AbstractIndex):
    """dtype of array(): [('offset','>u4'),('position','>u4')]."""
    @property
    def last_offset(self) -> int:
        """Absolute offset of the last entry, or base_offset when empty."""
    def append(self, offset: int, position: int) -> None:
        """Add (offset, position). Raises IndexError when full, ValueError when offset is not greater
        than the last entry's (or below base, or relative offset/position out of int32 range)."""
    def lookup(self, offset: int) -> tuple[int, int]:
        """(absolute offset, position) of the greatest entry with offset <= ``offset``;
        (base_offset, 0) when there is none. Searches the warm tail (last 8 KiB) first."""
    def lookup_by_position(self, position: int) -> tuple[int, int]:
        """Greatest entry with position <= ``position``; (base_offset, 0) when there is none."""

class TimeIndex(_AbstractIndex):
    """dtype of array(): [('timestamp','>i8'),('offset','>u4')]."""
    @property
    def last_entry(self) -> tuple[int, int]:
        """(timestamp, absolute offset) of the last entry, or (-1, base_offset) when empty."""
    def maybe_append(self, timestamp: int, offset: int) -> bool:
        """Append when ``timestamp`` is greater than the last entry's (Kafka's rule); returns whether it
        did. Raises IndexError when full, ValueError when ``offset`` goes backwards with a newer timestamp."""
    def lookup(self, timestamp: int) -> tuple[int, int]:
        """(timestamp, absolute offset) of the greatest entry with timestamp <= ``timestamp``;
        (-1, base_offset) when there is none."""
