"""Persistence of consumer groups in the internal compacted topic ``__consumer_offsets``.

Byte formats are Kafka's (apache/kafka core/src/main/scala/kafka/coordinator/group/GroupMetadataManager.scala,
its key and value schemas). Every key and value starts with an
int16 version and uses the classic encodings: strings int16 length + UTF-8 (-1 = null), bytes
int32 length, arrays int32 count, all big-endian.

    offset commit key   v1: group string | topic string | partition int32
    offset commit value v3: offset int64 | leaderEpoch int32 | metadata string | commitTimestamp int64
                        v1: offset int64 | metadata string | commitTimestamp int64 | expireTimestamp int64
                            (only when the commit carried an explicit retention)
    group metadata key  v2: group string
    group metadata value v3: protocolType string | generation int32 | protocol nullable string |
                            leader nullable string | currentStateTimestamp int64 |
                            members [memberId string | groupInstanceId nullable string |
                                     clientId string | clientHost string | rebalanceTimeout int32 |
                                     sessionTimeout int32 | subscription bytes | assignment bytes]

A null value (tombstone) deletes its key. Records travel in record batch v2 (magic 2, no
compression), built with ``kbroker.log.batches`` as a client would: baseOffset 0,
partitionLeaderEpoch -1, no producer id, so the partition log assigns the offsets.

The group of a record decides its partition: ``abs(javaStringHashCode(group)) % partitions``.
"""
from __future__ import annotations

import inspect
import logging
import struct
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from kbroker.log import batches as record_batches
from zk_compat.jvm import java_int_hash

log = logging.getLogger(__name__)

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSION = 3
OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRY = 1
GROUP_METADATA_VALUE_VERSION = 3

from kbroker.log.names import TopicPartition  # noqa: E402

AppendFn = Callable[[int, bytearray], "int | Awaitable[int]"]


# --- partition choice ----------------------------------------------------------------------

def partition_for(group_id: str, num_partitions: int) -> int:
    """The ``__consumer_offsets`` partition of a group: Kafka's ``Utils.abs(hash) % n``, where
    ``Utils.abs(Integer.MIN_VALUE)`` is 0 rather than Java's negative ``Math.abs``."""
    h = java_int_hash(group_id)
    return (0 if h == -(1 << 31) else abs(h)) % num_partitions


# --- values held in memory -----------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    """One committed offset. ``leader_epoch`` -1 = unknown; ``expire_timestamp_ms`` is set only
    for commits that carried an explicit retention (they are written as value version 1)."""
    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp_ms: int = -1
    expire_timestamp_ms: int | None = None


@dataclass(frozen=True, slots=True)
class MemberIdentity:
    """Who a group member is (Kafka's MemberIdentity): the id the coordinator gave it and, for a
    static member, its ``group.instance.id``. The stored record and the group's answers about a
    member start with these two fields."""
    member_id: str
    group_instance_id: str | None


@dataclass(frozen=True, slots=True)
class MemberRecord(MemberIdentity):
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupMetadataRecord:
    """What a group metadata value holds (the group id is in the key)."""
    protocol_type: str
    generation_id: int
    protocol_name: str | None
    leader_id: str | None
    state_timestamp_ms: int
    members: tuple[MemberRecord, ...] = ()


@dataclass(slots=True)
class LoadedPartition:
    """The state one ``__consumer_offsets`` partition replays to."""
    offsets: dict[str, dict[TopicPartition, OffsetAndMetadata]] = field(default_factory=dict)
    groups: dict[str, GroupMetadataRecord] = field(default_factory=dict)
    # transactional commits whose marker is not in the log yet: (group, producer id) -> offsets
    pending: dict[tuple[str, int], dict[TopicPartition, OffsetAndMetadata]] = field(default_factory=dict)


# --- classic encodings ---------------------------------------------------------------------

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


def _string(out: bytearray, value: str | None) -> None:
    if value is None:
        out += _I16.pack(-1)
        return
    raw = value.encode("utf-8")
    if len(raw) > 0x7FFF:
        raise ValueError(f"string of {len(raw)} bytes does not fit an int16 length")
    out += _I16.pack(len(raw))
    out += raw


def _bytes(out: bytearray, value: bytes) -> None:
    out += _I32.pack(len(value))
    out += value


class _Reader:
    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes | memoryview) -> None:
        self.buf = memoryview(buf)
        self.pos = 0

    def _take(self, n: int) -> memoryview:
        if n < 0 or self.pos + n > len(self.buf):
            raise ValueError("field runs past the end of the record")
        view = self.buf[self.pos:self.pos + n]
        self.pos += n
        return view

    def i16(self) -> int:
        return int(_I16.unpack(self._take(2))[0])

    def i32(self) -> int:
        return int(_I32.unpack(self._take(4))[0])

    def i64(self) -> int:
        return int(_I64.unpack(self._take(8))[0])

    def string(self) -> str:
        value = self.nullable_string()
        if value is None:
            raise ValueError("null where a string is required")
        return value

    def nullable_string(self) -> str | None:
        n = self.i16()
        return None if n < 0 else str(self._take(n), "utf-8")

    def bytes(self) -> bytes:
        n = self.i32()
        return b"" if n < 0 else bytes(self._take(n))


def encode_offset_commit_key(group_id: str, topic: str, partition: int) -> bytes:
    out = bytearray(_I16.pack(OFFSET_COMMIT_KEY_VERSION))
    _string(out, group_id)
    _string(out, topic)
    out += _I32.pack(partition)
    return bytes(out)


def encode_offset_commit_value(value: OffsetAndMetadata) -> bytes:
    """Version 3, or version 1 when the commit carried an explicit retention (Kafka's rule)."""
    if value.expire_timestamp_ms is not None:
        out = bytearray(_I16.pack(OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRY))
        out += _I64.pack(value.offset)
        _string(out, value.metadata)
        out += _I64.pack(value.commit_timestamp_ms)
        out += _I64.pack(value.expire_timestamp_ms)
        return bytes(out)
    out = bytearray(_I16.pack(OFFSET_COMMIT_VALUE_VERSION))
    out += _I64.pack(value.offset)
    out += _I32.pack(value.leader_epoch)
    _string(out, value.metadata)
    out += _I64.pack(value.commit_timestamp_ms)
    return bytes(out)


def encode_group_metadata_key(group_id: str) -> bytes:
    out = bytearray(_I16.pack(GROUP_METADATA_KEY_VERSION))
    _string(out, group_id)
    return bytes(out)


def encode_group_metadata_value(value: GroupMetadataRecord) -> bytes:
    out = bytearray(_I16.pack(GROUP_METADATA_VALUE_VERSION))
    _string(out, value.protocol_type)
    out += _I32.pack(value.generation_id)
    _string(out, value.protocol_name)
    _string(out, value.leader_id)
    out += _I64.pack(value.state_timestamp_ms)
    out += _I32.pack(len(value.members))
    for m in value.members:
        _string(out, m.member_id)
        _string(out, m.group_instance_id)
        _string(out, m.client_id)
        _string(out, m.client_host)
        out += _I32.pack(m.rebalance_timeout_ms)
        out += _I32.pack(m.session_timeout_ms)
        _bytes(out, m.subscription)
        _bytes(out, m.assignment)
    return bytes(out)


@dataclass(frozen=True, slots=True)
class OffsetKey:
    group_id: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupKey:
    group_id: str


def decode_key(key: bytes | memoryview) -> OffsetKey | GroupKey | None:
    """Decode a key; None for versions a ZK-era broker does not write (KIP-848's 3+)."""
    r = _Reader(key)
    version = r.i16()
    if version in (0, 1):
        return OffsetKey(r.string(), r.string(), r.i32())
    if version == 2:
        return GroupKey(r.string())
    return None


def decode_offset_commit_value(value: bytes | memoryview) -> OffsetAndMetadata:
    """Value versions 0-3 (the classic ones)."""
    r = _Reader(value)
    version = r.i16()
    if version in (0, 2):
        offset, metadata, commit_ts = r.i64(), r.string(), r.i64()
        return OffsetAndMetadata(offset, -1, metadata, commit_ts)
    if version == 1:
        offset, metadata, commit_ts, expire_ts = r.i64(), r.string(), r.i64(), r.i64()
        return OffsetAndMetadata(offset, -1, metadata, commit_ts, None if expire_ts < 0 else expire_ts)
    if version == 3:
        offset, epoch, metadata, commit_ts = r.i64(), r.i32(), r.string(), r.i64()
        return OffsetAndMetadata(offset, epoch, metadata, commit_ts)
    raise ValueError(f"unsupported offset commit value version {version}")


def decode_group_metadata_value(value: bytes | memoryview) -> GroupMetadataRecord:
    """Value versions 0-3: v1 adds rebalanceTimeout, v2 currentStateTimestamp, v3 groupInstanceId."""
    r = _Reader(value)
    version = r.i16()
    if not 0 <= version <= 3:
        raise ValueError(f"unsupported group metadata value version {version}")
    protocol_type = r.string()
    generation = r.i32()
    protocol = r.nullable_string()
    leader = r.nullable_string()
    state_ts = r.i64() if version >= 2 else -1
    members = []
    for _ in range(r.i32()):
        member_id = r.string()
        instance_id = r.nullable_string() if version >= 3 else None
        client_id = r.string()
        client_host = r.string()
        rebalance_timeout = r.i32() if version >= 1 else -1
        session_timeout = r.i32()
        if rebalance_timeout < 0:
            rebalance_timeout = session_timeout
        subscription = r.bytes()
        assignment = r.bytes()
        members.append(MemberRecord(member_id, instance_id, client_id, client_host, rebalance_timeout,
                                    session_timeout, subscription, assignment))
    return GroupMetadataRecord(protocol_type, generation, protocol, leader, state_ts, tuple(members))


# --- record batch v2 ------------------------------------------------------------------------

def build_batch(records: Sequence[tuple[bytes, bytes | None]], timestamp_ms: int, *, attributes: int = 0,
                producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1) -> bytearray:
    """One uncompressed magic-2 batch of (key, value) records, all stamped ``timestamp_ms``
    (CreateTime), shaped as a client sends it: baseOffset 0, partitionLeaderEpoch -1; no producer
    unless given (transactional offset commits carry one). ``__transaction_state`` uses it too."""
    return record_batches.build_batch([(key, value, timestamp_ms) for key, value in records], attributes=attributes,
                               producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=base_sequence)


@dataclass(frozen=True, slots=True)
class _Batch:
    base_offset: int
    attributes: int
    producer_id: int
    records: list[tuple[bytes | None, bytes | None]]


def iter_batches(data: bytes | bytearray | memoryview) -> Iterator[_Batch]:
    """Walk the magic-2 batches of ``data``, checking each CRC, decoding the records' keys and
    values. A truncated batch at the end is ignored (a log read may stop mid-batch); a corrupt
    one raises ``record_batches.CorruptBatchError``, a ValueError."""
    for batch in record_batches.iter_batches(data, verify_crc=True):
        header = batch.header
        yield _Batch(header.base_offset, header.attributes, header.producer_id,
                     [(key, value) for _, _, _, _, key, value in batch.records()])


# --- the log ---------------------------------------------------------------------------------

class OffsetsLog:
    """Encodes group state into ``__consumer_offsets`` batches, writes them through the injected
    ``append(partition, batch) -> offset`` (which may also return an awaitable of the offset), and
    replays a partition's stored batches."""

    def __init__(self, append: AppendFn | None, num_partitions: int = 50) -> None:
        if num_partitions < 1:
            raise ValueError("num_partitions must be >= 1")
        self._append = append
        self.num_partitions = num_partitions

    @property
    def persistent(self) -> bool:
        return self._append is not None

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.num_partitions)

    def append(self, partition: int, batch: bytearray) -> int | Awaitable[int] | None:
        """Hand a batch to the log; None when no log is attached (state stays in memory only)."""
        if self._append is None:
            return None
        return self._append(partition, batch)

    # batch builders -------------------------------------------------------------------

    @staticmethod
    def offset_commit_batch(group_id: str, offsets: Mapping[TopicPartition, OffsetAndMetadata],
                            now_ms: int, producer_id: int = -1, producer_epoch: int = -1) -> bytearray:
        """With a producer: TxnOffsetCommit's transactional batch (no sequence), which counts
        once the transaction's COMMIT marker follows it in the partition."""
        return build_batch([(encode_offset_commit_key(group_id, t, p), encode_offset_commit_value(v))
                            for (t, p), v in offsets.items()], now_ms,
                           attributes=record_batches.TRANSACTIONAL if producer_id >= 0 else 0,
                           producer_id=producer_id, producer_epoch=producer_epoch)

    @staticmethod
    def group_metadata_batch(group_id: str, value: GroupMetadataRecord, now_ms: int) -> bytearray:
        return build_batch([(encode_group_metadata_key(group_id), encode_group_metadata_value(value))], now_ms)

    @staticmethod
    def tombstone_batch(group_id: str, partitions: Iterable[TopicPartition], group: bool,
                        now_ms: int) -> bytearray | None:
        """Tombstones for the given committed offsets and, with ``group``, the group metadata."""
        records: list[tuple[bytes, bytes | None]] = [
            (encode_offset_commit_key(group_id, t, p), None) for t, p in partitions]
        if group:
            records.append((encode_group_metadata_key(group_id), None))
        return build_batch(records, now_ms) if records else None

    # replay -----------------------------------------------------------------------------

    def load_partition(self, partition: int, batches: Iterable[bytes | bytearray | memoryview]) -> LoadedPartition:
        """Replay one partition's stored batches in log order. Later records win, tombstones
        delete. Transactional offset commits count only once their COMMIT marker is read; an
        ABORT marker drops them; of two commits for one partition the later batch wins."""
        offsets: _Replayed = {}
        groups: dict[str, GroupMetadataRecord] = {}
        removed_groups: set[str] = set()
        pending_txn: dict[int, _Replayed] = {}  # producer id -> its open transaction's commits
        for chunk in batches:
            for batch in iter_batches(chunk):
                if batch.attributes & record_batches.CONTROL:
                    self._apply_marker(batch, pending_txn, offsets)
                    continue
                transactional = bool(batch.attributes & record_batches.TRANSACTIONAL)
                for key_bytes, value_bytes in batch.records:
                    if key_bytes is None:
                        log.warning("__consumer_offsets-%d: record without a key ignored", partition)
                        continue
                    key = decode_key(key_bytes)
                    if isinstance(key, OffsetKey):
                        tp_key = (key.group_id, key.topic, key.partition)
                        if transactional:
                            if value_bytes is not None:
                                pending_txn.setdefault(batch.producer_id, {})[tp_key] = (
                                    batch.base_offset, decode_offset_commit_value(value_bytes))
                        elif value_bytes is None:
                            offsets.pop(tp_key, None)
                        else:
                            offsets[tp_key] = (batch.base_offset, decode_offset_commit_value(value_bytes))
                    elif isinstance(key, GroupKey):
                        if value_bytes is None:
                            groups.pop(key.group_id, None)
                            removed_groups.add(key.group_id)
                        else:
                            groups[key.group_id] = decode_group_metadata_value(value_bytes)
                            removed_groups.discard(key.group_id)
        loaded = LoadedPartition(groups=groups)
        for (group_id, topic, part), (_, value) in offsets.items():
            loaded.offsets.setdefault(group_id, {})[TopicPartition(topic, part)] = value
        for producer_id, staged in pending_txn.items():
            for (group_id, topic, part), (_, value) in staged.items():
                loaded.pending.setdefault((group_id, producer_id), {})[TopicPartition(topic, part)] = value
        if pending_txn:
            log.info("__consumer_offsets-%d: %d producers with open transactional commits at load",
                     partition, len(pending_txn))
        return loaded

    @staticmethod
    def _apply_marker(batch: _Batch, pending_txn: dict[int, _Replayed], offsets: _Replayed) -> None:
        kind = record_batches.control_type(batch.records[0][0]) if batch.records else None
        if kind is None:
            return  # a control key Kafka would refuse
        staged = pending_txn.pop(batch.producer_id, {})
        if kind == record_batches.COMMIT:
            for tp_key, (batch_offset, value) in staged.items():
                current = offsets.get(tp_key)
                if current is None or current[0] < batch_offset:
                    offsets[tp_key] = (batch_offset, value)


# Offsets replayed from the log: (group, topic, partition) -> (the offset of the batch that wrote it, the commit).
_Replayed = dict[tuple[str, str, int], tuple[int, OffsetAndMetadata]]


def is_awaitable(value: object) -> TypeGuard[Awaitable[Any]]:
    return inspect.isawaitable(value)
