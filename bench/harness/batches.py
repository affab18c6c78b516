"""Client-shaped record batches (magic 2, uncompressed, ~1 KiB records) for benchmarks, built by the broker's own
v2 codec (kbroker.log.batches.build_batch) as a producer with no idempotence sends them."""
from __future__ import annotations

import os
import time

from kbroker.log.batches import HEADER_SIZE, build_batch

RECORD_VALUE_BYTES = 1000


def client_batch(max_size: int, timestamp: int | None = None) -> bytearray:
    """A batch no larger than ``max_size`` bytes filled with as many ~1 KiB random records as fit (keyless, one
    timestamp)."""
    timestamp = time.time_ns() // 1_000_000 if timestamp is None else timestamp
    values = []
    # every record is at least as large as the first (its offset delta's varint only grows): an upper bound
    smallest = len(build_batch([(None, bytes(RECORD_VALUE_BYTES), timestamp)])) - HEADER_SIZE
    for _ in range(max(0, max_size - HEADER_SIZE) // smallest):
        values.append(os.urandom(RECORD_VALUE_BYTES))
    while values:
        batch = build_batch([(None, value, timestamp) for value in values])
        if len(batch) <= max_size:
            return batch
        values.pop()
    raise ValueError(f"{max_size} bytes cannot hold a {RECORD_VALUE_BYTES}-byte record")
