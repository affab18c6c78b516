"""``__transaction_state`` records: Kafka's TransactionLog schemas, version 0 (what 2.x writes).

Key:   version int16 (0), transactional_id string
Value: version int16 (0), producer_id int64, producer_epoch int16, transaction_timeout_ms int32,
       transaction_status int8, partitions nullable [topic string, partition_ids [int32]],
       last_update_timestamp_ms int64, start_timestamp_ms int64
A null value is a tombstone (an expired transactional id). Partitions are null in the Empty state.
"""
from __future__ import annotations

import enum
import struct
from dataclasses import dataclass, field

from zk_compat.jvm import java_int_hash

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_HEAD = struct.Struct(">hqhib")  # version, producer id, epoch, timeout, status
_TIMES = struct.Struct(">qq")


class TxnState(enum.IntEnum):
    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7


@dataclass
class TxnMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState = TxnState.EMPTY
    partitions: set[tuple[str, int]] = field(default_factory=set)
    start_ms: int = -1
    update_ms: int = -1


def partition_for(transactional_id: str, num_partitions: int) -> int:
    """Kafka's ``Utils.abs(transactionalId.hashCode) % transactionTopicPartitionCount``."""
    h = java_int_hash(transactional_id)
    return (0 if h == -(1 << 31) else abs(h)) % num_partitions


def encode_key(transactional_id: str) -> bytes:
    raw = transactional_id.encode()
    return _I16.pack(0) + _I16.pack(len(raw)) + raw


def decode_key(key: bytes | memoryview) -> str | None:
    view = memoryview(key)
    if len(view) < 4 or _I16.unpack_from(view, 0)[0] != 0:
        return None  # not a version-0 transaction key
    n = _I16.unpack_from(view, 2)[0]
    return bytes(view[4:4 + n]).decode()


def encode_value(meta: TxnMetadata) -> bytes:
    out = bytearray(_HEAD.pack(0, meta.producer_id, meta.producer_epoch, meta.timeout_ms, int(meta.state)))
    if meta.state is TxnState.EMPTY and not meta.partitions:
        out += _I32.pack(-1)
    else:
        by_topic: dict[str, list[int]] = {}
        for topic, index in sorted(meta.partitions):
            by_topic.setdefault(topic, []).append(index)
        out += _I32.pack(len(by_topic))
        for topic, indexes in by_topic.items():
            raw = topic.encode()
            out += _I16.pack(len(raw)) + raw + _I32.pack(len(indexes))
            for index in indexes:
                out += _I32.pack(index)
    out += _TIMES.pack(meta.update_ms, meta.start_ms)
    return bytes(out)


def decode_value(transactional_id: str, value: bytes | memoryview) -> TxnMetadata:
    view = memoryview(value)
    version, pid, epoch, timeout, status = _HEAD.unpack_from(view, 0)
    if version != 0:
        raise ValueError(f"transaction log value version {version} is not served")
    pos = _HEAD.size
    count = _I32.unpack_from(view, pos)[0]
    pos += 4
    partitions: set[tuple[str, int]] = set()
    for _ in range(max(count, 0)):
        n = _I16.unpack_from(view, pos)[0]
        topic = bytes(view[pos + 2:pos + 2 + n]).decode()
        pos += 2 + n
        k = _I32.unpack_from(view, pos)[0]
        pos += 4
        for _ in range(k):
            partitions.add((topic, _I32.unpack_from(view, pos)[0]))
            pos += 4
    update_ms, start_ms = _TIMES.unpack_from(view, pos)
    return TxnMetadata(transactional_id, pid, epoch, timeout, TxnState(status), partitions, start_ms, update_ms)
