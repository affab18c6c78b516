"""A log whose topic moved to message.format.version 0.10.0 / 0.9.0: v2 batches, then magic 1 and
magic 0 messages (uncompressed and in compressed wrappers) in one log, read, recovered, truncated,
indexed and copied by a follower as Kafka 2.8 handles such a log."""
from __future__ import annotations

import dataclasses
import os

import pytest

from kbroker import errors
from kbroker._core import records
from kbroker.log import PartitionLog, batches, legacy
from kbroker.log.compression import GZIP, LZ4, SNAPPY

from .helpers import TP, make_batch, open_log, read_all

T0 = 1_700_000_000_000


def _switch(plog: PartitionLog, version: str) -> None:
    plog.config = dataclasses.replace(plog.config, message_format_version=version)


def _fill(plog: PartitionLog) -> list[int]:
    """Appends of every kind across two switches; returns the magic of each stored entry expected."""
    plog.append(make_batch(3, ts=T0, tag="a"))                                   # v2: offsets 0-2
    _switch(plog, "0.10.0")
    plog.append(make_batch(2, ts=T0 + 10, tag="b"))                              # magic 1: 3, 4
    plog.append(make_batch(4, ts=T0 + 20, tag="c", compression=GZIP))            # one gzip wrapper: 5-8
    wrapper = legacy.encode_wrapper(SNAPPY, [legacy.LegacyRecord(0, T0 + 30 + i, b"d%d" % i, b"v") for i in range(2)],
                                    wrapper_offset=1)
    plog.append(bytearray(wrapper))                                              # Produce v2 wrapper: 9, 10
    _switch(plog, "0.9.0")
    lz4 = batches.build_batch([(b"e%d" % i, b"v", T0 + 40 + i) for i in range(3)], codec=LZ4)
    plog.append(lz4)                                                             # magic 0 wrapper: 11-13
    plog.append(make_batch(1, ts=T0 + 50, tag="f"))                              # magic 0: 14
    _switch(plog, "2.8")
    plog.append(make_batch(2, ts=T0 + 60, tag="g"))                              # v2 again: 15, 16
    return [2, 1, 1, 1, 1, 0, 0, 2]


def _records(data: bytes) -> list[legacy.BatchRecord]:
    return list(legacy.read_batches(data))


def test_mixed_log_reads_every_record_in_order_with_its_format(tmp_path, appender):
    plog = open_log(tmp_path, appender, index_interval_bytes=64)
    expected_magics = _fill(plog)
    data = read_all(plog)
    headers, whole, status = records.scan_batches(data, verify_crc=True)
    assert (whole, status) == (len(data), 0)
    assert [h.magic for h in headers] == expected_magics
    assert [h.last_offset for h in headers] == [2, 3, 4, 8, 10, 13, 14, 16]
    got = _records(data)
    assert [r.offset for r in got] == list(range(17))
    assert [r.timestamp for r in got[:11]] == [T0, T0 + 1, T0 + 2, T0 + 10, T0 + 11, T0 + 20, T0 + 21, T0 + 22,
                                               T0 + 23, T0 + 30, T0 + 31]
    assert {r.timestamp for r in got[11:15]} == {-1}  # magic 0 has no timestamp
    # the producer's snappy wrapper was kept byte for byte (in-place assignment): only its offset changed
    snappy = next(h for h in headers if h.compression == SNAPPY)
    stored = data[snappy.position:snappy.position + snappy.size]
    assert stored[8:] == legacy.encode_wrapper(
        SNAPPY, [legacy.LegacyRecord(0, T0 + 30 + i, b"d%d" % i, b"v") for i in range(2)], wrapper_offset=1)[8:]
    # magic 0 wrappers carry absolute inner offsets
    assert [r.offset for r in legacy.read_records(data[headers[5].position:headers[5].position + headers[5].size])] \
        == [11, 12, 13]
    for offset in range(17):  # every offset is found through the indexes, from the entry holding it
        chunk = plog.read_bytes(offset, 1 << 20)
        assert records.scan_batches(chunk)[0][0].last_offset >= offset
        assert offset in {r.offset for r in legacy.read_batches(chunk)}
    plog.close()


def test_timestamps_of_legacy_entries_serve_list_offsets_and_survive_a_clean_close(tmp_path, appender):
    plog = open_log(tmp_path, appender, index_interval_bytes=64)
    _fill(plog)
    assert plog.offset_for_timestamp(T0 + 21) == (6, T0 + 21)      # inside the gzip wrapper
    assert plog.offset_for_timestamp(T0 + 31) == (10, T0 + 31)     # inside the snappy wrapper
    assert plog.offset_for_timestamp(T0 + 55) == (15, T0 + 60)     # past magic 0's missing timestamps
    assert plog.max_timestamp_record() == (16, T0 + 61, -1)
    config = plog.config
    plog.close()
    reopened = PartitionLog(tmp_path / str(TP), TP, config, appender, recover=False)
    assert reopened.active.max_timestamp == T0 + 61
    assert reopened.offset_for_timestamp(T0 + 23) == (8, T0 + 23)
    reopened.close()


def test_recovery_cuts_a_torn_or_corrupt_legacy_entry_and_keeps_what_precedes(tmp_path, appender):
    plog = open_log(tmp_path, appender, index_interval_bytes=64)
    _fill(plog)
    data = read_all(plog)
    headers, _, _ = records.scan_batches(data)
    config, path = plog.config, plog.active.log_path
    plog.close()
    lz4 = headers[5]  # the magic 0 wrapper holding 11-13
    with open(path, "r+b") as f:
        f.truncate(lz4.position + lz4.size - 3)  # a crash in the middle of writing it
    recovered = PartitionLog(tmp_path / str(TP), TP, config, appender, recover=True)
    assert recovered.log_end_offset == 11
    assert read_all(recovered) == data[:lz4.position]
    recovered.close()

    snappy = headers[4]
    with open(path, "r+b") as f:
        f.seek(snappy.position + snappy.size - 2)
        f.write(bytes([data[snappy.position + snappy.size - 2] ^ 0x40]))  # a flipped bit: its CRC-32 fails
    recovered = PartitionLog(tmp_path / str(TP), TP, config, appender, recover=True)
    assert recovered.log_end_offset == 9
    assert [r.offset for r in _records(read_all(recovered))] == list(range(9))
    assert recovered.offset_for_timestamp(T0 + 22) == (7, T0 + 22)
    # appends continue at the cut, in the topic's current format
    _switch(recovered, "0.10.0")
    assert recovered.append(make_batch(2, ts=T0 + 70, tag="h")).first_offset == 9
    assert [h.magic for h in records.scan_batches(read_all(recovered))[0]][-2:] == [1, 1]
    recovered.close()


def test_truncation_inside_the_legacy_part(tmp_path, appender):
    plog = open_log(tmp_path, appender, index_interval_bytes=64)
    _fill(plog)
    plog.truncate_to(4)    # uncompressed magic 1 messages: cut exactly there
    assert plog.log_end_offset == 4
    plog.truncate_to(3)
    assert plog.log_end_offset == 3
    assert [r.offset for r in _records(read_all(plog))] == [0, 1, 2]
    assert plog.active.max_timestamp == T0 + 2
    plog.close()

    other = open_log(tmp_path / "b", appender, index_interval_bytes=64)
    _fill(other)
    other.truncate_to(7)   # inside the gzip wrapper (5-8): the wrapper goes whole, as Kafka's truncateTo
    assert other.log_end_offset == 5
    other.close()


def test_follower_copies_a_mixed_log_byte_for_byte_in_any_chunking(tmp_path, appender):
    leader = open_log(tmp_path / "leader", appender, index_interval_bytes=64)
    _fill(leader)
    data = read_all(leader)
    follower = open_log(tmp_path / "follower", appender, index_interval_bytes=64)
    position, size = 0, 57
    while position < len(data):  # fetch responses cut anywhere: the partial tail comes again next time
        chunk = memoryview(data)[position:position + size]
        _, whole, status = records.scan_batches(chunk, verify_crc=False)
        assert status != 2
        if not whole:
            size *= 2  # an entry bigger than the fetch size: the fetcher asks for more
            continue
        follower.append_as_follower(chunk)
        position, size = position + whole, 57
    assert read_all(follower) == data
    assert follower.log_end_offset == leader.log_end_offset == 17
    bad = bytearray(data)
    bad[records.scan_batches(data)[0][3].position + 30] ^= 1  # inside the gzip wrapper's payload
    third = open_log(tmp_path / "third", appender)
    with pytest.raises(errors.CorruptMessageError):
        third.append_as_follower(bad)
    assert third.log_end_offset == 0
    for plog in (leader, follower, third):
        plog.close()


def test_log_append_time_topic_stamps_magic_1_messages(tmp_path, appender):
    now = T0 + 5_000
    plog = open_log(tmp_path, appender, clock=lambda: now, message_timestamp_type="LogAppendTime",
                    message_format_version="0.10.0")
    first = plog.append(make_batch(2, ts=T0))
    second = plog.append(make_batch(3, ts=T0, compression=GZIP))
    assert (first.log_append_time, second.log_append_time) == (now, now)
    data = read_all(plog)
    assert {(r.timestamp, r.log_append_time) for r in _records(data)} == {(now, True)}
    headers = records.scan_batches(data)[0]
    assert [h.timestamp_type for h in headers] == [1, 1, 1]
    plog.close()


def test_refusals_below_0_11(tmp_path, appender):
    plog = open_log(tmp_path, appender, message_format_version="0.10.1")
    with pytest.raises(errors.UnsupportedForMessageFormatError, match="Idempotent records"):
        plog.append(make_batch(1, producer_id=7, producer_epoch=0, base_sequence=0))
    with pytest.raises(errors.UnsupportedForMessageFormatError, match="Transactional records"):
        plog.append(make_batch(1, producer_id=7, producer_epoch=0, base_sequence=0, is_transactional=True))
    with pytest.raises(errors.UnknownServerError, match="Magic v1 does not support record headers"):
        plog.append(bytearray(_with_header()))
    assert plog.log_end_offset == 0
    assert os.path.getsize(plog.active.log_path) == 0
    plog.close()


def _with_header() -> bytes:
    from tests.oracles.batch_oracle import build_batch

    return build_batch(records=[(b"k", b"v", [("h", b"x")], T0)])


def test_zstd_cannot_be_stored_in_magic_1(tmp_path, appender):
    plog = open_log(tmp_path, appender, message_format_version="0.10.0")
    with pytest.raises(errors.UnknownServerError, match="ZStandard compression is not supported for magic 1"):
        plog.append(batches.build_batch([(b"k", b"v", T0)], codec=4))
    plog.config = dataclasses.replace(plog.config, compression_type="zstd")
    with pytest.raises(errors.UnknownServerError, match="ZStandard"):
        plog.append(batches.build_batch([(b"k", b"v", T0)]))
    plog.config = dataclasses.replace(plog.config, compression_type="lz4")  # compression.type applies on conversion
    plog.append(batches.build_batch([(b"k", b"v", T0)], codec=GZIP))
    assert [(h.magic, h.compression) for h in records.scan_batches(read_all(plog))[0]] == [(1, LZ4)]
    plog.close()


def test_a_wrapper_with_gaps_in_its_inner_offsets_is_refused(tmp_path, appender):
    """Kept in place, such a payload would give consumers wrong offsets: Kafka refuses it."""
    plog = open_log(tmp_path, appender, message_format_version="0.10.0")
    inner = b"".join(legacy.encode_message(o, b"k", b"v", magic=1, timestamp=T0) for o in (0, 5))
    wrapper = legacy.encode_message(1, None, legacy.compress(GZIP, inner), magic=1, timestamp=T0, attributes=GZIP)
    with pytest.raises(errors.InvalidRecordError, match="does not have incremental offsets, expected offset is 1"):
        plog.append(bytearray(wrapper))
    assert plog.log_end_offset == 0
    plog.close()


def test_a_compressed_wrapper_with_a_null_value_is_a_corrupt_message(tmp_path, appender):
    """A wrapper whose value (the compressed messages) is null: CORRUPT_MESSAGE, nothing appended."""
    plog = open_log(tmp_path, appender, message_format_version="0.10.0")
    wrapper = legacy.encode_message(0, None, None, magic=1, timestamp=T0, attributes=GZIP)
    with pytest.raises(errors.CorruptMessageError, match="compressed message at offset 0 has a null value"):
        plog.append(bytearray(wrapper))
    assert plog.log_end_offset == 0
    plog.close()


def test_compaction_of_a_mixed_log_keeps_the_latest_value_of_each_key_in_its_format(tmp_path, appender):
    from kbroker.log import clean_log

    plog = open_log(tmp_path, appender, cleanup_policy="compact", segment_bytes=2048, min_cleanable_dirty_ratio=0.0,
                    index_interval_bytes=64)
    model: dict[int, tuple[bytes, bytes | None]] = {}

    def put(rows: list[tuple[bytes, bytes | None]], codec: int = 0) -> None:
        result = plog.append(batches.build_batch([(k, v, T0 + i) for i, (k, v) in enumerate(rows)], codec=codec))
        for offset, row in zip(range(result.first_offset, result.last_offset + 1), rows):
            model[offset] = row

    for r in range(6):
        put([(b"key-%d" % k, b"v2 %d.%d" % (r, k)) for k in range(5)])
    _switch(plog, "0.10.0")
    for r in range(12):
        put([(b"key-%d" % k, b"m1 %d.%d" % (r, k)) for k in range(5)], codec=GZIP if r % 2 else 0)
    put([(b"key-4", None)])  # a tombstone, kept while within delete.retention.ms
    plog.roll()
    plog.update_high_watermark(plog.log_end_offset)
    checkpoint, stats = clean_log(plog, force=True)
    assert checkpoint == plog.active.base_offset and stats.records_removed > 0
    survivors = list(legacy.read_batches(read_all(plog)))
    assert all(model[r.offset] == (r.key, r.value) for r in survivors), "every survivor keeps its offset and value"
    latest = {key: offset for offset, (key, _) in sorted(model.items())}
    assert {r.offset for r in survivors} == set(latest.values()), "exactly the latest of each key"
    headers = records.scan_batches(read_all(plog))[0]
    assert {h.magic for h in headers} == {1}  # the latest values were all written in magic 1
    plog.close()
