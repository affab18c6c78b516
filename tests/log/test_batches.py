"""kbroker.log.batches against the pure-Python oracle (tests/oracles/batch_oracle.py) and the
compiled core: varints, building and walking batches, rebuilding them with every codec, and
transaction markers."""
from __future__ import annotations

import struct
import subprocess
import sys

import pytest

from kbroker import errors
from kbroker._core import records
from kbroker.log import batches
from kbroker.log.compression import compress_records, decompress_records
from tests.oracles import batch_oracle as oracle

CODECS = [batches.NONE, batches.GZIP, batches.SNAPPY, batches.LZ4, batches.ZSTD]
EDGE_VALUES = [0, 1, -1, 63, -64, 64, -65, 8191, -8192, 8192, 2**31 - 1, -2**31, 2**31, -2**31 - 1,
               2**63 - 1, -2**63]


def sample_records(n: int, base_ts: int = 1_700_000_000_000) -> list[tuple[bytes | None, bytes | None, int]]:
    """Keys and values of varied lengths, some null, timestamps that go back and forth."""
    return [(None if i % 7 == 3 else b"key-%d" % i * (i % 4 + 1), None if i % 5 == 2 else b"v%d;" % i * (i * 13 % 60),
             base_ts + (i * 37) % 11 - 5) for i in range(n)]


def decoded(batch) -> list[tuple[int, int, bytes | None, bytes | None]]:
    header = records.parse_header(batch)
    section = batches.records_section(batch, header)
    return [(offset_delta, timestamp_delta, key, value)
            for _, _, offset_delta, timestamp_delta, key, value in batches.iter_records(section, header.record_count)]


# --- varints ----------------------------------------------------------------------------------

@pytest.mark.parametrize("value", EDGE_VALUES)
def test_varlong_round_trips_and_matches_the_oracle(value):
    out = bytearray(b"\xff")  # something before: positions are honoured
    batches.write_varint(out, value)
    assert bytes(out[1:]) == oracle.encode_varint(value)
    assert batches.read_varlong(bytes(out) + b"\x00", 1) == (value, len(out))


@pytest.mark.parametrize("value", [v for v in EDGE_VALUES if -2**31 <= v < 2**31])
def test_varint_round_trips_within_int32(value):
    out = bytearray()
    batches.write_varint(out, value)
    assert len(out) <= 5
    assert batches.read_varint(out, 0) == (value, len(out))


@pytest.mark.parametrize("value", [2**31, -2**31 - 1, 2**40])
def test_varint_refuses_what_needs_more_than_int32(value):
    out = bytearray()
    batches.write_varint(out, value)
    with pytest.raises(batches.CorruptBatchError):
        batches.read_varint(out, 0)
    assert batches.read_varlong(out, 0) == (value, len(out))


def test_varlong_refuses_an_eleventh_byte():
    with pytest.raises(batches.CorruptBatchError):
        batches.read_varlong(b"\xff" * 10 + b"\x01", 0)


# --- building and reading ---------------------------------------------------------------------

@pytest.mark.parametrize("codec", [batches.NONE, batches.GZIP])
def test_build_batch_is_byte_for_byte_the_oracles(codec):
    recs = sample_records(40)
    got = batches.build_batch(recs, codec=codec, base_offset=7, producer_id=12, producer_epoch=3, base_sequence=100)
    want = oracle.build_batch([(k, v, [], ts) for k, v, ts in recs], base_offset=7, producer_id=12, producer_epoch=3,
                              base_sequence=100, compression=codec)
    assert bytes(got) == want


@pytest.mark.parametrize("codec", CODECS)
def test_built_batches_validate_and_iterate_back(codec):
    recs = sample_records(25)
    data = batches.build_batch(recs, codec=codec)
    info = records.validate(data)
    assert (info.record_count, info.compression) == (25, codec)
    (found,) = oracle.parse_batches(data)
    assert found["crc_valid"] and found["compression"] == codec
    assert found["base_timestamp"] == recs[0][2] and found["max_timestamp"] == max(ts for _, _, ts in recs)
    assert decoded(data) == [(i, ts - recs[0][2], k, v) for i, (k, v, ts) in enumerate(recs)]


def test_iter_batches_walks_a_log_read_and_ignores_a_truncated_tail():
    first = batches.build_batch(sample_records(3), base_offset=0)
    second = batches.build_batch(sample_records(4), codec=batches.GZIP, base_offset=3)
    data = bytes(first + second) + bytes(second[:40])
    walked = list(batches.iter_batches(data))
    assert [(b.header.base_offset, b.header.record_count, b.header.position) for b in walked] == \
        [(0, 3, 0), (3, 4, len(first))]
    assert bytes(walked[1].data) == bytes(second)
    assert [key for *_, key, _ in walked[1].records()] == [key for key, _, _ in sample_records(4)]


def test_iter_batches_raises_on_a_bad_crc_as_corrupt_message_and_value_error():
    good = batches.build_batch(sample_records(2))
    bad = bytearray(good)
    bad[-1] ^= 0xFF
    data = bytes(good) + bytes(bad)
    walked = batches.iter_batches(data)
    assert next(walked).header.base_offset == 0
    with pytest.raises(batches.CorruptBatchError, match="CRC") as caught:
        next(walked)
    assert isinstance(caught.value, errors.CorruptMessageError) and isinstance(caught.value, ValueError)
    assert len(list(batches.iter_batches(data, verify_crc=False))) == 2


def test_iter_records_refuses_a_record_that_overruns_its_section():
    data = batches.build_batch(sample_records(3))
    section = batches.records_section(data, records.parse_header(data))
    with pytest.raises(batches.CorruptBatchError):
        list(batches.iter_records(section[:-3], 3))
    with pytest.raises(batches.CorruptBatchError):
        list(batches.iter_records(section, 4))


def test_pack_header_writes_back_a_parsed_header():
    data = oracle.build_batch([(b"k", b"v", [], 5)], base_offset=99, producer_id=4, producer_epoch=2,
                              base_sequence=8, timestamp_type=oracle.LOG_APPEND_TIME, partition_leader_epoch=6)
    header = batches.parse_header(data)
    assert batches.pack_header(header) == data[:batches.HEADER_SIZE]
    changed = batches.pack_header(header, base_offset=5, record_count=0)
    assert struct.unpack_from(">q", changed)[0] == 5 and struct.unpack_from(">i", changed, 57)[0] == 0


# --- rebuilding (the cleaner) -----------------------------------------------------------------

@pytest.mark.parametrize("codec", CODECS)
def test_rebuild_keeps_the_chosen_records_the_header_and_the_codec(codec):
    recs = sample_records(30)
    data = bytes(batches.build_batch(recs, codec=codec, base_offset=1000, producer_id=3, producer_epoch=1,
                                     base_sequence=50, partition_leader_epoch=9))
    header = records.parse_header(data)
    section = batches.records_section(data, header)
    spans = [(start, end) for start, end, *_ in batches.iter_records(section, header.record_count)]
    keep = [i for i in range(30) if i % 3 == 1]
    kept_ts = max(recs[i][2] for i in keep)
    out = batches.rebuild_batch(data, section, [spans[i] for i in keep], kept_ts)
    (found,) = oracle.parse_batches(out)
    assert found["crc_valid"]
    for name in ("base_offset", "last_offset_delta", "partition_leader_epoch", "base_timestamp", "producer_id",
                 "producer_epoch", "base_sequence", "compression"):
        assert found[name] == getattr(header, name), name
    assert (found["record_count"], found["max_timestamp"]) == (len(keep), kept_ts)
    assert decoded(out) == [(i, recs[i][2] - recs[0][2], recs[i][0], recs[i][1]) for i in keep]
    records.validate(out, from_client=False)


@pytest.mark.parametrize("codec", CODECS)
def test_rebuild_without_records_gives_kafkas_empty_batch(codec):
    data = bytes(batches.build_batch(sample_records(5), codec=codec, producer_id=3, producer_epoch=0,
                                     base_sequence=0))
    header = records.parse_header(data)
    out = batches.rebuild_batch(data, batches.records_section(data, header), [], -1)
    (found,) = oracle.parse_batches(out)
    assert found["crc_valid"] and found["records"] == []
    assert (found["record_count"], found["compression"], found["size"]) == (0, batches.NONE, batches.HEADER_SIZE)
    assert (found["last_offset_delta"], found["max_timestamp"]) == (4, header.max_timestamp)


def test_lz4_is_framed_as_kafka_writes_it():
    frame = compress_records(batches.LZ4, b"abc" * 50_000)
    flags = frame[4]
    assert flags >> 6 == 1 and flags & 0x20  # version 1, independent blocks (Kafka refuses linked ones)
    assert not flags & 0x08 and not flags & 0x04  # no content size, no content checksum
    assert decompress_records(batches.LZ4, frame) == b"abc" * 50_000


# --- control batches --------------------------------------------------------------------------

@pytest.mark.parametrize("commit", [True, False])
def test_control_batch_is_the_oracles_marker(commit):
    got = batches.control_batch(77, 5, commit, 12, 1_600_000_000_123)
    want = oracle.build_control_batch(commit, producer_id=77, producer_epoch=5, coordinator_epoch=12,
                                      timestamp=1_600_000_000_123)
    assert bytes(got) == want
    assert batches.read_marker(got) == (batches.COMMIT if commit else batches.ABORT, 12)
    header = records.parse_header(got)
    assert header.is_control and header.is_transactional and header.base_sequence == -1


def marker_with(key: bytes | None, value: bytes | None) -> bytes:
    return oracle.build_batch([(key, value, [], 10)], producer_id=1, producer_epoch=0, is_transactional=True,
                              is_control=True)


def test_control_records_are_parsed_as_kafka_does():
    assert batches.read_marker(marker_with(struct.pack(">hh", 1, 1), struct.pack(">hi", 0, 3))) == (batches.COMMIT, 3)
    assert batches.read_marker(marker_with(struct.pack(">hh", -1, 1), struct.pack(">hi", 0, 3))) is None
    assert batches.read_marker(marker_with(struct.pack(">hh", 0, 5), struct.pack(">hi", 0, 3))) is None  # unknown type
    assert batches.read_marker(marker_with(b"\x00", None)) is None
    assert batches.read_marker(marker_with(struct.pack(">hh", 0, 0), b"\x00\x00")) == (batches.ABORT, -1)
    assert batches.control_type(None) is None


def test_a_missing_compiled_core_fails_loudly_naming_the_build_step():
    code = ("import sys; sys.modules['kbroker._core.records'] = None\n"
            "import kbroker.coordinator.group.offsets_log\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert "ImportError" in proc.stderr and "make build" in proc.stderr
