"""Record batch v2 (magic 2) in Python: the one place outside the compiled core that reads or
writes what is inside a batch.

Users: the cleaner (iterate records, rebuild a batch with fewer records), the
``__consumer_offsets`` and ``__transaction_state`` logs (build and read batches), transaction
markers (control batches) and legacy conversion (records to and from magic 0/1). The produce and
fetch paths never come here: ``kbroker._core.records`` validates batches and assigns offsets in
place without decoding a record, and the CRC here is that module's ``crc32c``.

Kafka's layout (DefaultRecordBatch), big-endian; ``HEADER`` is the struct of the first 61 bytes
and ``HEADER_FIELDS`` names its fields (the compiled core's BatchHeader uses the same names)::

    byte  field                  type
       0  baseOffset             int64
       8  batchLength            int32    bytes after this field
      12  partitionLeaderEpoch   int32
      16  magic                  int8     2
      17  crc                    uint32   CRC-32C of bytes 21..end
      21  attributes             int16    codec bits 0-2, LogAppendTime bit 3, transactional
                                          bit 4, control bit 5
      23  lastOffsetDelta        int32
      27  baseTimestamp          int64
      35  maxTimestamp           int64
      43  producerId             int64
      51  producerEpoch          int16
      53  baseSequence           int32
      57  recordCount            int32
      61  records section        compressed as a whole when the codec is not 0

The first five fields are outside the CRC, so the log rewrites the base offset and leader epoch
without recomputing it. A record (DefaultRecord), with zigzag varints (7 bits a byte, least
significant group first; Kafka's varint and varlong share the encoding, only the range differs)::

    length varint | attributes int8 (0) | timestampDelta varlong | offsetDelta varint |
    keyLength varint | key | valueLength varint | value | headerCount varint | headers
    (a length of -1 is null)

A control batch (transactional and control bits set) carries one record: the key is
``version int16, type int16`` (0 abort, 1 commit), the value of a transaction marker
``version int16, coordinatorEpoch int32`` (Kafka's ControlRecordType and EndTransactionMarker).
"""
from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, NamedTuple

from kbroker import errors
from kbroker._core import records as core_records
from kbroker.log.compression import GZIP, LZ4, NONE, SNAPPY, ZSTD, compress_records, decompress_records

if TYPE_CHECKING:  # the stub's alias: the compiled module has no such name
    from kbroker._core.records import Buffer

__all__ = [
    "NONE", "GZIP", "SNAPPY", "LZ4", "ZSTD", "MAGIC", "HEADER", "HEADER_FIELDS", "HEADER_SIZE", "LOG_OVERHEAD",
    "CRC_OFFSET", "CRC_START", "CODEC_MASK", "LOG_APPEND_TIME", "TRANSACTIONAL", "CONTROL", "NO_TIMESTAMP",
    "ABORT", "COMMIT", "CorruptBatchError", "Batch", "write_varint", "read_varint", "read_varlong",
    "parse_header", "checked_header", "pack_header", "set_crc", "iter_batches", "records_section", "iter_records",
    "build_batch", "rebuild_batch", "control_batch", "control_type", "read_marker",
]

MAGIC = 2
HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size            # 61
LOG_OVERHEAD = 12                    # baseOffset + batchLength
CRC_OFFSET = 17
CRC_START = 21                       # attributes: the first byte the CRC covers

CODEC_MASK = 0x07
LOG_APPEND_TIME = 0x08
TRANSACTIONAL = 0x10
CONTROL = 0x20

NO_TIMESTAMP = -1
ABORT, COMMIT = 0, 1                 # control record types of transaction markers

_CRC = struct.Struct(">I")
_CORRUPT = 2                                   # scan_batches' status for a corrupt batch
_CONTROL_KEY = struct.Struct(">hh")            # version, type
_MARKER_VALUE = struct.Struct(">hi")           # version, coordinator epoch


class CorruptBatchError(errors.CorruptMessageError, ValueError):
    """Bytes that are not a well-formed batch or record: Kafka's CORRUPT_MESSAGE, and a ValueError
    for the callers that treat any malformed input alike."""


# --- varints -------------------------------------------------------------------------------------

def write_varint(out: bytearray, value: int) -> None:
    """Append ``value`` zigzag-encoded (a varint or a varlong: the encoding is the same)."""
    if 0 <= value < 0x40:  # one byte: most lengths and deltas
        out.append(value << 1)
        return
    z = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)


def read_varint(buf: Buffer, pos: int) -> tuple[int, int]:
    """(value, position after it) of the zigzag varint (int32, at most 5 bytes) at ``buf[pos]``.
    IndexError when ``buf`` ends inside it."""
    b = buf[pos]
    if b < 0x80:  # most lengths and deltas: one byte
        return (b >> 1) ^ -(b & 1), pos + 1
    return _read_long(buf, pos, 5, 1 << 32)


def read_varlong(buf: Buffer, pos: int) -> tuple[int, int]:
    """As ``read_varint`` for a varlong (int64, at most 10 bytes)."""
    b = buf[pos]
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    return _read_long(buf, pos, 10, 1 << 64)


def _read_long(buf: Buffer, pos: int, max_bytes: int, limit: int) -> tuple[int, int]:
    raw = shift = 0
    for _ in range(max_bytes):
        b = buf[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if b < 0x80:
            if raw >= limit:  # more bits than an int32 / int64 has
                break
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7
    raise CorruptBatchError(f"varint longer than {max_bytes} bytes or out of range at byte {pos}")


# --- the batch header ----------------------------------------------------------------------------
# Reading a header is the compiled core's job (``parse_header``, ``scan_batches``): its BatchHeader
# has every field below by name, plus size, last_offset, compression, timestamp_type,
# is_transactional and is_control. Writing one is ``pack_header``, over ``HEADER``.

HEADER_FIELDS = ("base_offset", "batch_length", "partition_leader_epoch", "magic", "crc", "attributes",
                 "last_offset_delta", "base_timestamp", "max_timestamp", "producer_id", "producer_epoch",
                 "base_sequence", "record_count")
parse_header = core_records.parse_header


def checked_header(batch: Buffer) -> core_records.BatchHeader:
    """``parse_header``, its refusal as the Kafka error it names (CORRUPT_MESSAGE, INVALID_RECORD, ...)."""
    try:
        return parse_header(batch)
    except core_records.RecordBatchError as exc:
        raise errors.for_code(exc.code)(str(exc)) from None


def pack_header(header: object = None, **fields: int) -> bytes:
    """The 61 header bytes: each of ``HEADER_FIELDS`` from ``fields``, else from ``header``'s
    attribute of that name (a BatchHeader, to write one back with some fields changed)."""
    return HEADER.pack(*[fields[name] if name in fields else getattr(header, name) for name in HEADER_FIELDS])


def set_crc(batch: bytearray) -> bytearray:
    """Write the CRC of one whole batch into it (after any change from byte 21 on); returns it."""
    _CRC.pack_into(batch, CRC_OFFSET, core_records.crc32c(memoryview(batch)[CRC_START:]))
    return batch


# --- reading -------------------------------------------------------------------------------------

class Batch(NamedTuple):
    """One batch found by ``iter_batches``: its header and its bytes (a view, header included)."""
    header: core_records.BatchHeader
    data: memoryview

    def records(self) -> Iterator[tuple[int, int, int, int, bytes | None, bytes | None]]:
        """``iter_records`` over this batch's (decompressed) records section."""
        return iter_records(records_section(self.data, self.header), self.header.record_count)


def iter_batches(data: Buffer, *, verify_crc: bool = True) -> Iterator[Batch]:
    """The batches of ``data`` from its start, walked by the compiled core. A truncated last batch
    (a log read may stop inside one) ends the walk; after the last good batch, an impossible
    length, a magic other than 2 or (with ``verify_crc``) a wrong CRC raises CorruptBatchError."""
    view = memoryview(data).cast("B")
    headers, valid, status = core_records.scan_batches(view, verify_crc)
    for header in headers:
        yield Batch(header, view[header.position:header.position + header.size])
    if status == _CORRUPT:
        raise CorruptBatchError(f"corrupt batch (impossible length, magic other than 2 or wrong CRC) at byte {valid}")


def records_section(batch: Buffer, header: core_records.BatchHeader) -> bytes:
    """The records of one whole batch (``header`` is its BatchHeader), decompressed when the
    batch is compressed; else copied (bytes index faster than views)."""
    with memoryview(batch)[HEADER_SIZE:header.size] as body:
        if header.compression:
            return decompress_records(header.compression, body)
        return bytes(body)


def iter_records(section: Buffer, count: int) -> Iterator[tuple[int, int, int, int, bytes | None, bytes | None]]:
    """``(start, end, offset_delta, timestamp_delta, key, value)`` for each of the ``count``
    records of an uncompressed records section (``records_section``'s); ``section[start:end]`` is
    the whole record, its length included; key and value are bytes (None when null); headers are
    skipped. CorruptBatchError when a record runs past its length or the section."""
    if not isinstance(section, bytes):
        section = bytes(section)  # slices of bytes are the copies handed out
    pos, n = 0, len(section)
    try:
        for _ in range(count):
            start = pos
            length, pos = read_varint(section, pos)
            end = pos + length
            if length < 1 or end > n:
                raise CorruptBatchError(f"record at byte {start} of its records section runs past their end")
            timestamp_delta, p = read_varlong(section, pos + 1)  # after the attributes byte
            offset_delta, p = read_varint(section, p)
            size, p = read_varint(section, p)
            key = None
            if size >= 0:
                key = section[p:p + size]
                p += size
            size, p = read_varint(section, p)
            value = None
            if size >= 0:
                value = section[p:p + size]
                p += size
            if p > end:
                raise CorruptBatchError(f"record at byte {start} of its records section runs past its length")
            yield start, end, offset_delta, timestamp_delta, key, value
            pos = end
    except IndexError:
        raise CorruptBatchError(f"records section of {n} bytes ends inside a record") from None


# --- writing -------------------------------------------------------------------------------------

def build_batch(records: Sequence[tuple[bytes | None, bytes | None, int]], *, codec: int = NONE,
                attributes: int = 0, base_offset: int = 0, partition_leader_epoch: int = -1,
                producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1) -> bytearray:
    """One batch of ``(key, value, timestamp)`` records, no headers, offset deltas 0..n-1, as
    Kafka's MemoryRecordsBuilder writes it: base timestamp the first record's, max timestamp the
    largest (NO_TIMESTAMP when none is larger), CreateTime unless ``attributes`` says otherwise.
    The records section is compressed with ``codec``, whose bits are added to ``attributes``."""
    if not records:
        raise ValueError("a batch needs at least one record")
    base_timestamp = records[0][2]
    max_timestamp = NO_TIMESTAMP
    body = bytearray()
    record = bytearray()
    for offset_delta, (key, value, timestamp) in enumerate(records):
        record.clear()
        record.append(0)  # attributes
        write_varint(record, timestamp - base_timestamp)
        write_varint(record, offset_delta)
        for field in (key, value):
            if field is None:
                record.append(1)  # -1, zigzag-encoded
            else:
                write_varint(record, len(field))
                record += field
        record.append(0)  # header count
        write_varint(body, len(record))
        body += record
        if timestamp > max_timestamp:
            max_timestamp = timestamp
    section = body if codec == NONE else compress_records(codec, bytes(body))
    batch = bytearray(pack_header(
        base_offset=base_offset, batch_length=HEADER_SIZE - LOG_OVERHEAD + len(section),
        partition_leader_epoch=partition_leader_epoch, magic=MAGIC, crc=0, attributes=attributes | codec,
        last_offset_delta=len(records) - 1, base_timestamp=base_timestamp, max_timestamp=max_timestamp,
        producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=base_sequence,
        record_count=len(records)))
    batch += section
    return set_crc(batch)


def rebuild_batch(batch: Buffer, section: bytes, kept: Iterable[tuple[int, int]], max_timestamp: int) -> bytes:
    """One whole ``batch`` with only the records at ``section[start:end]`` for each (start, end)
    of ``kept`` (``section`` is its ``records_section``): offsets, producer fields, epochs and
    codec kept, the records recompressed, count, length, max timestamp and CRC updated. No
    records left gives an empty batch (count 0, uncompressed, the old max timestamp), the shape
    Kafka's cleaner keeps for a producer's last batch."""
    header = parse_header(batch)
    parts = [section[start:end] for start, end in kept]
    body = b"".join(parts)
    attributes = header.attributes
    if not parts:
        attributes &= ~CODEC_MASK
        max_timestamp = header.max_timestamp
    elif header.compression:
        body = compress_records(header.compression, body)
    out = bytearray(pack_header(header, batch_length=HEADER_SIZE - LOG_OVERHEAD + len(body), crc=0,
                                attributes=attributes, max_timestamp=max_timestamp, record_count=len(parts)))
    out += body
    return bytes(set_crc(out))


# --- control batches (transaction markers) -------------------------------------------------------

def control_batch(producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                  timestamp_ms: int) -> bytearray:
    """A COMMIT or ABORT marker as a transaction coordinator has it written: transactional and
    control bits, the producer's id and epoch, no sequence, one version-0 record."""
    key = _CONTROL_KEY.pack(0, COMMIT if commit else ABORT)
    value = _MARKER_VALUE.pack(0, coordinator_epoch)
    return build_batch([(key, value, timestamp_ms)], attributes=TRANSACTIONAL | CONTROL,
                       producer_id=producer_id, producer_epoch=producer_epoch)


def control_type(key: bytes | None) -> int | None:
    """The type of a control record from its key, Kafka's ControlRecordType.parse: versions
    above 0 read as 0; None for what Kafka would refuse (null, short, negative version)."""
    if key is None or len(key) < _CONTROL_KEY.size:
        return None
    version, kind = _CONTROL_KEY.unpack_from(key)
    return kind if version >= 0 else None


def read_marker(batch: Buffer) -> tuple[int, int] | None:
    """(COMMIT or ABORT, coordinator epoch) of one whole control batch; None when its record is
    of another control type (Kafka ignores those) or missing. A value too short for the epoch
    reads as coordinator epoch -1."""
    header = parse_header(batch)
    if header.record_count < 1:
        return None
    _, _, _, _, key, value = next(iter_records(records_section(batch, header), 1))
    kind = control_type(key)
    if kind not in (ABORT, COMMIT):
        return None
    if value is None or len(value) < _MARKER_VALUE.size:
        return kind, -1
    return kind, _MARKER_VALUE.unpack_from(value)[1]
