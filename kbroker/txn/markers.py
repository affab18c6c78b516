"""Transaction markers: control batches whose one record's key says COMMIT or ABORT.

Kafka's layout (EndTransactionMarker): a magic-2 batch with the transactional and control
attribute bits, the producer's id and epoch, no sequence; its record's key is
``version int16 (0), type int16 (0 abort, 1 commit)`` and its value
``version int16 (0), coordinator_epoch int32``.
"""
from __future__ import annotations

import struct

from kbroker._core import records as core_records
from kbroker.coordinator.offsets_log import _read_varint as _varint, build_batch

TRANSACTIONAL = 0x10
CONTROL = 0x20
ABORT, COMMIT = 0, 1
_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")


def control_batch(producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                  timestamp_ms: int) -> bytearray:
    key = _KEY.pack(0, COMMIT if commit else ABORT)
    value = _VALUE.pack(0, coordinator_epoch)
    return build_batch([(key, value)], timestamp_ms, attributes=TRANSACTIONAL | CONTROL,
                       producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=-1)


def marker_type(batch: bytes | bytearray | memoryview) -> int | None:
    """COMMIT, ABORT, or None when ``batch`` (one whole uncompressed control batch) carries an
    unknown control record type (Kafka ignores those)."""
    found = read_marker(batch)
    return found[0] if found is not None else None


def read_marker(batch: bytes | bytearray | memoryview) -> tuple[int, int] | None:
    """(COMMIT or ABORT, coordinator epoch) of a control batch; None for an unknown control record type.
    A value too short for the epoch reads as coordinator epoch -1."""
    view = memoryview(batch)
    pos = core_records.HEADER_SIZE
    _, pos = _varint(view, pos)  # record length
    pos += 1  # attributes
    _, pos = _varint(view, pos)  # timestamp delta
    _, pos = _varint(view, pos)  # offset delta
    key_length, pos = _varint(view, pos)
    if key_length < 4:
        return None
    version, kind = _KEY.unpack_from(view, pos)
    if version != 0 or kind not in (ABORT, COMMIT):
        return None
    pos += key_length
    value_length, pos = _varint(view, pos)
    if value_length < _VALUE.size:
        return kind, -1
    return kind, _VALUE.unpack_from(view, pos)[1]

