"""PartitionLog: appends, reads, rolls, lookups by offset and timestamp, retention, truncation."""
from __future__ import annotations

import os
import struct
import time

import pytest

from kbroker import errors
from kbroker._core import records
from kbroker.log import LogConfig, PartitionLog

from .helpers import TP, make_batch, offsets_of, open_log, read_all, values_of


def test_append_assigns_consecutive_offsets_and_reads_back(tmp_path, appender):
    plog = open_log(tmp_path, appender)
    first = plog.append(make_batch(3, tag="a"))
    second = plog.append(make_batch(2, tag="b"))
    assert (first.first_offset, first.last_offset) == (0, 2)
    assert (second.first_offset, second.last_offset) == (3, 4)
    assert plog.log_end_offset == 5
    data = read_all(plog)
    assert offsets_of(data) == [0, 1, 2, 3, 4]
    assert values_of(data)[3].startswith(b"b:0:")
    plog.close()


def test_round_trip_across_segment_rolls(tmp_path, appender):
    plog = open_log(tmp_path, appender, segment_bytes=4096, index_interval_bytes=512)
    sent = []
    for i in range(200):
        batch = make_batch(1 + i % 4, ts=10_000 + i * 10, tag=str(i))
        sent += values_of(bytes(batch))
        plog.append(batch)
    assert len(plog.segments) > 10
    # every segment file is named by its base offset, and bases rise
    bases = [s.base_offset for s in plog.segments]
    assert bases == sorted(bases)
    for seg in plog.segments:
        assert seg.log_path.name == f"{seg.base_offset:020d}.log"
        assert seg.size <= 4096 or seg.base_offset == seg.next_offset() - 1
    assert values_of(read_all(plog)) == sent
    # reading from every single offset starts at the batch holding it
    for offset in range(plog.log_end_offset):
        chunk = plog.read_bytes(offset, 100)
        header = records.parse_header(chunk)
        assert header.base_offset <= offset <= header.last_offset
    plog.close()


def test_read_bounds_and_errors(tmp_path, appender):
    plog = open_log(tmp_path, appender)
    plog.append(make_batch(5))
    assert plog.read(5, 1000) is None  # at the log end: nothing yet
    with pytest.raises(errors.OffsetOutOfRangeError):
        plog.read(6, 1000)
    with pytest.raises(errors.OffsetOutOfRangeError):
        plog.read(-1, 1000)
    # max_offset (the high watermark) hides what is above it
    plog.append(make_batch(5))
    assert plog.read(5, 1 << 20, max_offset=5) is None
    below_hw = plog.read_bytes(0, 1 << 20, max_offset=5)
    assert offsets_of(below_hw) == [0, 1, 2, 3, 4]
    # max_bytes smaller than a batch: one whole batch with min_one_batch, a prefix without
    whole = plog.read(0, 10)
    assert whole is not None and whole.length == records.parse_header(whole.read()).size
    partial = plog.read(0, 10, min_one_batch=False)
    assert partial is not None and partial.length == 10
    plog.close()


def test_bad_batches_are_rejected_and_leave_the_log_untouched(tmp_path, appender):
    plog = open_log(tmp_path, appender, max_message_bytes=2000)
    plog.append(make_batch(2))
    before = read_all(plog)
    good = make_batch(3)
    flipped = bytearray(good)
    flipped[-1] ^= 0x01
    bad_magic = bytearray(good)
    bad_magic[16] = 1
    short = bytearray(good[:-5])
    bad_length = bytearray(good)
    struct.pack_into(">i", bad_length, 8, 10)
    cases = [
        (flipped, errors.CorruptMessageError),
        (short, errors.CorruptMessageError),
        (bad_length, errors.CorruptMessageError),
        (bad_magic, errors.InvalidRecordError),
        (make_batch(30, value_size=100), errors.MessageTooLargeError),
    ]
    for batch, error in cases:
        with pytest.raises(error):
            plog.append(batch)
        assert plog.log_end_offset == 2
        assert read_all(plog) == before
        assert plog.active.size == len(before)
    plog.close()


def test_append_larger_than_a_segment_is_record_list_too_large(tmp_path, appender):
    plog = open_log(tmp_path, appender, segment_bytes=1000)
    with pytest.raises(errors.RecordListTooLargeError):
        plog.append(make_batch(20, value_size=100))
    assert plog.log_end_offset == 0


def test_log_append_time_rewrites_timestamps(tmp_path, appender):
    plog = open_log(tmp_path, appender, clock=lambda: 123_456, message_timestamp_type="LogAppendTime")
    result = plog.append(make_batch(3, ts=5))
    assert result.log_append_time == 123_456
    header = records.parse_header(plog.read_bytes(0, 1 << 20))
    assert header.timestamp_type == 1 and header.max_timestamp == 123_456
    records.validate(plog.read_bytes(0, 1 << 20), from_client=False)  # CRC was recomputed
    plog.close()


def test_offset_for_timestamp_at_every_boundary(tmp_path, appender):
    plog = open_log(tmp_path, appender, segment_bytes=512, index_interval_bytes=150)
    # record i has timestamp 1000 + 10 * i, batches of 3
    for b in range(40):
        plog.append(_ts_batch(b * 3, 3))
    assert len(plog.segments) > 3
    n = plog.log_end_offset
    assert plog.offset_for_timestamp(-2) == (0, -1)
    assert plog.offset_for_timestamp(-1) == (n, -1)
    assert plog.offset_for_timestamp(0)[0] == 0
    for i in range(n):
        ts = 1000 + 10 * i
        assert plog.offset_for_timestamp(ts) == (i, ts), f"exact timestamp of record {i}"
        assert plog.offset_for_timestamp(ts - 9) == (i, ts), f"just after record {i - 1}"
    assert plog.offset_for_timestamp(1000 + 10 * n) is None
    plog.close()


def _ts_batch(first: int, count: int) -> bytearray:
    from tests.oracles.batch_oracle import build_batch

    return bytearray(build_batch(records=[(None, b"v%d" % (first + i), [], 1000 + 10 * (first + i))
                                          for i in range(count)]))


def test_offset_for_timestamp_in_gzip_batches(tmp_path, appender):
    from tests.oracles.batch_oracle import build_batch

    plog = open_log(tmp_path, appender)
    for b in range(3):
        plog.append(bytearray(build_batch(records=[(None, b"x" * 50, [], 100 * b + i) for i in range(5)],
                                          compression=1)))
    # batch b holds offsets 5b..5b+4 with timestamps 100b..100b+4
    assert plog.offset_for_timestamp(3) == (3, 3)
    assert plog.offset_for_timestamp(103) == (8, 103)
    assert plog.offset_for_timestamp(105) == (10, 200)  # first record of the third batch
    assert plog.offset_for_timestamp(204)[0] == 14
    assert plog.offset_for_timestamp(205) is None
    plog.close()


def test_offset_index_file_matches_kafka_bytes(tmp_path, appender):
    """With index.interval.bytes=0 every append after the first gets an entry (largest offset of
    the append, its position): hand-computed big-endian bytes, trimmed on roll."""
    plog = open_log(tmp_path, appender, index_interval_bytes=0)
    sizes = []
    for i in range(3):
        batch = make_batch(2, ts=500 + i * 10)
        sizes.append(len(batch))
        plog.append(batch)
    plog.roll()
    seg = plog.segments[0]
    expected_index = struct.pack(">ii", 3, sizes[0]) + struct.pack(">ii", 5, sizes[0] + sizes[1])
    assert seg.index_path.read_bytes() == expected_index
    # time index: (max timestamp so far, its offset) at each entry, plus the final one on roll
    expected_time = struct.pack(">qi", 511, 3) + struct.pack(">qi", 521, 5)
    assert seg.time_index_path.read_bytes() == expected_time
    plog.close()


def test_retention_by_time_deletes_whole_old_segments(tmp_path, appender):
    now = [60_000]
    plog = open_log(tmp_path, appender, clock=lambda: now[0], segment_bytes=1024, retention_ms=50_000,
                    file_delete_delay_ms=0)
    for i in range(30):
        plog.append(make_batch(2, ts=1000 * i))  # old timestamps, 1 s apart
    plog.update_high_watermark(plog.log_end_offset)
    segments = len(plog.segments)
    # now - 50 s = 10 s: segments whose newest record is older than t=10 s go
    deleted = plog.delete_old_segments(now[0])
    assert 0 < deleted < segments
    assert plog.segments[0].largest_timestamp() >= 10_000  # the first one kept is not expired
    assert plog.log_start_offset == plog.segments[0].base_offset
    assert not any(p.name.endswith(".deleted") for p in plog.directory.iterdir())
    data = read_all(plog)
    assert offsets_of(data)[0] == plog.log_start_offset and offsets_of(data)[-1] == plog.log_end_offset - 1
    # all expired: the active segment is rolled, then deleted; the log stays appendable
    now[0] = 10_000_000
    plog.delete_old_segments(now[0])
    assert plog.log_start_offset == plog.log_end_offset == 60
    assert plog.append(make_batch(1, ts=now[0])).first_offset == 60
    plog.close()


def test_retention_only_below_the_high_watermark(tmp_path, appender):
    plog = open_log(tmp_path, appender, segment_bytes=1024, retention_ms=1, file_delete_delay_ms=0,
                    clock=lambda: 10**9)
    for _ in range(10):
        plog.append(make_batch(2, ts=1))
    assert plog.delete_old_segments() == 0  # high watermark still 0
    plog.update_high_watermark(plog.log_end_offset)
    assert plog.delete_old_segments() > 0
    plog.close()


def test_retention_by_bytes(tmp_path, appender):
    plog = open_log(tmp_path, appender, segment_bytes=1024, retention_bytes=3000, file_delete_delay_ms=0,
                    retention_ms=-1)
    for i in range(40):
        plog.append(make_batch(2, ts=i))
    plog.update_high_watermark(plog.log_end_offset)
    plog.delete_old_segments()
    assert plog.size_bytes <= 3000 + 1024
    assert plog.size_bytes - plog.segments[0].size < 3000  # one fewer segment would be too little
    plog.close()


def test_deleted_segments_stay_readable_until_the_delay(tmp_path, appender):
    now = [1_000_000]
    plog = open_log(tmp_path, appender, clock=lambda: now[0], segment_bytes=1024, file_delete_delay_ms=60_000)
    for i in range(10):
        plog.append(make_batch(2, ts=i))
    plog.update_high_watermark(plog.log_end_offset)
    fetch = plog.read(0, 1 << 20)  # a fetch in flight holds this slice
    plog.delete_records_before(plog.segments[2].base_offset)
    assert any(p.name.endswith(".log.deleted") for p in plog.directory.iterdir())
    assert fetch.read()  # the fd still serves
    now[0] += 60_000
    plog.remove_deleted_files(now[0])
    assert not any(p.name.endswith(".deleted") for p in plog.directory.iterdir())
    plog.close()


def test_a_segment_marked_deleted_closes_its_indexes_under_their_new_names(tmp_path, appender):
    """The indexes keep no descriptor: closing a segment renamed .deleted trims the renamed files, and leaves
    nothing behind under the old names (a cleaner swap puts a new segment there)."""
    plog = open_log(tmp_path, appender, segment_bytes=1024, file_delete_delay_ms=60_000)
    for i in range(10):
        plog.append(make_batch(2, ts=i))
    old = plog.segments[0]
    old.mark_deleted()
    old.close()
    names = {p.name for p in plog.directory.iterdir()}
    base = f"{old.base_offset:020d}"
    assert {f"{base}.index.deleted", f"{base}.timeindex.deleted"} <= names
    assert f"{base}.index" not in names and f"{base}.timeindex" not in names
    assert (plog.directory / f"{base}.index.deleted").stat().st_size < 1024  # trimmed, not left preallocated
    plog.close()


def test_delete_records_moves_log_start_offset(tmp_path, appender):
    plog = open_log(tmp_path, appender)
    plog.append(make_batch(10))
    with pytest.raises(errors.OffsetOutOfRangeError):
        plog.delete_records_before(5)  # above the high watermark
    plog.update_high_watermark(10)
    assert plog.delete_records_before(5) == 5
    with pytest.raises(errors.OffsetOutOfRangeError):
        plog.read(4, 100)
    assert plog.offset_for_timestamp(-2) == (5, -1)
    plog.close()


def test_truncate_to_drops_batches_and_segments(tmp_path, appender):
    plog = open_log(tmp_path, appender, segment_bytes=1024, index_interval_bytes=100)
    for i in range(30):
        plog.append(make_batch(2, ts=i, tag=str(i)))
    plog.update_high_watermark(plog.log_end_offset)
    plog.truncate_to(21)  # inside the batch [20, 21]: that batch stays whole
    assert plog.log_end_offset == 22
    assert plog.high_watermark == 22
    assert offsets_of(read_all(plog))[-1] == 21
    plog.truncate_to(8)
    assert plog.log_end_offset == 8
    result = plog.append(make_batch(1, tag="new"))
    assert result.first_offset == 8
    assert values_of(read_all(plog))[-1].startswith(b"new:0:")
    plog.close()


def test_flush_messages_policy_moves_recovery_point(tmp_path, appender):
    plog = open_log(tmp_path, appender, flush_messages=5)
    plog.append(make_batch(3))
    assert plog.recovery_point == 0
    plog.append(make_batch(3))
    assert plog.recovery_point == 6
    plog.close()


def test_flush_ms_policy(tmp_path, appender):
    now = [0]
    plog = open_log(tmp_path, appender, clock=lambda: now[0], flush_ms=1000)
    plog.append(make_batch(1))
    assert not plog.maybe_flush(500)
    assert plog.maybe_flush(1000)
    assert plog.recovery_point == 1
    plog.close()


def test_reopen_without_recovery_keeps_everything(tmp_path, appender):
    plog = open_log(tmp_path, appender, segment_bytes=2048)
    for i in range(20):
        plog.append(make_batch(3, tag=str(i)))
    data = read_all(plog)
    plog.close()
    again = PartitionLog(tmp_path / str(TP), TP, plog.config, appender, recover=False)
    assert again.log_end_offset == 60
    assert read_all(again) == data
    assert again.append(make_batch(1)).first_offset == 60
    again.close()
    assert not any(os.path.getsize(p) == 10 * 1024 * 1024 for p in (tmp_path / str(TP)).glob("*index"))


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_compressed_batch_that_does_not_decompress_is_refused(tmp_path, appender, codec):
    """A valid CRC over an undecodable payload would poison every consumer: CORRUPT_MESSAGE, as Kafka."""
    import cramjam
    import lz4.frame
    import zstandard

    from tests.oracles.batch_oracle import build_batch, recompute_crc

    records_ = [(b"k", b"v" * 200, [], 5)] * 3
    plain = build_batch(records=records_)[61:]
    compress = {1: None, 2: lambda b: bytes(cramjam.snappy.compress_raw(b)), 3: lz4.frame.compress,
                4: zstandard.ZstdCompressor().compress}[codec]
    section = None if compress is None else compress(plain)
    plog = open_log(tmp_path, appender)
    good = bytearray(build_batch(records=records_, compression=codec, records_section=section))
    plog.append(bytearray(good))  # the codec itself works
    before = read_all(plog)
    poisoned = bytearray(good)
    poisoned[61:] = b"\xde\xad\xbe\xef" * ((len(poisoned) - 61) // 4) + b"\x00" * ((len(poisoned) - 61) % 4)
    poisoned = bytearray(recompute_crc(poisoned))
    with pytest.raises(errors.CorruptMessageError, match="decompress|truncated|undecodable"):
        plog.append(poisoned)
    assert read_all(plog) == before and plog.log_end_offset == 3
    plog.close()


# Timestamps a day ahead of the wall clock: a segment whose max timestamp is lost falls back to its
# file's mtime (Kafka's rule), which is then below them, so a lookup would skip the segment.
FUTURE = int(time.time() * 1000) + 86_400_000


def _one_record(ts: int) -> bytearray:
    from tests.oracles.batch_oracle import build_batch

    return bytearray(build_batch(records=[(None, b"v", [], ts)]))


def test_a_clean_close_keeps_the_active_segments_max_timestamp(tmp_path, appender):
    """Kafka's LogSegment.close appends the final time-index entry: a log reopened without recovery
    takes each segment's max timestamp from there. Record 0 (the newest timestamp) is below the index
    interval, so only that entry carries it; after the reopen, older timestamps and a roll follow."""
    plog = open_log(tmp_path, appender)
    plog.append(_one_record(FUTURE + 1000))
    plog.close()
    plog = PartitionLog(tmp_path / str(TP), TP, LogConfig(), appender, recover=False, recovery_point=1)
    assert plog.active.max_timestamp == FUTURE + 1000
    plog.append(_one_record(FUTURE + 500))
    plog.roll()
    plog.append(_one_record(FUTURE + 2000))
    assert plog.offset_for_timestamp(FUTURE + 1000) == (0, FUTURE + 1000)
    assert plog.offset_for_timestamp(FUTURE + 501) == (0, FUTURE + 1000)
    assert plog.offset_for_timestamp(FUTURE + 1001) == (2, FUTURE + 2000)
    plog.close()


def test_truncation_keeps_the_max_timestamp_of_the_batches_it_keeps(tmp_path, appender):
    """Kafka's truncateTo reloads the max timestamp from the last time-index entry and then scans the
    batches after it: those below the index interval are still in the segment."""
    plog = open_log(tmp_path, appender)
    for ts in (FUTURE + 1000, FUTURE + 10, FUTURE + 3000):
        plog.append(_one_record(ts))
    plog.truncate_to(2)
    assert plog.active.max_timestamp == FUTURE + 1000
    assert plog.offset_for_timestamp(FUTURE + 1000) == (0, FUTURE + 1000)
    plog.append(_one_record(FUTURE + 20))
    plog.roll()
    assert plog.offset_for_timestamp(FUTURE + 1000) == (0, FUTURE + 1000)
    plog.close()
