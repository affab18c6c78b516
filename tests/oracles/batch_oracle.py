"""Pure-Python record batch v2 builder and parser: a slow, obviously-correct oracle for tests.

    build_batch(records, ...) -> bytes          one magic-2 batch
    build_control_batch(commit, ...) -> bytes   a transaction marker batch
    parse_batches(data) -> list[dict]           every batch, records decoded
    recompute_crc(batch) -> bytes               fix the CRC after editing a batch in a test
    crc32c(data, crc=0) -> int                  the crc32c PyPI package, or a table fallback

A record is a tuple ``(key, value)``, ``(key, value, headers)`` or
``(key, value, headers, timestamp)``; key/value are bytes or None (null); headers a list of
``(key: str | bytes, value: bytes | None)``. Records without a timestamp get
``DEFAULT_TIMESTAMP + index``.  Layout: Kafka's DefaultRecordBatch / DefaultRecord (big-endian
header, zigzag varints inside records).
"""
from __future__ import annotations

import struct
import zlib

HEADER = struct.Struct(">qiibIhiqqqhii")  # baseOffset .. recordCount, 61 bytes
HEADER_SIZE = HEADER.size
CRC_START = 21  # attributes: first CRC-covered byte
DEFAULT_TIMESTAMP = 1_600_000_000_000

NONE, GZIP, SNAPPY, LZ4, ZSTD = range(5)
CREATE_TIME, LOG_APPEND_TIME = 0, 1

try:  # pragma: no cover - depends on the environment
    from crc32c import crc32c as _crc32c_impl
except ImportError:  # pragma: no cover
    _crc32c_impl = None

_TABLE = []
for _n in range(256):
    _c = _n
    for _ in range(8):
        _c = (_c >> 1) ^ 0x82F63B78 if _c & 1 else _c >> 1
    _TABLE.append(_c)


def crc32c(data, crc: int = 0) -> int:
    """CRC-32C (Castagnoli), continuing from ``crc``."""
    if _crc32c_impl is not None:
        return _crc32c_impl(bytes(data), crc)
    crc ^= 0xFFFFFFFF
    for byte in bytes(data):
        crc = (crc >> 8) ^ _TABLE[(crc ^ byte) & 0xFF]
    return crc ^ 0xFFFFFFFF


# --- varints (zigzag, as Kafka's ByteUtils) ---------------------------------------------------

def encode_varint(value: int) -> bytes:
    """Zigzag varint/varlong (the encoding is the same; only the allowed range differs)."""
    z = (value << 1) ^ (value >> 63)
    z &= (1 << 64) - 1
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def decode_varint(data, pos: int, max_bytes: int = 10) -> tuple[int, int]:
    """Decode a zigzag varint at ``pos``; returns (value, new_pos). ValueError on overrun."""
    raw = shift = 0
    for _ in range(max_bytes):
        if pos >= len(data):
            raise ValueError("varint runs past the end")
        b = data[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if not b & 0x80:
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7
    raise ValueError("varint too long")


def _bytes_field(b) -> bytes:
    if b is None:
        return encode_varint(-1)
    return encode_varint(len(b)) + bytes(b)


# --- building -----------------------------------------------------------------------------

def _normalise(records):
    out = []
    for i, rec in enumerate(records):
        rec = tuple(rec)
        key, value = rec[0], rec[1]
        headers = rec[2] if len(rec) > 2 and rec[2] is not None else []
        ts = rec[3] if len(rec) > 3 and rec[3] is not None else DEFAULT_TIMESTAMP + i
        out.append((key, value, headers, ts))
    return out


def build_record(offset_delta: int, timestamp_delta: int, key, value, headers=()) -> bytes:
    """One record as it appears in the (uncompressed) records section, length prefix included."""
    body = bytearray(b"\x00")  # attributes
    body += encode_varint(timestamp_delta)
    body += encode_varint(offset_delta)
    body += _bytes_field(key)
    body += _bytes_field(value)
    body += encode_varint(len(headers))
    for hk, hv in headers:
        if isinstance(hk, str):
            hk = hk.encode()
        body += _bytes_field(hk)
        body += _bytes_field(hv)
    return encode_varint(len(body)) + bytes(body)


def build_batch(records, base_offset: int = 0, producer_id: int = -1, producer_epoch: int = -1,
                base_sequence: int = -1, compression: int = NONE, timestamp_type: int = CREATE_TIME,
                is_transactional: bool = False, is_control: bool = False,
                partition_leader_epoch: int = -1, *, base_timestamp: int | None = None,
                max_timestamp: int | None = None, offset_deltas=None,
                last_offset_delta: int | None = None, record_count: int | None = None,
                attributes: int | None = None, records_section: bytes | None = None,
                magic: int = 2, crc: int | None = None) -> bytes:
    """Build one magic-2 batch. Defaults give what a well-behaved producer sends.

    Keyword-only overrides produce deliberately odd batches: ``offset_deltas`` (per record),
    ``last_offset_delta``/``record_count``/``attributes``/``magic``/``crc`` (written as given),
    ``base_timestamp``/``max_timestamp`` (default: first and max record timestamp; with
    LogAppendTime ``max_timestamp`` is the append time), ``records_section`` (raw bytes placed
    after the header instead of the encoded, possibly compressed, records)."""
    recs = _normalise(records)
    if offset_deltas is None:
        offset_deltas = list(range(len(recs)))
    if base_timestamp is None:
        base_timestamp = recs[0][3] if recs else -1
    if max_timestamp is None:
        max_timestamp = max((r[3] for r in recs), default=-1)
    if last_offset_delta is None:
        last_offset_delta = max(offset_deltas, default=-1)
    if record_count is None:
        record_count = len(recs)
    if attributes is None:
        attributes = (compression & 7) | (timestamp_type & 1) << 3
        attributes |= (0x10 if is_transactional else 0) | (0x20 if is_control else 0)
    if records_section is None:
        section = b"".join(build_record(od, ts - base_timestamp, k, v, h)
                           for od, (k, v, h, ts) in zip(offset_deltas, recs))
        if compression == GZIP:
            co = zlib.compressobj(6, zlib.DEFLATED, 31)  # wbits 31: gzip container, as Kafka
            section = co.compress(section) + co.flush()
        elif compression != NONE:
            raise NotImplementedError(f"oracle only compresses gzip (codec {compression}); "
                                      f"pass records_section")
    else:
        section = bytes(records_section)
    header = bytearray(HEADER.pack(base_offset, HEADER_SIZE - 12 + len(section),
                                   partition_leader_epoch, magic, 0, attributes, last_offset_delta,
                                   base_timestamp, max_timestamp, producer_id, producer_epoch,
                                   base_sequence, record_count))
    batch = header + section
    if crc is None:
        crc = crc32c(batch[CRC_START:])
    struct.pack_into(">I", batch, 17, crc)
    return bytes(batch)


def build_control_batch(commit: bool, producer_id: int, producer_epoch: int,
                        coordinator_epoch: int = 0, base_offset: int = 0,
                        timestamp: int = DEFAULT_TIMESTAMP,
                        partition_leader_epoch: int = -1) -> bytes:
    """A transaction marker (COMMIT or ABORT) batch, as a transaction coordinator writes it."""
    key = struct.pack(">hh", 0, 1 if commit else 0)
    value = struct.pack(">hi", 0, coordinator_epoch)
    return build_batch([(key, value, [], timestamp)], base_offset=base_offset,
                       producer_id=producer_id, producer_epoch=producer_epoch,
                       is_transactional=True, is_control=True,
                       partition_leader_epoch=partition_leader_epoch)


def recompute_crc(batch) -> bytes:
    """Return ``batch`` (one whole batch) with a freshly computed CRC."""
    out = bytearray(batch)
    struct.pack_into(">I", out, 17, crc32c(out[CRC_START:]))
    return bytes(out)


# --- parsing ------------------------------------------------------------------------------

def _read_bytes(section, pos):
    n, pos = decode_varint(section, pos, 5)
    if n < 0:
        return None, pos
    if pos + n > len(section):
        raise ValueError("field runs past the end")
    return bytes(section[pos:pos + n]), pos + n


def parse_records(section: bytes, count: int, base_offset: int = 0, base_timestamp: int = 0,
                  log_append_time: int | None = None) -> list[dict]:
    """Decode ``count`` records from an uncompressed records section (must be filled exactly)."""
    out = []
    pos = 0
    for _ in range(count):
        length, pos = decode_varint(section, pos, 5)
        end = pos + length
        if length < 1 or end > len(section):
            raise ValueError("record runs past the end of the section")
        body = section[:end]
        attributes = body[pos]
        ts_delta, p = decode_varint(body, pos + 1, 10)
        off_delta, p = decode_varint(body, p, 5)
        key, p = _read_bytes(body, p)
        value, p = _read_bytes(body, p)
        nh, p = decode_varint(body, p, 5)
        if nh < 0:
            raise ValueError("negative header count")
        headers = []
        for _ in range(nh):
            hk, p = _read_bytes(body, p)
            if hk is None:
                raise ValueError("null header key")
            hv, p = _read_bytes(body, p)
            headers.append((hk.decode(), hv))
        if p != end:
            raise ValueError("record length does not match its fields")
        out.append({
            "attributes": attributes,
            "offset_delta": off_delta,
            "offset": base_offset + off_delta,
            "timestamp_delta": ts_delta,
            "timestamp": log_append_time if log_append_time is not None
            else base_timestamp + ts_delta,
            "key": key,
            "value": value,
            "headers": headers,
        })
        pos = end
    if pos != len(section):
        raise ValueError(f"{len(section) - pos} bytes left after {count} records")
    return out


def parse_batches(data, allow_partial: bool = False) -> list[dict]:
    """Decode every batch in ``data``. Each dict has the header fields (same names as
    kbroker's BatchHeader), ``position``, ``size``, ``crc_valid``, and ``records`` (a list of
    record dicts, or None for codecs the oracle cannot inflate: snappy, lz4, zstd). ValueError on
    a malformed buffer; with ``allow_partial`` a truncated last batch is ignored instead."""
    data = bytes(data)
    out = []
    pos = 0
    while pos < len(data):
        if len(data) - pos < HEADER_SIZE:
            if allow_partial:
                break
            raise ValueError(f"truncated batch header at {pos}")
        (base_offset, length, epoch, magic, crc, attributes, last_delta, base_ts, max_ts,
         producer_id, producer_epoch, base_seq, count) = HEADER.unpack_from(data, pos)
        size = length + 12
        if magic != 2:
            raise ValueError(f"magic {magic} at {pos}")
        if size < HEADER_SIZE:
            raise ValueError(f"batch length {length} too small at {pos}")
        if pos + size > len(data):
            if allow_partial:
                break
            raise ValueError(f"truncated batch at {pos}: {size} declared, {len(data) - pos} left")
        batch = data[pos:pos + size]
        section = batch[HEADER_SIZE:]
        codec = attributes & 7
        log_append = bool(attributes & 0x08)
        if codec == GZIP:
            section = zlib.decompress(section, 47)  # 47: auto-detect gzip/zlib header
        records = None
        if codec in (NONE, GZIP):
            records = parse_records(section, count, base_offset, base_ts,
                                    max_ts if log_append else None)
        out.append({
            "position": pos,
            "size": size,
            "base_offset": base_offset,
            "batch_length": length,
            "partition_leader_epoch": epoch,
            "magic": magic,
            "crc": crc,
            "crc_valid": crc == crc32c(batch[CRC_START:]),
            "attributes": attributes,
            "compression": codec,
            "timestamp_type": 1 if log_append else 0,
            "is_transactional": bool(attributes & 0x10),
            "is_control": bool(attributes & 0x20),
            "last_offset_delta": last_delta,
            "base_timestamp": base_ts,
            "max_timestamp": max_ts,
            "producer_id": producer_id,
            "producer_epoch": producer_epoch,
            "base_sequence": base_seq,
            "record_count": count,
            "records": records,
        })
        pos += size
    return out
