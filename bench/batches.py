"""Client-shaped record batches (magic 2, uncompressed, ~1 KiB records) for benchmarks."""
from __future__ import annotations

import os
import struct
import time

from kbroker._core.records import HEADER_SIZE, crc32c

RECORD_VALUE_BYTES = 1000


def _varint(value: int) -> bytes:
    value = (value << 1) ^ (value >> 63)  # zigzag, as Kafka's varints
    out = bytearray()
    while value & ~0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _record(offset_delta: int, value: bytes) -> bytes:
    body = b"\x00" + _varint(0) + _varint(offset_delta) + _varint(-1) + _varint(len(value)) + value + _varint(0)
    return _varint(len(body)) + body


def client_batch(max_size: int, timestamp: int | None = None) -> bytearray:
    """A batch no larger than ``max_size`` bytes filled with ~1 KiB random records."""
    timestamp = time.time_ns() // 1_000_000 if timestamp is None else timestamp
    payload = bytearray()
    count = 0
    while True:
        record = _record(count, os.urandom(RECORD_VALUE_BYTES))
        if HEADER_SIZE + len(payload) + len(record) > max_size:
            break
        payload += record
        count += 1
    if count == 0:
        raise ValueError(f"{max_size} bytes cannot hold a {RECORD_VALUE_BYTES}-byte record")
    after_crc = struct.pack(">hiqqqhii", 0, count - 1, timestamp, timestamp, -1, -1, -1, count) + payload
    head = struct.pack(">qiib", 0, len(after_crc) + 9, -1, 2)
    return bytearray(head + struct.pack(">I", crc32c(after_crc)) + after_crc)
