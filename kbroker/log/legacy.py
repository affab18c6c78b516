"""Kafka's legacy message formats (magic 0 and 1, "message sets") and conversion to and from
record batches (magic 2), for clients older than Kafka 0.11 (Produce v0-2, Fetch v0-3).

A message set is a sequence of entries, all big-endian::

    offset i64, size i32, crc u32, magic i8, attributes i8, [timestamp i64: magic 1],
    key_length i32, key, value_length i32, value        (lengths -1 = null)

``size`` counts from the CRC on; the CRC is CRC-32 (IEEE, zlib's) of magic..end. Attributes:
codec in bits 0-2 (1 gzip, 2 snappy, 3 lz4), timestamp type in bit 3 (magic 1: 1 = LogAppendTime).
A compressed entry ("wrapper") carries a whole inner message set, compressed, as its value. For
magic 1 the inner offsets are relative (0..n-1) and the wrapper's offset is the absolute offset of
the last inner message; for magic 0 inner offsets are absolute. Snappy is the xerial block framing
(raw snappy is accepted too, as Kafka's SnappyInputStream does); LZ4 is the LZ4 frame format, but
for magic 0 Kafka computed the frame header checksum over the magic number too, so it is ignored
when reading magic 0 and written that broken way for magic 0.

Produce v0-2 messages are up-converted into one magic-2 batch (uncompressed, or compressed with
the codec the producer used), as Kafka's LogValidator does: magic 0 messages have no timestamp
(NO_TIMESTAMP, -1, under CreateTime); the log then assigns offsets as for any batch. A topic whose
message.format.version is below 0.11 keeps magic 0/1 messages instead (``legacy_append``), so a log
may hold both formats: ``read_batches`` and ``down_convert`` walk either. Fetch v0-3 down-converts
stored batches into uncompressed magic-1 (v2-3) or magic-0 (v0-1) messages that keep their offsets
(control batches skipped) and passes stored messages of the reader's magic as they are.
"""
from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, NamedTuple

from kbroker import errors
from kbroker._core import records as core_records
from kbroker.log import batches
from kbroker.log.batches import (
    CODEC_MASK,
    LOG_APPEND_TIME as TIMESTAMP_TYPE_MASK,  # magic 1 attributes and batch attributes alike
    LOG_OVERHEAD,
    NO_TIMESTAMP,
)
from kbroker.log.compression import (
    GZIP,
    LZ4,
    NONE,
    SNAPPY,
    ZSTD,
    compress_records,
    decompress_records,
    decompressed_limit,
)

if TYPE_CHECKING:  # the stub's alias: the compiled module has no such name
    from kbroker._core.records import Buffer

RECORD_OVERHEAD = {0: 14, 1: 22}     # crc + magic + attributes + [timestamp] + key length + value length
MAGIC_OFFSET = 16                    # the magic byte sits at byte 16 in both formats

_ENTRY = struct.Struct(">qiIbb")     # offset, size, crc, magic, attributes
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_LZ4_MAGIC = 0x184D2204


class LegacyRecord(NamedTuple):
    """One (inner) message: what survives a conversion either way."""
    offset: int
    timestamp: int            # NO_TIMESTAMP for magic 0
    key: bytes | None
    value: bytes | None
    magic: int = 1
    log_append_time: bool = False


class Entry(NamedTuple):
    """One top-level message set entry, as stored on the wire."""
    offset: int
    magic: int
    attributes: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    size: int                 # bytes of the whole entry, LOG_OVERHEAD included

    @property
    def codec(self) -> int:
        return self.attributes & CODEC_MASK


def _corrupt(message: str) -> errors.KafkaError:
    return errors.CorruptMessageError(message)


# --- reading -----------------------------------------------------------------------------------

def is_legacy(buf: Buffer) -> bool:
    """Does ``buf`` start with a magic 0 or 1 entry (rather than a magic-2 batch)?"""
    return len(buf) > MAGIC_OFFSET and buf[MAGIC_OFFSET] in (0, 1)


def parse_entries(buf: Buffer, *, verify_crc: bool = True, allow_partial: bool = False) -> list[Entry]:
    """The entries of a message set. A truncated last entry is CORRUPT_MESSAGE, or dropped with
    ``allow_partial`` (fetch responses may end in one)."""
    view = memoryview(buf).cast("B") if not isinstance(buf, (bytes, bytearray)) else buf
    out: list[Entry] = []
    pos, end = 0, len(view)
    while pos < end:
        if end - pos < LOG_OVERHEAD:
            if allow_partial:
                break
            raise _corrupt(f"{end - pos} trailing bytes at position {pos}: not a whole message")
        offset, size = struct.unpack_from(">qi", view, pos)
        if size < RECORD_OVERHEAD[0]:
            raise _corrupt(f"message at position {pos} has size {size}, below the minimum {RECORD_OVERHEAD[0]}")
        if pos + LOG_OVERHEAD + size > end:
            if allow_partial:
                break
            raise _corrupt(f"message at position {pos} claims {size} bytes; {end - pos - LOG_OVERHEAD} remain")
        _, _, crc, magic, attributes = _ENTRY.unpack_from(view, pos)
        body = pos + LOG_OVERHEAD
        if magic not in (0, 1):
            raise errors.InvalidRecordError(f"message at position {pos} has magic {magic}; expected 0 or 1")
        if size < RECORD_OVERHEAD[magic]:
            raise _corrupt(f"magic {magic} message at position {pos} is only {size} bytes")
        if verify_crc:
            actual = zlib.crc32(view[body + 4:body + size]) & 0xFFFFFFFF
            if actual != crc:
                raise _corrupt(f"message at offset {offset} (position {pos}) has CRC {crc:#010x}; "
                               f"its content gives {actual:#010x}")
        p = body + 6
        timestamp = NO_TIMESTAMP
        if magic == 1:
            (timestamp,) = _I64.unpack_from(view, p)
            p += 8
        stop = body + size
        key, p = _read_bytes(view, p, stop, offset)
        value, p = _read_bytes(view, p, stop, offset)
        if p != stop:
            raise _corrupt(f"message at offset {offset} has {stop - p} bytes after its value")
        out.append(Entry(offset, magic, attributes, timestamp, key, value, LOG_OVERHEAD + size))
        pos = stop
    return out


def _read_bytes(view: Buffer, p: int, stop: int, offset: int) -> tuple[bytes | None, int]:
    if p + 4 > stop:
        raise _corrupt(f"message at offset {offset} ends inside a length field")
    (n,) = _I32.unpack_from(view, p)
    p += 4
    if n < 0:
        if n != -1:
            raise _corrupt(f"message at offset {offset} has a length of {n}")
        return None, p
    if p + n > stop:
        raise _corrupt(f"message at offset {offset}: a field of {n} bytes overruns the message")
    return bytes(view[p:p + n]), p + n


def read_records(buf: Buffer, *, verify_crc: bool = True, allow_partial: bool = False) -> list[LegacyRecord]:
    """Every message of a message set, compressed wrappers opened, with absolute offsets."""
    out: list[LegacyRecord] = []
    for entry in parse_entries(buf, verify_crc=verify_crc, allow_partial=allow_partial):
        out.extend(open_entry(entry, verify_crc))
    return out


def open_entry(entry: Entry, verify_crc: bool = True) -> list[LegacyRecord]:
    """The messages of one entry: itself, or a compressed wrapper's inner ones with absolute offsets."""
    log_append = entry.magic == 1 and bool(entry.attributes & TIMESTAMP_TYPE_MASK)
    if entry.codec == NONE:
        return [LegacyRecord(entry.offset, entry.timestamp, entry.key, entry.value, entry.magic, log_append)]
    if entry.value is None:
        raise _corrupt(f"compressed message at offset {entry.offset} has a null value")
    inner = parse_entries(decompress(entry.codec, entry.value, entry.magic), verify_crc=verify_crc)
    if not inner:
        raise errors.InvalidRecordError(f"compressed message at offset {entry.offset} holds no message")
    out = []
    last_relative = inner[-1].offset
    for m in inner:
        if m.codec != NONE:
            raise errors.InvalidRecordError(f"compressed message at offset {entry.offset} nests a compressed one")
        if m.magic != entry.magic:
            raise errors.InvalidRecordError(
                f"message of magic {m.magic} inside a magic {entry.magic} wrapper at offset {entry.offset}")
        if entry.magic == 1:
            offset = entry.offset - last_relative + m.offset
            timestamp = entry.timestamp if log_append else m.timestamp
        else:
            offset, timestamp = m.offset, NO_TIMESTAMP
        out.append(LegacyRecord(offset, timestamp, m.key, m.value, m.magic, log_append))
    return out


# --- compression -------------------------------------------------------------------------------

def decompress(codec: int, data: bytes | memoryview, magic: int) -> bytes:
    if codec == ZSTD:
        raise errors.UnsupportedCompressionTypeError("zstd needs message format v2 (Produce v3+)")
    if codec not in (GZIP, SNAPPY, LZ4):
        raise errors.InvalidRecordError(f"unknown compression codec {codec}")
    if codec == LZ4 and magic == 0:
        return _lz4_frame_decode(bytes(data), check_header=False)
    return decompress_records(codec, data)


def compress(codec: int, data: bytes, magic: int = 2) -> bytes:
    """Kafka's framing for ``codec``; LZ4 for magic 0 gets Kafka's broken header checksum."""
    if codec not in (GZIP, SNAPPY, LZ4):
        raise errors.InvalidRecordError(f"cannot compress with codec {codec}")
    frame = compress_records(codec, data)
    if codec == LZ4 and magic == 0:
        frame = frame[:6] + bytes([(xxh32(frame[:6]) >> 8) & 0xFF]) + frame[7:]
    return frame


def _lz4_frame_decode(data: bytes, check_header: bool = True) -> bytes:
    """The LZ4 frame format, read by hand so that magic 0's wrong header checksum can be ignored."""
    import lz4.block

    limit = decompressed_limit(len(data))
    try:
        if len(data) < 7 or struct.unpack_from("<I", data, 0)[0] != _LZ4_MAGIC:
            raise ValueError("not an LZ4 frame")
        flg, bd = data[4], data[5]
        if flg >> 6 != 1:
            raise ValueError(f"LZ4 frame version {flg >> 6}")
        pos = 6 + (8 if flg & 0x08 else 0) + (4 if flg & 0x01 else 0)
        if check_header and data[pos] != (xxh32(data[4:pos]) >> 8) & 0xFF:
            raise ValueError("bad LZ4 frame header checksum")
        pos += 1
        block_max = 1 << (8 + 2 * ((bd >> 4) & 7))
        out = bytearray()
        while True:
            (n,) = struct.unpack_from("<I", data, pos)
            pos += 4
            if n == 0:
                break
            size = n & 0x7FFFFFFF
            block = data[pos:pos + size]
            if len(block) != size:
                raise ValueError("truncated LZ4 block")
            pos += size
            if n & 0x80000000:
                out += block
            elif flg & 0x20:  # independent blocks
                out += lz4.block.decompress(block, uncompressed_size=block_max)
            else:  # linked blocks: the previous 64 KiB are the dictionary
                out += lz4.block.decompress(block, uncompressed_size=block_max, dict=bytes(out[-65536:]))
            if flg & 0x10:
                pos += 4  # block checksum
            if len(out) > limit:
                raise ValueError(f"decompresses to more than {limit} bytes")
        return bytes(out)
    except Exception as exc:
        raise _corrupt(f"undecodable LZ4 frame: {exc}") from None


_P1, _P2, _P3, _P4, _P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
_M32 = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def xxh32(data: bytes, seed: int = 0) -> int:
    """XXH32 (the LZ4 frame header checksum is its second byte)."""
    n, p = len(data), 0
    if n >= 16:
        v = [(seed + _P1 + _P2) & _M32, (seed + _P2) & _M32, seed & _M32, (seed - _P1) & _M32]
        while p + 16 <= n:
            for i in range(4):
                (lane,) = struct.unpack_from("<I", data, p)
                v[i] = (_rotl((v[i] + lane * _P2) & _M32, 13) * _P1) & _M32
                p += 4
        h = (_rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)) & _M32
    else:
        h = (seed + _P5) & _M32
    h = (h + n) & _M32
    while p + 4 <= n:
        (lane,) = struct.unpack_from("<I", data, p)
        h = (_rotl((h + lane * _P3) & _M32, 17) * _P4) & _M32
        p += 4
    while p < n:
        h = (_rotl((h + data[p] * _P5) & _M32, 11) * _P1) & _M32
        p += 1
    h ^= h >> 15
    h = (h * _P2) & _M32
    h ^= h >> 13
    h = (h * _P3) & _M32
    h ^= h >> 16
    return h


# --- writing legacy messages -------------------------------------------------------------------

def encode_message(offset: int, key: bytes | None, value: bytes | None, *, magic: int = 1,
                   timestamp: int = NO_TIMESTAMP, attributes: int = 0) -> bytes:
    """One message set entry (offset, size, crc, ...)."""
    body = bytearray(struct.pack(">bb", magic, attributes))
    if magic == 1:
        body += _I64.pack(timestamp)
    for field in (key, value):
        if field is None:
            body += _I32.pack(-1)
        else:
            body += _I32.pack(len(field)) + field
    crc = zlib.crc32(body) & 0xFFFFFFFF
    return struct.pack(">qiI", offset, len(body) + 4, crc) + bytes(body)


def encode_wrapper(codec: int, records: Iterable[LegacyRecord], *, magic: int = 1,
                   wrapper_offset: int | None = None) -> bytes:
    """A compressed wrapper entry as producers write it: inner offsets 0..n-1 (magic 1, relative)
    or the given offsets (magic 0); the wrapper's timestamp is the largest inner one."""
    records = list(records)
    inner = b"".join(
        encode_message(i if magic == 1 else r.offset, r.key, r.value, magic=magic, timestamp=r.timestamp)
        for i, r in enumerate(records))
    timestamp = max((r.timestamp for r in records), default=NO_TIMESTAMP) if magic == 1 else NO_TIMESTAMP
    offset = wrapper_offset if wrapper_offset is not None else records[-1].offset
    return encode_message(offset, None, compress(codec, inner, magic), magic=magic, timestamp=timestamp,
                          attributes=codec)


# --- magic 2 batches -----------------------------------------------------------------------------

def build_batch(records: list[LegacyRecord], codec: int = NONE, base_offset: int = 0) -> bytearray:
    """One magic-2 batch (CreateTime, no producer id) holding ``records`` in order, offset deltas
    0..n-1; base timestamp = the first record's, max timestamp = the largest (-1 if none)."""
    if not records:
        raise errors.InvalidRecordError("no record to write")
    return batches.build_batch([(r.key, r.value, r.timestamp) for r in records], codec=codec,
                               base_offset=base_offset)


def up_convert(buf: Buffer) -> bytearray:
    """Produce v0-2: a legacy message set (CRCs checked) as one magic-2 batch, writable so the log
    can assign offsets in place. The codec of the producer's (last) compressed wrapper is kept."""
    entries = parse_entries(buf)
    if not entries:
        raise errors.InvalidRecordError("no message")
    records: list[LegacyRecord] = []
    codec = NONE
    for entry in entries:
        if entry.codec != NONE:
            codec = entry.codec
        opened = open_entry(entry)
        if entry.magic == 1 and entry.attributes & TIMESTAMP_TYPE_MASK:  # LogValidator.validateTimestamp
            raise errors.InvalidTimestampError(
                f"Invalid timestamp type in message at offset {entry.offset}. Producer should not set timestamp "
                "type to LogAppendTime.")
        records.extend(opened)
    return build_batch(records, codec)


class BatchRecord(NamedTuple):
    offset: int
    timestamp: int
    log_append_time: bool
    key: bytes | None
    value: bytes | None


def read_batches(buf: Buffer, from_offset: int = 0) -> Iterable[BatchRecord]:
    """The records of a stored log range at offsets >= ``from_offset``: magic-2 batches (control
    batches skipped, headers dropped) and the magic 0/1 messages a topic below message format
    0.11 stores, in log order. A truncated last batch ends the walk."""
    for header, data in stored_batches(buf):
        if header.last_offset < from_offset:
            continue  # wholly before the fetch offset
        if header.magic < 2:
            for m in open_entry(parse_entries(data, verify_crc=False)[0], False):
                if m.offset >= from_offset:
                    yield BatchRecord(m.offset, m.timestamp, m.log_append_time, m.key, m.value)
            continue
        if header.is_control:
            continue
        log_append = header.timestamp_type == 1
        for _, _, offset_delta, timestamp_delta, key, value in batches.Batch(header, data).records():
            offset = header.base_offset + offset_delta
            if offset < from_offset:
                continue
            if log_append:
                timestamp = header.max_timestamp
            else:
                timestamp = header.base_timestamp + timestamp_delta if header.base_timestamp >= 0 else NO_TIMESTAMP
            yield BatchRecord(offset, timestamp, log_append, key, value)


def stored_batches(buf: Buffer) -> Iterable[tuple[core_records.BatchHeader, memoryview]]:
    """(header, bytes) of each whole batch or legacy entry of a stored range, no CRC check."""
    view = memoryview(buf).cast("B")
    headers, _, _ = core_records.scan_batches(view, False)
    for header in headers:
        yield header, view[header.position:header.position + header.size]


Keep = Callable[[int, bytes | None, bytes | None], bool]  # (offset, key, value) -> does the cleaner keep it


class Retained(NamedTuple):
    data: bytes
    last_offset: int
    max_timestamp: int
    kept: int                 # messages kept of those read
    read: int


def retained(buf: Buffer, keep: Keep) -> Retained:
    """The cleaner's copy of one stored magic 0/1 entry: the messages ``keep(offset, key, value)``
    accepts, in their format. The entry as it is when all are kept, empty data when none is, else
    a new wrapper of the kept ones in its codec, inner offsets relative to the first kept (magic 1,
    gaps and all, so each keeps its offset) and the wrapper's offset the last kept, as Kafka's
    cleaner rebuilds it with MemoryRecordsBuilder.appendWithOffset."""
    entry = parse_entries(buf, verify_crc=False)[0]
    messages = open_entry(entry, False)
    kept = [m for m in messages if keep(m.offset, m.key, m.value)]
    if len(kept) == len(messages):
        return Retained(bytes(buf), entry.offset, entry.timestamp, len(kept), len(messages))
    if not kept:
        return Retained(b"", entry.offset, NO_TIMESTAMP, 0, len(messages))
    type_bit = entry.attributes & TIMESTAMP_TYPE_MASK if entry.magic == 1 else 0
    first = kept[0].offset
    inner = b"".join(encode_message(m.offset - first if entry.magic == 1 else m.offset, m.key, m.value,
                                    magic=entry.magic, timestamp=m.timestamp, attributes=type_bit) for m in kept)
    timestamp = NO_TIMESTAMP
    if entry.magic == 1:
        timestamp = entry.timestamp if type_bit else max(m.timestamp for m in kept)
    data = encode_message(kept[-1].offset, entry.key, compress(entry.codec, inner, entry.magic), magic=entry.magic,
                          timestamp=timestamp, attributes=entry.codec | type_bit)
    return Retained(data, kept[-1].offset, timestamp, len(kept), len(messages))


def validate_stored(buf: Buffer) -> None:
    """Replicated magic 0/1 entries: whole, CRCs right, compressed wrappers readable (a follower
    copies them byte for byte; a bad one must not enter its log)."""
    for entry in parse_entries(buf):
        open_entry(entry)


class LegacyBytes(bytes):
    """Down-converted records: bytes with the ``length`` a FileSlice has, for the Fetch path."""

    @property
    def length(self) -> int:
        return len(self)


def down_convert(buf: Buffer, magic: int, from_offset: int, max_bytes: int, min_one: bool) -> LegacyBytes:
    """Fetch v0-3: a stored range as a magic ``magic`` message set with the original offsets, at
    most ``max_bytes`` of whole entries (at least one with ``min_one``). Magic-2 batches become
    uncompressed messages; stored legacy entries of that very magic pass as they are (a compressed
    wrapper whole, as Kafka sends it; the client skips inner offsets below its fetch offset), those
    of magic 1 for a magic-0 reader are converted message by message."""
    out = bytearray()
    for header, data in stored_batches(buf):
        if header.last_offset < from_offset:
            continue
        if header.magic == magic:
            pieces = [bytes(data)]
        else:
            pieces = [_convert(r, magic) for r in read_batches(data, from_offset)]
        for entry in pieces:
            if len(out) + len(entry) > max_bytes and not (min_one and not out):
                return LegacyBytes(out)
            out += entry
    return LegacyBytes(out)


def _convert(r: BatchRecord, magic: int) -> bytes:
    attributes = TIMESTAMP_TYPE_MASK if (magic == 1 and r.log_append_time) else 0
    return encode_message(r.offset, r.key, r.value, magic=magic, timestamp=r.timestamp, attributes=attributes)
