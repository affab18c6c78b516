"""Appends to a log whose ``message.format.version`` is below 0.11.0: the records are stored as
magic 1 (0.10.x) or magic 0 (0.8/0.9) messages, as Kafka 2.8's LogValidator converts them
(core/src/main/scala/kafka/log/LogValidator.scala).

``prepare`` reads what a producer sent (a v2 batch from Produce v3+, a legacy message set from
Produce v0-2) once its checks passed and applies the rules a conversion adds: transactional and
idempotent batches are refused with UNSUPPORTED_FOR_MESSAGE_FORMAT, records with headers and
zstd cannot be written in magic 0/1 (Kafka's MemoryRecordsBuilder throws, which a client sees as
UNKNOWN_SERVER_ERROR). ``build`` writes the messages once the log knows the first offset:

  - uncompressed target: one entry per record, offsets consecutive;
  - compressed target (the producer's codec, or ``compression.type``): one wrapper holding every
    record, inner offsets relative (magic 1) or absolute (magic 0), wrapper offset the last one;
    a producer's own magic-1 wrapper in the topic's codec is kept byte for byte, its offset (and
    for LogAppendTime its timestamp) rewritten, as LogValidator's in-place assignment;
  - LogAppendTime (magic 1): every timestamp is the append time, attribute bit 3 set.
The max timestamp and its offset follow MemoryRecordsBuilder.info: per record when uncompressed
(the first offset under LogAppendTime), the last offset when compressed.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from kbroker import errors
from kbroker.config.topic import LogConfig
from kbroker.log import batches, legacy
from kbroker.log.batches import LOG_APPEND_TIME, NO_TIMESTAMP
from kbroker.log.compression import GZIP, LZ4, NONE, SNAPPY, ZSTD
from kbroker.log.legacy import Entry, LegacyRecord

if TYPE_CHECKING:  # the stub's alias: the compiled module has no such name
    from kbroker._core.records import Buffer

_CODECS = {"uncompressed": NONE, "gzip": GZIP, "snappy": SNAPPY, "lz4": LZ4, "zstd": ZSTD}


class LegacyAppendInfo(NamedTuple):
    """What ``prepare`` learnt; the producer fields are those a legacy message never has, so the
    partition's producer-state bookkeeping (which reads them as from an AppendInfo) skips it."""
    records: list[LegacyRecord]      # in order; offsets are assigned by ``build``
    magic: int                       # the magic stored: 0 or 1
    codec: int                       # NONE: one entry per record, else one wrapper
    wrapper: Entry | None            # a producer's wrapper kept as is (in-place assignment)
    size: int                        # bytes the messages take (for the segment size checks)
    max_timestamp: int
    offset_delta_of_max_timestamp: int
    producer_id: int = -1
    producer_epoch: int = -1
    base_sequence: int = -1
    last_sequence: int = -1
    is_transactional: bool = False
    is_control: bool = False

    @property
    def record_count(self) -> int:
        return len(self.records)

    @property
    def compression(self) -> int:
        return self.codec


def target_codec(config: LogConfig, source_codec: int) -> int:
    """compression.type: ``producer`` keeps the producer's codec, anything else is that codec."""
    return source_codec if config.compression_type == "producer" else _CODECS[config.compression_type]


def prepare_from_batches(buf: Buffer, config: LogConfig) -> LegacyAppendInfo:
    """A client's v2 batches (already validated as for a v2 log) as the messages a magic 0/1 log
    stores; the codec is the (last) compressed batch's, as LogValidator's source codec."""
    magic = config.record_magic
    out: list[LegacyRecord] = []
    source_codec = NONE
    for header, data in legacy.stored_batches(buf):
        if header.is_transactional:
            raise errors.UnsupportedForMessageFormatError(
                f"Transactional records cannot be used with magic version {magic}")
        if header.producer_id >= 0:
            raise errors.UnsupportedForMessageFormatError(
                f"Idempotent records cannot be used with magic version {magic}")
        source_codec = header.compression or source_codec
        section = batches.records_section(data, header)
        for start, _, _, timestamp_delta, key, value in batches.iter_records(section, header.record_count):
            if _has_headers(section, start):
                raise errors.UnknownServerError(f"Magic v{magic} does not support record headers")
            timestamp = header.base_timestamp + timestamp_delta if header.base_timestamp >= 0 else NO_TIMESTAMP
            out.append(LegacyRecord(len(out), timestamp if magic == 1 else NO_TIMESTAMP, key, value, magic))
    return _info(out, magic, target_codec(config, source_codec), None)


def prepare_from_message_set(buf: Buffer, config: LogConfig, topic_partition: str, now: int) -> LegacyAppendInfo:
    """Produce v0-2: a message set (CRCs checked) kept in magic 0/1, converted when its magic is not
    the topic's. The checks LogValidator makes of legacy messages come first."""
    magic = config.record_magic
    entries = legacy.parse_entries(buf)
    if not entries:
        raise errors.InvalidRecordError("Record batch has no batches at all")
    first = entries[0]
    source_codec = NONE
    for entry in entries:
        if entry.magic != first.magic:
            raise errors.InvalidRecordError(
                f"Batch magic {entry.magic} is not the same as the first batch'es magic byte {first.magic}")
        if entry.size > config.max_message_bytes:
            raise errors.MessageTooLargeError(
                f"The record batch size in the append to {topic_partition} is {entry.size} bytes which exceeds "
                f"the maximum configured value of {config.max_message_bytes}.")
        if entry.codec != NONE:
            source_codec = entry.codec
    if source_codec != NONE and len(entries) > 1:
        raise errors.InvalidRecordError("Compressed outer record has more than one batch")
    out: list[LegacyRecord] = []
    for entry in entries:
        if entry.magic == 1 and entry.attributes & LOG_APPEND_TIME:
            raise errors.InvalidTimestampError(
                f"Invalid timestamp type in message at offset {entry.offset}. Producer should not set timestamp "
                "type to LogAppendTime.")
        if entry.magic == 1 and entry.codec != NONE and magic == 1:
            _check_inner_offsets(entry)
        for record in legacy.open_entry(entry):
            _check_record(record, config, topic_partition, now)
            timestamp = record.timestamp if magic == 1 else NO_TIMESTAMP
            out.append(LegacyRecord(len(out), timestamp, record.key, record.value, magic))
    codec = target_codec(config, source_codec)
    # In-place assignment: the producer's compressed payload is kept when neither codec nor magic changes
    # (never for magic 0, whose inner offsets are absolute and must be rewritten).
    in_place = codec != NONE and codec == source_codec and first.magic == magic == 1
    return _info(out, magic, codec, first if in_place else None)


def _check_inner_offsets(entry: Entry) -> None:
    """A magic-1 wrapper's inner offsets must be 0..n-1 (LogValidator): its payload may be kept as
    sent, and consumers derive each message's offset from them and the wrapper's."""
    if entry.value is None:  # open_entry's check, needed first here
        raise errors.CorruptMessageError(f"compressed message at offset {entry.offset} has a null value")
    inner = legacy.parse_entries(legacy.decompress(entry.codec, entry.value, entry.magic))
    for expected, m in enumerate(inner):
        if m.offset != expected:
            raise errors.InvalidRecordError(
                f"Inner record at relative offset {m.offset} inside the compressed record batch does not have "
                f"incremental offsets, expected offset is {expected}")


def _check_record(record: LegacyRecord, config: LogConfig, topic_partition: str, now: int) -> None:
    """LogValidator.validateKey and validateTimestamp for one legacy message."""
    if config.compact and record.key is None:
        raise errors.InvalidRecordError(
            f"Compacted topic cannot accept message without key in topic partition {topic_partition}.")
    bound = config.message_timestamp_difference_max_ms
    if (not config.log_append_time and record.timestamp != NO_TIMESTAMP
            and abs(record.timestamp - now) > bound):
        raise errors.InvalidTimestampError(
            f"Timestamp {record.timestamp} of message with offset {record.offset} is out of range. The timestamp "
            f"should be within [{now - bound}, {now + bound}]")


def _info(out: list[LegacyRecord], magic: int, codec: int, wrapper: Entry | None) -> LegacyAppendInfo:
    if not out:
        raise errors.InvalidRecordError("no record to write")
    if codec == ZSTD:  # MemoryRecordsBuilder's IllegalArgumentException: UNKNOWN_SERVER_ERROR, as Kafka answers
        raise errors.UnknownServerError(f"ZStandard compression is not supported for magic {magic}")
    max_timestamp, max_delta = NO_TIMESTAMP, -1
    for i, record in enumerate(out):
        if record.timestamp > max_timestamp:
            max_timestamp, max_delta = record.timestamp, i
    info = LegacyAppendInfo(out, magic, codec, wrapper, 0, max_timestamp, max_delta)
    return info._replace(size=len(build(info, 0, -1)[0]))


def build(info: LegacyAppendInfo, first_offset: int, append_time: int) -> tuple[bytearray, int, int]:
    """The stored messages for offsets from ``first_offset`` (``append_time`` >= 0: LogAppendTime);
    returns (bytes, max timestamp, offset of the max timestamp)."""
    magic, n = info.magic, len(info.records)
    last_offset = first_offset + n - 1
    log_append = append_time >= 0 and magic == 1
    type_bit = LOG_APPEND_TIME if log_append else 0
    stamped = [r._replace(timestamp=append_time) for r in info.records] if log_append else info.records
    if log_append:
        max_timestamp = append_time
        offset_of_max = first_offset if info.codec == NONE else last_offset
    else:
        max_timestamp = info.max_timestamp
        offset_of_max = (first_offset + info.offset_delta_of_max_timestamp
                         if info.codec == NONE and max_timestamp >= 0 else last_offset)
    if info.codec == NONE:
        out = bytearray()
        for i, r in enumerate(stamped):
            out += legacy.encode_message(first_offset + i, r.key, r.value, magic=magic, timestamp=r.timestamp,
                                         attributes=type_bit)
        return out, max_timestamp, offset_of_max
    if info.wrapper is not None:
        value = info.wrapper.value
        key = info.wrapper.key
    else:
        inner = b"".join(
            legacy.encode_message(i if magic == 1 else first_offset + i, r.key, r.value, magic=magic,
                                  timestamp=r.timestamp, attributes=type_bit)
            for i, r in enumerate(stamped))
        value = legacy.compress(info.codec, inner, magic)
        key = None
    wrapper_ts = max_timestamp if magic == 1 else NO_TIMESTAMP
    entry = legacy.encode_message(last_offset, key, value, magic=magic, timestamp=wrapper_ts,
                                  attributes=info.codec | type_bit)
    return bytearray(entry), max_timestamp, offset_of_max


def _has_headers(section: bytes, start: int) -> bool:
    """Does the v2 record at ``start`` of an uncompressed records section carry headers?"""
    _, p = batches.read_varint(section, start)              # length
    _, p = batches.read_varlong(section, p + 1)             # attributes, timestamp delta
    _, p = batches.read_varint(section, p)                  # offset delta
    for _ in range(2):                                      # key, value
        size, p = batches.read_varint(section, p)
        p += max(size, 0)
    count, _ = batches.read_varint(section, p)
    return count != 0
