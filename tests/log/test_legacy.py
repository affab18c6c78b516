"""kbroker.log.legacy: message sets (magic 0 and 1) against hand-assembled bytes in Kafka's
layout, CRCs, compressed wrappers, and conversions to and from magic-2 batches."""
from __future__ import annotations

import binascii
import gzip
import struct

import lz4.frame
import pytest

from kbroker import errors
from kbroker._core import records as core_records
from kbroker.log import legacy
from kbroker.log.legacy import LegacyRecord


def hand_message(offset: int, magic: int, attributes: int, key, value, timestamp: int | None = None) -> bytes:
    """Kafka's LegacyRecord layout written out field by field."""
    def blob(b):
        return struct.pack(">i", -1) if b is None else struct.pack(">i", len(b)) + b
    rest = bytes([magic, attributes])
    if magic == 1:
        rest += struct.pack(">q", timestamp)
    rest += blob(key) + blob(value)
    crc = binascii.crc32(rest)
    return struct.pack(">qiI", offset, 4 + len(rest), crc) + rest


def test_magic0_message_is_byte_exact():
    got = legacy.encode_message(5, b"k", b"v", magic=0)
    expected = (b"\x00\x00\x00\x00\x00\x00\x00\x05" b"\x00\x00\x00\x10"
                + struct.pack(">I", binascii.crc32(b"\x00\x00\x00\x00\x00\x01k\x00\x00\x00\x01v"))
                + b"\x00\x00" b"\x00\x00\x00\x01k" b"\x00\x00\x00\x01v")
    assert got == expected
    assert len(got) == 12 + legacy.RECORD_OVERHEAD[0] + 2


def test_magic1_message_is_byte_exact_with_null_key():
    got = legacy.encode_message(-1, None, b"hello", magic=1, timestamp=1_600_000_000_123)
    assert got == hand_message(-1, 1, 0, None, b"hello", 1_600_000_000_123)
    assert got[12 + 4:12 + 6] == b"\x01\x00"
    assert struct.unpack_from(">q", got, 18)[0] == 1_600_000_000_123
    assert struct.unpack_from(">i", got, 26)[0] == -1


def test_parse_hand_built_set():
    data = (hand_message(0, 0, 0, None, b"a") + hand_message(1, 1, 0, b"k", None, 77)
            + hand_message(2, 1, 0, b"", b"", 78))
    entries = legacy.parse_entries(data)
    assert [(e.offset, e.magic, e.timestamp, e.key, e.value) for e in entries] == [
        (0, 0, -1, None, b"a"), (1, 1, 77, b"k", None), (2, 1, 78, b"", b"")]
    assert sum(e.size for e in entries) == len(data)


def test_bad_crc_is_corrupt_message():
    data = bytearray(hand_message(0, 1, 0, b"k", b"value", 1))
    data[-1] ^= 0xFF
    with pytest.raises(errors.CorruptMessageError):
        legacy.parse_entries(bytes(data))
    assert legacy.parse_entries(bytes(data), verify_crc=False)[0].value == b"valu" + bytes([ord("e") ^ 0xFF])


@pytest.mark.parametrize("cut", [1, 5, 12, 20])
def test_truncated_set(cut):
    data = hand_message(0, 1, 0, b"k", b"v" * 10, 1) * 2
    with pytest.raises(errors.CorruptMessageError):
        legacy.parse_entries(data[:-cut])
    assert len(legacy.parse_entries(data[:-cut], allow_partial=True)) == 1


def test_inconsistent_lengths_and_magic():
    good = hand_message(0, 0, 0, b"k", b"v")
    bad_len = bytearray(good)
    struct.pack_into(">i", bad_len, 18, 5)  # key length overruns the message
    bad_len[12:16] = struct.pack(">I", binascii.crc32(bytes(bad_len[16:])))
    with pytest.raises(errors.CorruptMessageError):
        legacy.parse_entries(bytes(bad_len))
    magic3 = bytearray(good)
    magic3[16] = 3
    with pytest.raises(errors.InvalidRecordError):
        legacy.parse_entries(bytes(magic3), verify_crc=False)
    tiny = struct.pack(">qi", 0, 6) + b"\x00" * 6
    with pytest.raises(errors.CorruptMessageError):
        legacy.parse_entries(tiny)


def test_gzip_wrapper_magic1_relative_offsets():
    inner = hand_message(0, 1, 0, b"a", b"1", 10) + hand_message(1, 1, 0, b"b", b"2", 11) \
        + hand_message(2, 1, 0, None, b"3", 12)
    wrapper = hand_message(41, 1, legacy.GZIP, None, gzip.compress(inner), 12)
    recs = legacy.read_records(wrapper)
    assert [(r.offset, r.timestamp, r.key, r.value) for r in recs] == [
        (39, 10, b"a", b"1"), (40, 11, b"b", b"2"), (41, 12, None, b"3")]


def test_magic1_log_append_time_wrapper_gives_its_timestamp():
    inner = hand_message(0, 1, 0, None, b"x", 5) + hand_message(1, 1, 0, None, b"y", 6)
    wrapper = hand_message(1, 1, legacy.GZIP | legacy.TIMESTAMP_TYPE_MASK, None, gzip.compress(inner), 999)
    assert [(r.timestamp, r.log_append_time) for r in legacy.read_records(wrapper)] == [(999, True), (999, True)]


def test_magic0_wrapper_keeps_absolute_inner_offsets():
    inner = hand_message(7, 0, 0, None, b"x") + hand_message(8, 0, 0, None, b"y")
    wrapper = hand_message(8, 0, legacy.GZIP, None, gzip.compress(inner))
    assert [r.offset for r in legacy.read_records(wrapper)] == [7, 8]


def test_snappy_xerial_and_raw():
    import cramjam

    inner = hand_message(0, 1, 0, None, b"s" * 100, 1)
    xerial = legacy.compress(legacy.SNAPPY, inner)
    assert xerial[:16] == b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01"
    raw = bytes(cramjam.snappy.compress_raw(inner))
    for value in (xerial, raw):
        wrapper = hand_message(0, 1, legacy.SNAPPY, None, value, 1)
        assert legacy.read_records(wrapper)[0].value == b"s" * 100


def test_lz4_magic1_frame_and_magic0_broken_checksum():
    inner1 = hand_message(0, 1, 0, None, b"z" * 300, 1)
    frame = lz4.frame.compress(inner1)
    assert legacy.read_records(hand_message(0, 1, legacy.LZ4, None, frame, 1))[0].value == b"z" * 300

    inner0 = hand_message(0, 0, 0, None, b"q" * 300)
    kafka_frame = legacy.compress(legacy.LZ4, inner0, magic=0)
    # Kafka 0.8-0.9: header checksum over magic number + FLG + BD rather than FLG + BD
    assert kafka_frame[6] == (legacy.xxh32(kafka_frame[0:6]) >> 8) & 0xFF
    assert kafka_frame[6] != (legacy.xxh32(kafka_frame[4:6]) >> 8) & 0xFF
    assert legacy.read_records(hand_message(0, 0, legacy.LZ4, None, kafka_frame))[0].value == b"q" * 300
    with pytest.raises(errors.CorruptMessageError):  # a proper reader refuses that header for magic 1
        legacy.read_records(hand_message(0, 1, legacy.LZ4, None, kafka_frame, 1))


def test_xxh32_known_values():
    assert legacy.xxh32(b"") == 0x02CC5D05
    data = bytes(range(100))
    frame = lz4.frame.compress(data, store_size=False)
    assert frame[6] == (legacy.xxh32(frame[4:6]) >> 8) & 0xFF
    sized = lz4.frame.compress(data)  # content size stored: 8 more header bytes (longer than 16 in all)
    assert sized[4] & 0x08 and sized[14] == (legacy.xxh32(sized[4:14]) >> 8) & 0xFF
    for n in (3, 16, 17, 100, 1000):  # the content checksum is XXH32 of the content
        checked = lz4.frame.compress(data[:n] * 3, content_checksum=True)
        assert struct.unpack("<I", checked[-4:])[0] == legacy.xxh32(data[:n] * 3)
    assert legacy.xxh32(b"a" * 40) != legacy.xxh32(b"a" * 41)


def test_nested_compression_and_zstd_refused():
    inner = hand_message(0, 1, legacy.GZIP, None, gzip.compress(hand_message(0, 1, 0, None, b"x", 1)), 1)
    with pytest.raises(errors.InvalidRecordError):
        legacy.read_records(hand_message(0, 1, legacy.GZIP, None, gzip.compress(inner), 1))
    with pytest.raises(errors.UnsupportedCompressionTypeError):
        legacy.read_records(hand_message(0, 1, legacy.ZSTD, None, b"\x00", 1))
    with pytest.raises(errors.CorruptMessageError):
        legacy.read_records(hand_message(0, 1, legacy.GZIP, None, None, 1))


# --- conversions ------------------------------------------------------------------------------

RECORDS = [LegacyRecord(-1, 1_700_000_000_000 + i, None if i % 3 == 0 else b"key-%d" % i,
                        None if i == 4 else b"value %d " % i * (i + 1)) for i in range(9)]


def _set(magic: int, codec: int) -> bytes:
    recs = [r._replace(timestamp=r.timestamp if magic else -1) for r in RECORDS]
    if codec == legacy.NONE:
        return b"".join(legacy.encode_message(-1, r.key, r.value, magic=magic, timestamp=r.timestamp) for r in recs)
    return legacy.encode_wrapper(codec, recs, magic=magic)


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", [legacy.NONE, legacy.GZIP, legacy.SNAPPY, legacy.LZ4])
def test_up_convert_makes_one_valid_v2_batch(magic, codec):
    batch = legacy.up_convert(_set(magic, codec))
    assert isinstance(batch, bytearray)
    info = core_records.validate(batch)
    assert info.batch_count == 1 and info.record_count == len(RECORDS) == info.offset_count
    header = core_records.parse_header(batch)
    assert header.magic == 2 and header.compression == codec and header.producer_id == -1
    assert header.timestamp_type == 0
    if magic == 0:  # Kafka: magic 0 messages have NO_TIMESTAMP after up-conversion
        assert header.base_timestamp == -1 and header.max_timestamp == -1
    else:
        assert header.base_timestamp == RECORDS[0].timestamp
        assert header.max_timestamp == RECORDS[-1].timestamp
    core_records.assign_offsets(batch, 100)
    got = list(legacy.read_batches(bytes(batch)))
    assert [r.offset for r in got] == list(range(100, 100 + len(RECORDS)))
    assert [(r.key, r.value) for r in got] == [(r.key, r.value) for r in RECORDS]
    assert [r.timestamp for r in got] == [r.timestamp if magic else -1 for r in RECORDS]


def test_up_convert_refuses_corruption():
    data = bytearray(_set(1, legacy.NONE))
    data[30] ^= 1
    with pytest.raises(errors.CorruptMessageError):
        legacy.up_convert(bytes(data))
    with pytest.raises(errors.CorruptMessageError):
        legacy.up_convert(_set(1, legacy.NONE)[:-3])


def test_is_legacy():
    assert legacy.is_legacy(_set(0, 0)) and legacy.is_legacy(_set(1, 1))
    assert not legacy.is_legacy(legacy.build_batch(RECORDS))
    assert not legacy.is_legacy(b"\x00" * 10)


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", [legacy.NONE, legacy.GZIP, legacy.LZ4, legacy.SNAPPY])
def test_down_convert_keeps_offsets_keys_values(magic, codec):
    a = legacy.build_batch(RECORDS[:5], codec)
    b = legacy.build_batch(RECORDS[5:], codec)
    core_records.assign_offsets(a, 10)
    core_records.assign_offsets(b, 15)
    out = legacy.down_convert(bytes(a + b), magic, 0, 1 << 20, True)
    entries = legacy.parse_entries(out)
    assert all(e.magic == magic and e.codec == 0 for e in entries)
    assert [e.offset for e in entries] == list(range(10, 19))
    assert [(e.key, e.value) for e in entries] == [(r.key, r.value) for r in RECORDS]
    assert [e.timestamp for e in entries] == [r.timestamp if magic else -1 for r in RECORDS]
    assert out.length == len(out)
    # each message is exactly what hand_message builds
    assert out[:entries[0].size] == hand_message(10, magic, 0, RECORDS[0].key, RECORDS[0].value,
                                                 RECORDS[0].timestamp if magic else None)


def test_down_convert_starts_at_fetch_offset_and_respects_max_bytes():
    batch = legacy.build_batch(RECORDS)
    core_records.assign_offsets(batch, 0)
    whole = legacy.down_convert(bytes(batch), 1, 3, 1 << 20, True)
    assert [e.offset for e in legacy.parse_entries(whole)] == list(range(3, 9))
    first = legacy.parse_entries(whole)[0].size
    assert legacy.down_convert(bytes(batch), 1, 3, first, False) == whole[:first]
    assert legacy.down_convert(bytes(batch), 1, 3, first - 1, False) == b""
    assert legacy.down_convert(bytes(batch), 1, 3, first - 1, True) == whole[:first]  # at least one
    assert legacy.down_convert(bytes(batch), 1, 3, first + 5, False) == whole[:first]


def test_down_convert_skips_control_batches_and_log_append_time():
    batch = legacy.build_batch(RECORDS[:2])
    core_records.assign_offsets(batch, 0)
    control = legacy.build_batch([LegacyRecord(0, 5, b"\x00\x00\x00\x00", b"")])
    struct.pack_into(">h", control, 21, 0x20 | 0x10)
    core_records.assign_offsets(control, 2)
    struct.pack_into(">I", control, 17, core_records.crc32c(bytes(control[21:])))
    appended = legacy.build_batch(RECORDS[2:4])
    core_records.assign_offsets(appended, 3, log_append_time_ms=123456)
    out = legacy.parse_entries(legacy.down_convert(bytes(batch + control + appended), 1, 0, 1 << 20, True))
    assert [e.offset for e in out] == [0, 1, 3, 4]
    assert [(e.timestamp, e.attributes) for e in out[2:]] == [(123456, 8), (123456, 8)]


def test_round_trip_through_both_conversions():
    for magic in (0, 1):
        batch = legacy.up_convert(_set(magic, legacy.GZIP))
        core_records.assign_offsets(batch, 1000)
        back = legacy.read_records(legacy.down_convert(bytes(batch), magic, 0, 1 << 20, True))
        assert [(r.offset, r.key, r.value) for r in back] == [(1000 + i, r.key, r.value) for i, r in enumerate(RECORDS)]
