"""kbroker._core.records against the pure-Python oracle (tests/oracles/batch_oracle.py) and the
crc32c PyPI package."""
from __future__ import annotations

import mmap
import os
import pickle
import random
import struct
import zlib

import crc32c as crc32c_pkg
import pytest

from kbroker._core import records as R
from tests.oracles import batch_oracle as O

# ------------------------------------------------------------------------------------------
# helpers


def client_batch(n=3, ts=1_000, **kw) -> bytes:
    recs = [(b"k%d" % i, b"value-%d" % i, [("h", b"x")], ts + i) for i in range(n)]
    return O.build_batch(recs, **kw)


def raw_record(body: bytes) -> bytes:
    """A record with a hand-made body (attributes onwards), correctly length-prefixed."""
    return O.encode_varint(len(body)) + body


def v(x: int) -> bytes:
    return O.encode_varint(x)


def batch_with_section(section: bytes, count: int, **kw) -> bytes:
    """A batch whose records section is given raw (count/lastOffsetDelta as a client would)."""
    kw.setdefault("last_offset_delta", count - 1)
    return O.build_batch([(None, b"")] * max(count, 0), records_section=section,
                         record_count=count, **kw)


@pytest.fixture(params=["hardware", "software"])
def crc_backend(request):
    """Run a test on the SSE4.2 path and on the slicing-by-8 fallback."""
    if request.param == "software":
        R._force_software_crc(True)
    elif R._crc_backend() != "sse4.2":
        pytest.skip("CPU without SSE4.2: only the software path exists")
    try:
        yield request.param
    finally:
        R._force_software_crc(False)


# ------------------------------------------------------------------------------------------
# oracle sanity


def test_oracle_varints_match_kafka_encoding():
    assert O.encode_varint(0) == b"\x00"
    assert O.encode_varint(-1) == b"\x01"
    assert O.encode_varint(1) == b"\x02"
    assert O.encode_varint(300) == b"\xd8\x04"
    for x in [0, 1, -1, 63, -64, 64, 2**31 - 1, -(2**31), 2**63 - 1, -(2**63)]:
        assert O.decode_varint(O.encode_varint(x), 0) == (x, len(O.encode_varint(x)))


def test_oracle_round_trip():
    recs = [(b"k", b"v", [("a", b"1"), ("b", None)], 5), (None, None, [], 3)]
    [b] = O.parse_batches(O.build_batch(recs, base_offset=7, producer_id=4, producer_epoch=1,
                                        base_sequence=9))
    assert b["crc_valid"] and b["base_offset"] == 7 and b["max_timestamp"] == 5
    assert [(r["key"], r["value"], r["headers"], r["timestamp"], r["offset"]) for r in b["records"]] == [
        (b"k", b"v", [("a", b"1"), ("b", None)], 5, 7), (None, None, [], 3, 8)]


# ------------------------------------------------------------------------------------------
# CRC-32C


def test_crc32c_check_value(crc_backend):
    assert R.crc32c(b"123456789") == 0xE3069283
    assert R.crc32c(b"") == 0
    assert R._crc_backend() == ("software" if crc_backend == "software" else "sse4.2")


# Around the interleave block sizes (3 x 8192 and 3 x 256 bytes) and their sums.
CRC_LENGTHS = sorted({0, 1, 2, 3, 7, 8, 9, 15, 16, 17, 63, 64, 65, 255, 256, 257, 767, 768, 769,
                      1023, 1536 + 5, 24575, 24576, 24577, 24576 + 768, 24576 + 767, 49152 + 769,
                      65535, 65536, 65537, 100_003})


@pytest.mark.parametrize("n", CRC_LENGTHS)
def test_crc32c_matches_package_all_alignments(crc_backend, n):
    rnd = random.Random(n)
    data = bytes(rnd.getrandbits(8) for _ in range(n + 8))
    for off in range(8):
        view = memoryview(data)[off:off + n]
        assert R.crc32c(view) == crc32c_pkg.crc32c(view), (n, off)


def test_crc32c_large_and_chained(crc_backend):
    data = os.urandom((1 << 20) + 13)
    expected = crc32c_pkg.crc32c(data)
    assert R.crc32c(data) == expected
    assert R.crc32c(bytearray(data)) == expected
    for cut in [0, 1, 4097, 300_001, len(data)]:
        assert R.crc32c(data[cut:], R.crc32c(data[:cut])) == expected
    assert R.crc32c(data[5:], 0x12345678) == crc32c_pkg.crc32c(data[5:], 0x12345678)


def test_crc32c_buffer_types_and_bad_arguments():
    data = b"abcdefgh" * 10
    assert R.crc32c(memoryview(data).cast("Q")) == crc32c_pkg.crc32c(data)  # any item format
    with pytest.raises(BufferError):
        R.crc32c(memoryview(data)[::2])
    with pytest.raises(TypeError):
        R.crc32c("text")
    with pytest.raises(OverflowError):
        R.crc32c(data, 1 << 32)
    with pytest.raises(OverflowError):
        R.crc32c(data, -1)


def test_crc32c_mmap(tmp_path):
    path = tmp_path / "seg"
    data = os.urandom(200_000)
    path.write_bytes(data)
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as mm:
        assert R.crc32c(mm) == crc32c_pkg.crc32c(data)


# ------------------------------------------------------------------------------------------
# parse_header


def test_parse_header_fields_match_oracle():
    batch = client_batch(4, base_offset=42, producer_id=7, producer_epoch=3, base_sequence=11,
                         is_transactional=True, partition_leader_epoch=5)
    h = R.parse_header(batch)
    [o] = O.parse_batches(batch)
    for name in ["base_offset", "batch_length", "partition_leader_epoch", "magic", "crc",
                 "attributes", "compression", "timestamp_type", "is_transactional", "is_control",
                 "last_offset_delta", "base_timestamp", "max_timestamp", "producer_id",
                 "producer_epoch", "base_sequence", "record_count", "size", "position"]:
        assert getattr(h, name) == o[name], name
    assert h.last_offset == 45 and h.last_sequence == 14
    assert h.size == len(batch)
    with pytest.raises(AttributeError):
        h.base_offset = 1
    assert "base_offset=42" in repr(h)


def test_parse_header_needs_only_the_header_and_honours_position():
    b1, b2 = client_batch(2), client_batch(3, base_offset=9)
    assert R.parse_header(b2[:R.HEADER_SIZE]).record_count == 3
    h = R.parse_header(b1 + b2, len(b1))
    assert (h.position, h.base_offset, h.size) == (len(b1), 9, len(b2))


def test_parse_header_errors():
    batch = bytearray(client_batch(2))
    with pytest.raises(R.CorruptRecordError) as e:
        R.parse_header(batch[:60])
    assert e.value.code == 2 and e.value.batch_index == -1
    with pytest.raises(R.CorruptRecordError):
        R.parse_header(batch, len(batch) + 5)
    with pytest.raises(ValueError):
        R.parse_header(batch, -1)
    bad = bytearray(batch)
    bad[16] = 1
    with pytest.raises(R.InvalidRecordError, match="magic 1"):
        R.parse_header(bad)
    bad = bytearray(batch)
    struct.pack_into(">i", bad, 8, 48)
    with pytest.raises(R.CorruptRecordError, match="declares 60 bytes"):
        R.parse_header(bad)


def test_sequences_wrap():
    h = R.parse_header(client_batch(3, producer_id=1, producer_epoch=0, base_sequence=2**31 - 2))
    assert h.last_sequence == 0
    h = R.parse_header(client_batch(3, producer_id=1, producer_epoch=0, base_sequence=2**31 - 1))
    assert h.last_sequence == 1
    assert R.parse_header(client_batch(3)).last_sequence == -1


# ------------------------------------------------------------------------------------------
# validate: accepted batches


def test_validate_single_batch(crc_backend):
    batch = client_batch(5, ts=2_000, producer_id=12, producer_epoch=2, base_sequence=100)
    info = R.validate(batch)
    assert (info.batch_count, info.offset_count, info.record_count, info.size) == (1, 5, 5, len(batch))
    assert (info.first_timestamp, info.max_timestamp, info.offset_delta_of_max_timestamp) == (2000, 2004, 4)
    assert (info.producer_id, info.producer_epoch, info.base_sequence, info.last_sequence) == (12, 2, 100, 104)
    assert (info.is_transactional, info.is_control, info.compression) == (False, False, 0)
    assert "record_count=5" in repr(info)


def test_validate_many_batches_and_buffer_types():
    batches = [client_batch(n, ts=100 * n) for n in (1, 4, 2, 7)]
    data = b"".join(batches)
    for buf in (data, bytearray(data), memoryview(data)):
        info = R.validate(buf)
        assert (info.batch_count, info.offset_count, info.record_count) == (4, 14, 14)
        assert info.first_timestamp == 100
        # max timestamp 706 is record 6 of the last batch: offset 1 + 4 + 2 + 6
        assert (info.max_timestamp, info.offset_delta_of_max_timestamp) == (706, 13)


def test_validate_keys_headers_nulls_tombstones():
    recs = [
        (None, b"null key", [], 10),
        (b"tombstone", None, [], 11),
        (b"", b"", [], 12),                      # empty, not null
        (b"k", b"v" * 300, [("h1", b"a"), ("h2", None), ("", b"")], 13),
        (None, None, [("x" * 200, b"y" * 200)], 9),
    ]
    batch = O.build_batch(recs)
    info = R.validate(batch)
    assert info.record_count == 5 and info.max_timestamp == 13
    assert info.offset_delta_of_max_timestamp == 3
    [o] = O.parse_batches(batch)
    assert [(r["key"], r["value"]) for r in o["records"]] == [(k, val) for k, val, _, _ in recs]


def test_validate_timestamps_out_of_order_and_negative_deltas():
    batch = O.build_batch([(None, b"a", [], 50), (None, b"b", [], 10), (None, b"c", [], 70),
                           (None, b"d", [], 70), (None, b"e", [], -1)])
    info = R.validate(batch)
    assert info.first_timestamp == 50
    assert (info.max_timestamp, info.offset_delta_of_max_timestamp) == (70, 2)


def test_validate_no_timestamps():
    batch = O.build_batch([(None, b"a", [], -1), (None, b"b", [], -1)])
    info = R.validate(batch)
    assert (info.max_timestamp, info.offset_delta_of_max_timestamp) == (-1, -1)


def test_validate_gzip_batch():
    recs = [(b"k%d" % i, os.urandom(50) + b"z" * 500, [], 1_000 + i) for i in range(20)]
    batch = O.build_batch(recs, compression=O.GZIP, producer_id=3, producer_epoch=0, base_sequence=0)
    info = R.validate(batch)
    assert (info.compression, info.record_count, info.offset_count) == (1, 20, 20)
    # header-level: max timestamp credited to the batch's last offset
    assert (info.max_timestamp, info.offset_delta_of_max_timestamp) == (1019, 19)
    [o] = O.parse_batches(batch)
    assert [r["value"] for r in o["records"]] == [r[1] for r in recs]


@pytest.mark.parametrize("codec", [2, 3, 4])
def test_validate_other_codecs_are_not_inflated(codec):
    batch = O.build_batch([(None, b"x")] * 3, attributes=codec, records_section=b"opaque blob")
    assert R.validate(batch).compression == codec


def test_validate_transactional_and_control_from_replication():
    data = client_batch(3, producer_id=5, producer_epoch=1, base_sequence=0, is_transactional=True)
    assert R.validate(data).is_transactional
    marker = O.build_control_batch(True, producer_id=5, producer_epoch=1, coordinator_epoch=3,
                                   base_offset=3)
    info = R.validate(data + marker, from_client=False)
    assert info.batch_count == 2 and info.offset_count == 4


def test_validate_big_batch_of_1k_records(crc_backend):
    recs = [(None, os.urandom(1024), [], 5_000 + i) for i in range(1024)]
    batch = O.build_batch(recs)
    assert len(batch) > 1 << 20
    info = R.validate(batch, max_batch_bytes=2 << 20)
    assert info.record_count == 1024 and info.max_timestamp == 6_023


def test_validate_replicated_sparse_batch():
    # after compaction: offsets 0, 3, 7 kept of 0..7
    batch = O.build_batch([(b"a", b"1"), (b"b", b"2"), (b"c", b"3")], offset_deltas=[0, 3, 7])
    with pytest.raises(R.InvalidRecordError):
        R.validate(batch)
    info = R.validate(batch, from_client=False)
    assert (info.offset_count, info.record_count) == (8, 3)
    empty = O.build_batch([], last_offset_delta=4, base_timestamp=1, max_timestamp=1)
    info = R.validate(empty, from_client=False)
    assert (info.offset_count, info.record_count) == (5, 0)


def test_validate_empty_buffer():
    with pytest.raises(R.InvalidRecordError):
        R.validate(b"")
    assert R.validate(b"", from_client=False).batch_count == 0


# ------------------------------------------------------------------------------------------
# validate: rejections


def test_truncated_at_every_cut_point():
    batch = client_batch(2)
    for cut in range(1, len(batch)):
        with pytest.raises(R.CorruptRecordError) as e:
            R.validate(batch[:cut])
        err = e.value
        assert (err.code, err.position, err.batch_index) == (2, 0, 0), cut
        if cut >= 12:
            assert f"declares {len(batch)} bytes" in str(err) and f"only {cut}" in str(err), str(err)
        else:
            assert f"only {cut} bytes" in str(err)


def test_truncated_second_batch_reports_its_index_and_position():
    b1, b2 = client_batch(2), client_batch(3)
    for cut in (1, 11, 12, 30, len(b2) - 1):
        with pytest.raises(R.CorruptRecordError) as e:
            R.validate(b1 + b2[:cut])
        assert (e.value.position, e.value.batch_index) == (len(b1), 1)
        assert str(e.value).startswith(f"batch 1 at position {len(b1)}")


def test_bit_flips_in_crc_span_are_detected(crc_backend):
    batch = client_batch(2, producer_id=1, producer_epoch=0, base_sequence=0)
    for i in range(17, len(batch)):  # the CRC field itself and everything it covers
        for bit in range(8):
            bad = bytearray(batch)
            bad[i] ^= 1 << bit
            with pytest.raises(R.CorruptRecordError, match="CRC-32C") as e:
                R.validate(bad)
            assert e.value.code == 2


def test_bit_flips_outside_crc_are_not_crc_errors():
    batch = client_batch(2)
    for i in list(range(0, 8)) + list(range(12, 16)):  # baseOffset, partitionLeaderEpoch
        for bit in range(8):
            bad = bytearray(batch)
            bad[i] ^= 1 << bit
            assert R.validate(bad).record_count == 2


def test_bit_flips_in_length_field_never_pass():
    batch = client_batch(2)
    for i in range(8, 12):
        for bit in range(8):
            bad = bytearray(batch)
            bad[i] ^= 1 << bit
            with pytest.raises(R.RecordBatchError):
                R.validate(bad)


@pytest.mark.parametrize("magic", [0, 1, 3, 255])
def test_bad_magic(magic):
    bad = bytearray(client_batch(2))
    bad[16] = magic
    with pytest.raises(R.InvalidRecordError) as e:
        R.validate(bad)
    signed = magic - 256 if magic > 127 else magic
    assert e.value.code == 87 and f"magic {signed}" in str(e.value)


def test_small_legacy_message_reported_by_magic():
    # a magic-0 message: offset, size 14, crc, magic 0, attributes 0, null key, null value
    msg = struct.pack(">qiIbbii", 0, 14, 0, 0, 0, -1, -1)
    with pytest.raises(R.InvalidRecordError, match="magic 0"):
        R.validate(msg)


@pytest.mark.parametrize("length", [-1, 0, 4, 5, 48, -(2**31)])
def test_impossible_length(length):
    bad = bytearray(client_batch(2))
    struct.pack_into(">i", bad, 8, length)
    with pytest.raises(R.CorruptRecordError) as e:
        R.validate(bad)
    assert f"declares {length + 12} bytes" in str(e.value)


def test_length_beyond_buffer():
    bad = bytearray(client_batch(2))
    struct.pack_into(">i", bad, 8, 2**31 - 1)
    with pytest.raises(R.CorruptRecordError, match=f"declares {2**31 + 11} bytes .* only {len(bad)}"):
        R.validate(bad)


def test_too_large():
    batch = client_batch(3)
    assert R.validate(batch, max_batch_bytes=len(batch)).size == len(batch)
    with pytest.raises(R.MessageTooLargeError) as e:
        R.validate(client_batch(1) + batch, max_batch_bytes=len(batch) - 1)
    assert (e.value.code, e.value.batch_index) == (10, 1)
    assert f"{len(batch)} bytes" in str(e.value)


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_unknown_codec(codec):
    batch = O.build_batch([(None, b"x")], attributes=codec, records_section=b"??")
    with pytest.raises(R.InvalidRecordError, match=f"codec {codec}"):
        R.validate(batch)


def test_client_control_batch():
    marker = O.build_control_batch(False, producer_id=5, producer_epoch=1)
    with pytest.raises(R.InvalidRecordError, match="control") as e:
        R.validate(marker)
    assert e.value.code == 87
    info = R.validate(marker, from_client=False)
    assert info.is_control and info.is_transactional


def test_client_log_append_time():
    batch = client_batch(2, timestamp_type=O.LOG_APPEND_TIME, max_timestamp=9_999)
    with pytest.raises(R.InvalidTimestampError) as e:
        R.validate(batch)
    assert e.value.code == 32 and isinstance(e.value, R.RecordBatchError)
    info = R.validate(batch, from_client=False)
    assert (info.max_timestamp, info.offset_delta_of_max_timestamp) == (9_999, 1)


def test_producer_id_without_sequence():
    with pytest.raises(R.InvalidRecordError, match="producerId 8 but invalid baseSequence -1"):
        R.validate(client_batch(2, producer_id=8, producer_epoch=0))
    R.validate(client_batch(2, producer_id=8, producer_epoch=0, base_sequence=0))
    R.validate(client_batch(2, producer_id=8, producer_epoch=0), from_client=False)


def test_record_count_mismatch():
    recs = [(None, b"a"), (None, b"b")]
    # header count disagrees with lastOffsetDelta
    with pytest.raises(R.InvalidRecordError, match="record count 3"):
        R.validate(O.build_batch(recs, record_count=3))
    # count and lastOffsetDelta agree but the section holds fewer records
    with pytest.raises(R.InvalidRecordError, match="record 2"):
        R.validate(O.build_batch(recs, record_count=3, last_offset_delta=2))
    # ... or more
    with pytest.raises(R.InvalidRecordError, match="remain after the 1 declared records"):
        R.validate(O.build_batch(recs, record_count=1, last_offset_delta=0))
    with pytest.raises(R.InvalidRecordError, match="remain after the 1 declared records"):
        R.validate(O.build_batch(recs, record_count=1), from_client=False)
    for count in (0, -1):
        with pytest.raises(R.InvalidRecordError, match=f"invalid record count {count}"):
            R.validate(O.build_batch(recs, record_count=count, last_offset_delta=count - 1))
    with pytest.raises(R.InvalidRecordError):
        R.validate(O.build_batch(recs, record_count=-1), from_client=False)
    with pytest.raises(R.InvalidRecordError, match="lastOffsetDelta -1"):
        R.validate(O.build_batch(recs, last_offset_delta=-1), from_client=False)


def test_client_offset_deltas_must_be_consecutive():
    with pytest.raises(R.InvalidRecordError, match="offsetDelta 2, expected 1"):
        R.validate(O.build_batch([(None, b"a"), (None, b"b")], offset_deltas=[0, 2], last_offset_delta=1))
    with pytest.raises(R.InvalidRecordError, match="outside 0..lastOffsetDelta"):
        R.validate(O.build_batch([(None, b"a"), (None, b"b")], offset_deltas=[0, 5], last_offset_delta=1),
                   from_client=False)


def test_trailing_garbage():
    batch = client_batch(2)
    for junk in (b"\x00", b"\x00" * 11, b"\x00" * 12, b"\xff" * 40, b"\x00" * 100):
        with pytest.raises(R.CorruptRecordError) as e:
            R.validate(batch + junk)
        assert (e.value.position, e.value.batch_index) == (len(batch), 1)


# record-level structure (hand-made record bodies: attributes, tsDelta, offDelta, key, value, headers)
GOOD_BODY = b"\x00" + v(0) + v(0) + v(1) + b"k" + v(1) + b"v" + v(0)


def test_hand_made_record_is_valid():
    assert R.validate(batch_with_section(raw_record(GOOD_BODY), 1)).record_count == 1


@pytest.mark.parametrize("section, message", [
    (raw_record(b"\x00" + v(0) + v(0) + v(-1) + v(-1) + v(-1)), "negative header count -1"),
    (raw_record(b"\x00" + v(0) + v(0) + v(-1) + v(-1) + v(1) + v(-1) + v(-1)), "negative key length -1"),
    (raw_record(GOOD_BODY + b"\x00"), "declares 9 bytes but its fields take 8"),
    (v(len(GOOD_BODY) - 1) + GOOD_BODY, "malformed"),  # length one short: value runs past it
    (v(100) + GOOD_BODY, "declares 100 bytes but only 8"),
    (v(-3) + GOOD_BODY, "declares -3 bytes"),
    (b"\xff\xff\xff\xff\xff\x01" + GOOD_BODY, "length unreadable"),  # 6-byte varint
    (raw_record(b"\x00" + b"\x80" * 10 + b"\x00" + v(0) + v(-1) + v(-1) + v(0)), "malformed"),
    (raw_record(b"\x00" + v(0) + v(0) + v(50) + b"k"), "malformed"),  # key longer than record
    (raw_record(b"\x00" + v(0) + v(0) + v(-1) + v(-1) + v(2**31 - 1)), "malformed"),  # huge header count
    (raw_record(b""), "malformed"),  # zero-length record
])
def test_malformed_records(section, message):
    with pytest.raises(R.InvalidRecordError, match=message) as e:
        R.validate(batch_with_section(section, 1))
    assert e.value.code == 87 and "record 0" in str(e.value)


def test_negative_key_and_value_lengths_mean_null():
    # Kafka's DefaultRecord treats any negative key/value length as null
    body = b"\x00" + v(0) + v(0) + v(-7) + v(-2) + v(0)
    assert R.validate(batch_with_section(raw_record(body), 1)).record_count == 1


def test_error_attributes_and_pickle():
    with pytest.raises(R.RecordBatchError) as e:
        R.validate(client_batch(1) + b"junk")
    err = e.value
    assert isinstance(err, ValueError) and isinstance(err, R.CorruptRecordError)
    clone = pickle.loads(pickle.dumps(err))
    assert (type(clone), str(clone), clone.code, clone.position, clone.batch_index) == (
        type(err), str(err), 2, err.position, 1)
    assert [c.code for c in (R.CorruptRecordError, R.MessageTooLargeError, R.InvalidTimestampError,
                             R.InvalidRecordError)] == [2, 10, 32, 87]
    assert (R.HEADER_SIZE, R.LOG_OVERHEAD, R.NO_TIMESTAMP) == (61, 12, -1)


# ------------------------------------------------------------------------------------------
# assign_offsets


def test_assign_offsets_consecutive_and_crc_untouched():
    batches = [client_batch(n) for n in (1, 3, 2)]
    buf = bytearray(b"".join(batches))
    assert R.assign_offsets(buf, 1000, partition_leader_epoch=7) == 1006
    parsed = O.parse_batches(buf)
    assert [b["base_offset"] for b in parsed] == [1000, 1001, 1004]
    assert all(b["partition_leader_epoch"] == 7 and b["crc_valid"] for b in parsed)
    assert [r["offset"] for b in parsed for r in b["records"]] == list(range(1000, 1006))
    R.validate(buf)  # baseOffset / epoch are outside the CRC
    for orig, new in zip(batches, parsed):
        assert new["crc"] == R.parse_header(orig).crc


def test_assign_offsets_sparse_batch_uses_last_offset_delta():
    sparse = O.build_batch([(b"a", b"1"), (b"b", b"2")], offset_deltas=[0, 9])
    buf = bytearray(sparse + client_batch(2))
    assert R.assign_offsets(buf, 0) == 12
    assert [b["base_offset"] for b in O.parse_batches(buf)] == [0, 10]


def test_assign_offsets_log_append_time_recomputes_crc(crc_backend):
    batches = [client_batch(3, ts=10), O.build_batch([(None, b"x")], compression=O.GZIP),
               O.build_batch([(None, b"v" * 1000, [], 10)] * 100)]  # > 64 KiB: the nogil path
    buf = bytearray(b"".join(batches))
    assert len(buf) > 65536
    assert R.assign_offsets(buf, 50, 2, log_append_time_ms=123_456) == 50 + 3 + 1 + 100
    info = R.validate(buf, from_client=False)
    assert info.max_timestamp == 123_456
    for b in O.parse_batches(buf):
        assert b["crc_valid"] and b["timestamp_type"] == 1 and b["max_timestamp"] == 123_456
        assert all(r["timestamp"] == 123_456 for r in b["records"])
        assert b["base_timestamp"] == 10 or b["compression"] == 1
    with pytest.raises(R.InvalidTimestampError):
        R.validate(buf)


def test_assign_offsets_through_memoryview_slice():
    batch = client_batch(2)
    buf = bytearray(b"\xee" * 5 + batch + b"\xee" * 5)
    assert R.assign_offsets(memoryview(buf)[5:5 + len(batch)], 77) == 79
    assert buf[:5] == b"\xee" * 5 and buf[-5:] == b"\xee" * 5
    assert R.parse_header(buf, 5).base_offset == 77


def test_assign_offsets_requires_writable_buffer():
    batch = client_batch(2)
    with pytest.raises(BufferError):
        R.assign_offsets(batch, 0)
    with pytest.raises(BufferError):
        R.assign_offsets(memoryview(bytearray(batch)).toreadonly(), 0)
    with pytest.raises(TypeError):
        R.assign_offsets("text", 0)
    with pytest.raises(ValueError):
        R.assign_offsets(bytearray(batch), -1)


def test_assign_offsets_rejects_malformed_without_writing():
    good = client_batch(2)
    buf = bytearray(good + good[:30])
    before = bytes(buf)
    with pytest.raises(R.CorruptRecordError) as e:
        R.assign_offsets(buf, 500)
    assert e.value.batch_index == 1 and bytes(buf) == before
    assert R.assign_offsets(bytearray(), 5) == 5


# ------------------------------------------------------------------------------------------
# scan_batches


def segment_bytes():
    return [client_batch(2, base_offset=0), O.build_batch([(None, b"z" * 100)] * 4, base_offset=2,
                                                          compression=O.GZIP),
            client_batch(5, base_offset=6)]


def test_scan_good_data():
    batches = segment_bytes()
    data = b"".join(batches)
    headers, valid, status = R.scan_batches(data)
    assert (valid, status) == (len(data), 0)
    assert [h.base_offset for h in headers] == [0, 2, 6]
    pos = 0
    for h, b in zip(headers, batches):
        assert h.position == pos and h.size == len(b)
        assert h.crc == R.parse_header(data, pos).crc
        pos += len(b)
    assert R.scan_batches(b"") == ([], 0, 0)


def test_scan_torn_tail():
    batches = segment_bytes()
    prefix = b"".join(batches[:2])
    last = batches[2]
    for cut in range(1, len(last)):
        headers, valid, status = R.scan_batches(prefix + last[:cut])
        assert (len(headers), valid, status) == (2, len(prefix), 1), cut


def test_scan_corrupt_middle():
    batches = segment_bytes()
    data = bytearray(b"".join(batches))
    mid = len(batches[0]) + 40
    data[mid] ^= 0x10
    headers, valid, status = R.scan_batches(data)
    assert (len(headers), valid, status) == (1, len(batches[0]), 2)
    headers, valid, status = R.scan_batches(data, verify_crc=False)
    assert (len(headers), valid, status) == (3, len(data), 0)


@pytest.mark.parametrize("tail", [b"\x00" * 100, b"\x00" * 20, b"\xff" * 12, b"\x00" * 16 + b"\x07"])
def test_scan_corrupt_tails(tail):
    data = b"".join(segment_bytes())
    assert R.scan_batches(data + tail)[1:] == (len(data), 2)


def test_scan_incomplete_tails():
    data = b"".join(segment_bytes())
    assert R.scan_batches(data + b"\x00" * 11)[1:] == (len(data), 1)
    # plausible length, not enough bytes to see the magic yet
    assert R.scan_batches(data + struct.pack(">qi", 0, 200) + b"\x00\x00")[1:] == (len(data), 1)


def test_scan_bad_magic_in_middle():
    batches = segment_bytes()
    data = bytearray(b"".join(batches))
    data[len(batches[0]) + 16] = 1
    assert R.scan_batches(data)[1:] == (len(batches[0]), 2)


def test_scan_never_raises_on_garbage():
    rnd = random.Random(1234)
    good = b"".join(segment_bytes())
    for i in range(300):
        junk = bytes(rnd.getrandbits(8) for _ in range(rnd.randrange(0, 200)))
        if i % 3 == 0:
            data = bytearray(good)
            for _ in range(rnd.randrange(1, 5)):
                data[rnd.randrange(len(data))] = rnd.getrandbits(8)
        else:
            data = good[:rnd.randrange(len(good))] + junk
        headers, valid, status = R.scan_batches(bytes(data), verify_crc=bool(i % 2))
        assert 0 <= valid <= len(data) and status in (0, 1, 2)
        assert (status == 0) == (valid == len(data))


def test_scan_mmap(tmp_path):
    data = b"".join(client_batch(200, base_offset=200 * i) for i in range(20))  # > 64 KiB
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(data + b"\x00" * 4096)
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as mm:
        view = memoryview(mm)
        try:
            headers, valid, status = R.scan_batches(view)
        finally:
            view.release()
    assert (len(headers), valid, status) == (20, len(data), 2)
    assert headers[-1].last_offset == 3999


# ------------------------------------------------------------------------------------------
# first_offset_at_or_after


def expected_first(recs, base_offset, target, deltas=None):
    deltas = deltas or list(range(len(recs)))
    for d, (_, _, _, ts) in zip(deltas, recs):
        if ts >= target:
            return base_offset + d
    return -1


TS = [10, 20, 20, 30, 25, -1, 30]


def ts_records():
    return [(None, b"v%d" % i, [], t) for i, t in enumerate(TS)]


def test_first_offset_every_boundary_uncompressed():
    recs = ts_records()
    batch = O.build_batch(recs, base_offset=100)
    for target in range(-3, 35):
        assert R.first_offset_at_or_after(batch, target) == expected_first(recs, 100, target), target
    # trailing bytes after the batch are ignored
    assert R.first_offset_at_or_after(batch + client_batch(1), 21) == 103


def test_first_offset_sparse_batch():
    recs = [(None, b"a", [], 5), (None, b"b", [], 7), (None, b"c", [], 9)]
    batch = O.build_batch(recs, base_offset=10, offset_deltas=[1, 4, 6])
    for target in range(3, 12):
        assert R.first_offset_at_or_after(batch, target) == expected_first(recs, 10, target, [1, 4, 6])


def test_first_offset_compressed_needs_records():
    recs = ts_records()
    batch = O.build_batch(recs, base_offset=40, compression=O.GZIP)
    section = zlib.decompress(batch[R.HEADER_SIZE:], 47)
    for target in range(-3, 35):
        assert R.first_offset_at_or_after(batch, target, section) == expected_first(recs, 40, target)
        assert R.first_offset_at_or_after(memoryview(batch), target, bytearray(section)) == \
            expected_first(recs, 40, target)
    with pytest.raises(ValueError, match="decompressed"):
        R.first_offset_at_or_after(batch, 10)
    assert R.first_offset_at_or_after(batch, 31) == -1  # maxTimestamp rules it out: no records needed


def test_first_offset_log_append_time():
    buf = bytearray(O.build_batch(ts_records(), offset_deltas=[2, 3, 4, 5, 6, 7, 8]))
    R.assign_offsets(buf, 1000, log_append_time_ms=500)
    for target in (-5, 0, 30, 499, 500):
        assert R.first_offset_at_or_after(buf, target) == 1002
    assert R.first_offset_at_or_after(buf, 501) == -1


def test_first_offset_errors():
    batch = O.build_batch(ts_records())
    with pytest.raises(R.CorruptRecordError):
        R.first_offset_at_or_after(batch[:-1], 0)
    bad = batch_with_section(v(100) + GOOD_BODY, 1, max_timestamp=50)
    with pytest.raises(R.InvalidRecordError, match="record 0"):
        R.first_offset_at_or_after(bad, 0)
    assert R.first_offset_at_or_after(O.build_batch([], base_timestamp=9, max_timestamp=9,
                                                    last_offset_delta=0), 0) == -1
