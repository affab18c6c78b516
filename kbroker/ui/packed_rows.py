"""Many small integers in one SQLite value: the history's per-partition lags of one group and time, packed.

A row per partition costs ~18 bytes in SQLite (the key's time and group repeated, a record header and a cell per
row); a group's lags packed as varint pairs in one blob cost ~3-4 bytes a partition. Only a group's chart reads
them, and always all of its partitions at once, so SQL never needs to see inside.
"""
from __future__ import annotations

from collections.abc import Iterable


def pack_pairs(values: dict[int, int]) -> bytes:
    """(sub, value) pairs as varints, subs ascending and each but the first as its step from the one before (mostly
    one byte), values zigzag-encoded (a negative one stays small)."""
    out = bytearray()
    previous = 0
    for sub, value in sorted(values.items()):
        _varint(out, sub - previous)
        _varint(out, value * 2 if value >= 0 else -value * 2 - 1)
        previous = sub
    return bytes(out)


def unpack_pairs(blob: bytes) -> list[tuple[int, int]]:
    """pack_pairs' pairs back, subs ascending."""
    numbers: list[int] = []
    number = shift = 0
    for byte in blob:
        number |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            numbers.append(number)
            number = shift = 0
    if shift:
        raise ValueError("a packed history row ends inside a number")
    pairs, sub = [], 0
    for step, zigzag in zip(numbers[::2], numbers[1::2]):
        sub += step
        pairs.append((sub, zigzag >> 1 if not zigzag & 1 else -(zigzag >> 1) - 1))
    return pairs


def _varint(out: bytearray, number: int) -> None:
    while number > 0x7F:
        out.append(number & 0x7F | 0x80)
        number >>= 7
    out.append(number)


def unpacked_rows(rows: list[tuple[int, bytes]], bucket: int) -> list[tuple[int, ...]]:
    """Packed (ts, blob) rows as (ts, sub, value) rows ordered by (ts, sub); with ``bucket``, one row per bucket and
    sub holding the largest value (the same as the SQL path's max())."""
    found: dict[tuple[int, int], int] = {}
    for ts, blob in rows:
        at = ts // bucket * bucket if bucket else ts
        for sub, value in unpack_pairs(blob):
            key = (at, sub)
            found[key] = max(value, found.get(key, value))
    return [(ts, sub, value) for (ts, sub), value in sorted(found.items())]


def largest_per_series(rows: Iterable[tuple[int, bytes]]) -> list[tuple[int, bytes]]:
    """Packed (series, blob) rows of a bucket as one (series, blob) per series holding each sub's largest value."""
    largest: dict[int, dict[int, int]] = {}
    for series, blob in rows:
        values = largest.setdefault(series, {})
        for sub, value in unpack_pairs(blob):
            values[sub] = max(value, values.get(sub, value))
    return [(series, pack_pairs(values)) for series, values in sorted(largest.items())]
