"""Transaction markers: control batches whose one record's key says COMMIT or ABORT.

Kafka's layout (EndTransactionMarker): a magic-2 batch with the transactional and control
attribute bits, the producer's id and epoch, no sequence; its record's key is
``version int16 (0), type int16 (0 abort, 1 commit)`` and its value
``version int16 (0), coordinator_epoch int32``. The bytes are written and read by
``kbroker.log.batches``, which the cleaner and ``__consumer_offsets`` loading share; these are the
names the transaction code and the partition use.

    control_batch(producer_id, producer_epoch, commit, coordinator_epoch, timestamp_ms) -> bytearray
    read_marker(batch) -> (COMMIT or ABORT, coordinator epoch) | None
    marker_type(batch) -> COMMIT | ABORT | None
"""
from __future__ import annotations

from kbroker.log.batches import ABORT, COMMIT, CONTROL, TRANSACTIONAL, control_batch, read_marker

__all__ = ["ABORT", "COMMIT", "CONTROL", "TRANSACTIONAL", "control_batch", "marker_type", "read_marker"]


def marker_type(batch: bytes | bytearray | memoryview) -> int | None:
    """COMMIT, ABORT, or None when ``batch`` (one whole control batch) carries another control
    record type (Kafka ignores those)."""
    found = read_marker(batch)
    return found[0] if found is not None else None
