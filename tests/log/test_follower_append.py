"""The follower append path and the leader epoch cache kept by PartitionLog.

A leader log A is filled through the produce path with changing leader epochs; its raw bytes are
appended to a follower log B as a replica fetcher would, and B must hold the same bytes."""
from __future__ import annotations

import pytest

from kbroker import errors
from kbroker._core import records
from kbroker.log import PartitionLog, UnexpectedAppendOffsetError
from tests.oracles.batch_oracle import build_control_batch

from .helpers import TP, make_batch, offsets_of, open_log, read_all

SMALL = {"segment_bytes": 4096, "index_interval_bytes": 300}
EPOCHS = [0] * 3 + [2] * 2 + [5] * 4 + [7] * 12  # leader epoch of each 3-record batch: 63 offsets


def leader(tmp_path, appender, epochs=EPOCHS, n=3, **config):
    a = open_log(tmp_path / "a", appender, **(SMALL | config))
    for i, epoch in enumerate(epochs):
        a.append(make_batch(n, ts=1000 + i, tag=str(i)), leader_epoch=epoch)
    return a


def follower(tmp_path, appender, **config):
    return open_log(tmp_path / "b", appender, **(SMALL | config))


def reopen(plog, recover):
    plog.close()
    return PartitionLog(plog.directory, TP, plog.config, plog._appender, recover=recover,
                        recovery_point=plog.recovery_point if not recover else 0)


def batch_bounds(data: bytes) -> list[tuple[int, int]]:
    headers, _, _ = records.scan_batches(data, verify_crc=True)
    return [(h.position, h.position + h.size) for h in headers]


def test_leader_append_assigns_epochs(tmp_path, appender):
    a = leader(tmp_path, appender)
    assert a.leader_epochs.entries == [(0, 0), (2, 9), (5, 15), (7, 27)]
    assert (a.directory / "leader-epoch-checkpoint").read_bytes() == b"0\n4\n0 0\n2 9\n5 15\n7 27\n"
    assert a.end_offset_for_epoch(5) == (5, 27)
    assert a.end_offset_for_epoch(7) == (7, a.log_end_offset)
    a.append(make_batch(1))  # no epoch (-1): the cache is left alone
    assert a.leader_epochs.latest_epoch == 7
    a.close()


def test_follower_copy_is_byte_identical(tmp_path, appender):
    a = leader(tmp_path, appender)
    data = read_all(a)
    b = follower(tmp_path, appender)
    result = b.append_as_follower(data)
    assert result.first_offset == 0 and result.last_offset == a.log_end_offset - 1
    assert result.size == len(data) and result.record_count == 3 * len(EPOCHS)
    assert result.log_append_time == -1
    assert b.log_end_offset == a.log_end_offset
    assert read_all(b) == data
    assert b.leader_epochs.entries == a.leader_epochs.entries
    assert len(b.segments) > 1  # rolled at segment.bytes like the leader
    assert all(s.size <= 4096 for s in b.segments)
    for offset in range(b.log_end_offset):  # the indexes find every offset
        assert offset in offsets_of(b.read_bytes(offset, 1))
    assert b.offset_for_timestamp(1000 + 20) == a.offset_for_timestamp(1000 + 20)
    a.close()
    b.close()


def test_follower_copy_in_fetch_sized_chunks_from_a_larger_buffer(tmp_path, appender):
    a = leader(tmp_path, appender)
    b = follower(tmp_path, appender)
    while b.log_end_offset < a.log_end_offset:
        chunk = a.read_bytes(b.log_end_offset, 1000)
        receive = bytearray(b"\x00" * 17 + chunk + b"\xff" * 23)
        before = bytes(receive)
        view = memoryview(receive)[17:17 + len(chunk)]
        b.append_as_follower(view)
        view.release()
        assert receive == before  # not modified
        receive.extend(b"!")  # and no view of it is left behind (a resize would fail)
    assert read_all(b) == read_all(a)
    assert b.leader_epochs.entries == a.leader_epochs.entries
    a.close()
    b.close()


def test_control_and_log_append_time_batches_are_kept(tmp_path, appender):
    a = leader(tmp_path, appender, epochs=[1, 1, 4], message_timestamp_type="LogAppendTime")
    data = read_all(a)
    marker = build_control_batch(True, producer_id=7, producer_epoch=0,
                                 base_offset=a.log_end_offset, partition_leader_epoch=6)
    b = follower(tmp_path, appender)  # CreateTime topic config: the follower does not care
    b.append_as_follower(data + marker)
    assert read_all(b) == data + marker
    assert b.leader_epochs.entries == [(1, 0), (4, 6), (6, 9)]
    headers, _, _ = records.scan_batches(read_all(b))
    assert [h.timestamp_type for h in headers] == [1, 1, 1, 0]
    assert headers[-1].is_control
    a.close()
    b.close()


def test_overlapping_fetch_is_skipped(tmp_path, appender):
    a = leader(tmp_path, appender)
    data = read_all(a)
    bounds = batch_bounds(data)
    b = follower(tmp_path, appender)
    b.append_as_follower(data[:bounds[4][1]])  # batches 0-4: offsets 0-14
    assert b.log_end_offset == 15
    result = b.append_as_follower(data[:bounds[7][1]])  # 0-7 again: only 5-7 are new
    assert (result.first_offset, result.last_offset) == (15, 23)
    assert result.size == bounds[7][1] - bounds[5][0]
    again = b.append_as_follower(data[:bounds[7][1]])  # nothing new at all
    assert again.first_offset == -1 and again.size == 0 and b.log_end_offset == 24
    assert b.append_as_follower(b"").first_offset == -1
    b.append_as_follower(data)
    assert read_all(b) == data
    assert b.leader_epochs.entries == a.leader_epochs.entries
    a.close()
    b.close()


def test_gap_raises_and_leaves_the_log_untouched(tmp_path, appender):
    a = leader(tmp_path, appender)
    data = read_all(a)
    bounds = batch_bounds(data)
    b = follower(tmp_path, appender)
    b.append_as_follower(data[:bounds[1][1]])
    with pytest.raises(UnexpectedAppendOffsetError, match="log end offset 6") as info:
        b.append_as_follower(data[bounds[3][0]:])  # offsets 9.. while the log ends at 6
    assert info.value.code == errors.OffsetOutOfRangeError.code
    assert isinstance(info.value, errors.OffsetOutOfRangeError)
    with pytest.raises(UnexpectedAppendOffsetError, match="previous batch"):  # hole inside the data
        b.append_as_follower(data[bounds[2][0]:bounds[2][1]] + data[bounds[4][0]:bounds[4][1]])
    assert b.log_end_offset == 6 and read_all(b) == data[:bounds[1][1]]
    assert b.leader_epochs.entries == [(0, 0)]
    a.close()
    b.close()


def test_batch_straddling_the_log_end_raises(tmp_path, appender):
    a = leader(tmp_path, appender)
    data = read_all(a)
    b = follower(tmp_path, appender)
    b.truncate_fully_and_start_at(1)
    with pytest.raises(UnexpectedAppendOffsetError):
        b.append_as_follower(data)  # first batch holds offsets 0-2
    assert b.log_end_offset == 1 and b.segments[0].size == 0
    a.close()
    b.close()


def test_corrupt_data_raises_before_anything_is_written(tmp_path, appender):
    a = leader(tmp_path, appender)
    data = bytearray(read_all(a))
    bounds = batch_bounds(data)
    data[bounds[5][0] + 70] ^= 0x01  # a record byte of batch 5: CRC mismatch
    b = follower(tmp_path, appender)
    with pytest.raises(errors.CorruptMessageError):
        b.append_as_follower(data)
    assert b.log_end_offset == 0 and b.segments[0].size == 0
    data = bytearray(read_all(a))
    data[bounds[2][0] + 16] = 1  # magic of batch 2
    with pytest.raises(errors.KafkaError):
        b.append_as_follower(data)
    assert b.log_end_offset == 0 and b.leader_epochs.entries == []
    a.close()
    b.close()


def test_trailing_partial_batch_is_ignored(tmp_path, appender):
    a = leader(tmp_path, appender)
    data = read_all(a)
    bounds = batch_bounds(data)
    b = follower(tmp_path, appender)
    result = b.append_as_follower(data[:bounds[3][0] + 30])  # batch 3 cut in its header
    assert result.last_offset == 8 and b.log_end_offset == 9
    b.append_as_follower(data[bounds[3][0]:])
    assert read_all(b) == data
    a.close()
    b.close()


def test_oversized_batch_from_the_leader_is_accepted(tmp_path, appender):
    a = leader(tmp_path, appender, epochs=[3], n=20, max_message_bytes=100_000)
    data = read_all(a)
    b = follower(tmp_path, appender, max_message_bytes=500)
    b.append_as_follower(data)
    assert read_all(b) == data
    a.close()
    b.close()


# -- the epoch cache across reopen, truncation and retention ---------------------------------

@pytest.mark.parametrize("recover", [False, True])
def test_epochs_survive_reopen(tmp_path, appender, recover):
    a = leader(tmp_path, appender)
    a.flush()
    entries = a.leader_epochs.entries
    a = reopen(a, recover)
    assert a.leader_epochs.entries == entries
    a.close()


@pytest.mark.parametrize("content", [None, b"0\n5\n1 2\n"])
def test_missing_or_malformed_checkpoint_is_rebuilt_from_the_log(tmp_path, appender, content):
    a = leader(tmp_path, appender)
    a.flush()
    entries = a.leader_epochs.entries
    path = a.directory / "leader-epoch-checkpoint"
    a.close()
    if content is None:
        path.unlink()
    else:
        path.write_bytes(content)
    a = PartitionLog(a.directory, TP, a.config, appender, recover=False, recovery_point=a.log_end_offset)
    assert a.leader_epochs.entries == entries
    assert path.read_bytes() == b"0\n4\n0 0\n2 9\n5 15\n7 27\n"
    a.close()


def test_unclean_reopen_redoes_entries_past_the_recovery_point(tmp_path, appender):
    a = leader(tmp_path, appender, epochs=[0] * 3 + [2] * 12 + [5] * 2 + [6] * 12)
    entries = a.leader_epochs.entries
    recovery_point = a.segments[-2].base_offset
    assert 0 < recovery_point < 45 < a.log_end_offset
    path = a.directory / "leader-epoch-checkpoint"
    a.close()
    # What a crash can leave: entries right below the recovery point (they were fsynced before
    # their data was flushed), anything after it (here: a stale epoch 9, and epoch 6 missing).
    kept = [e for e in entries if e[1] < recovery_point] + [(9, a.log_end_offset - 1)]
    path.write_bytes(b"0\n%d\n" % len(kept) + b"".join(b"%d %d\n" % e for e in kept))
    a = PartitionLog(a.directory, TP, a.config, appender, recover=True, recovery_point=recovery_point)
    assert a.leader_epochs.entries == entries == [(0, 0), (2, 9), (5, 45), (6, 51)]
    a.close()


def test_recovery_cutting_the_tail_drops_its_epochs(tmp_path, appender):
    a = leader(tmp_path, appender)
    a.append(make_batch(3, tag="late"), leader_epoch=9)
    assert a.leader_epochs.latest_epoch == 9
    log_path = a.active.log_path
    a.close()
    with open(log_path, "r+b") as f:  # damage the last batch
        f.seek(-5, 2)
        f.write(b"\xde\xad\xbe\xef\x00")
    a = PartitionLog(a.directory, TP, a.config, appender, recover=True)
    assert a.log_end_offset == 3 * len(EPOCHS)
    assert a.leader_epochs.entries == [(0, 0), (2, 9), (5, 15), (7, 27)]
    a.close()


def test_truncate_to_trims_the_cache(tmp_path, appender):
    a = leader(tmp_path, appender)
    a.truncate_to(16)  # inside the batch [15, 17] of epoch 5: kept whole
    assert a.log_end_offset == 18
    assert a.leader_epochs.entries == [(0, 0), (2, 9), (5, 15)]
    a.truncate_to(15)
    assert a.leader_epochs.entries == [(0, 0), (2, 9)]
    assert a.end_offset_for_epoch(5) == (-1, -1)
    assert a.end_offset_for_epoch(2) == (2, 15)
    a = reopen(a, recover=False)
    assert a.leader_epochs.entries == [(0, 0), (2, 9)]
    a.close()


def test_follower_diverging_and_catching_up(tmp_path, appender):
    """The KIP-101 flow at log level: ask the leader where our last epoch ends, truncate, refetch."""
    a = leader(tmp_path, appender, epochs=[0, 0, 2, 2, 4, 4])
    b = follower(tmp_path, appender)
    b.append_as_follower(a.read_bytes(0, 10**6, max_offset=12))  # epochs 0 and 2
    b.append(make_batch(3, tag="stale"), leader_epoch=3)  # b led briefly in epoch 3
    epoch, end = a.end_offset_for_epoch(b.leader_epochs.latest_epoch)
    assert (epoch, end) == (2, 12)
    b.truncate_to(end)
    assert b.leader_epochs.entries == [(0, 0), (2, 6)]
    b.append_as_follower(read_all(a, start=12))
    assert read_all(b) == read_all(a)
    assert b.leader_epochs.entries == a.leader_epochs.entries
    a.close()
    b.close()


def test_truncate_fully_and_start_at(tmp_path, appender):
    a = leader(tmp_path, appender)
    b = follower(tmp_path, appender)
    b.append_as_follower(a.read_bytes(0, 2000))
    b.truncate_fully_and_start_at(30)
    assert (b.log_start_offset, b.log_end_offset, b.high_watermark, b.recovery_point) == (30,) * 4
    assert len(b.segments) == 1 and b.segments[0].base_offset == 30 and b.segments[0].size == 0
    assert b.leader_epochs.entries == []
    assert sorted(p.name for p in b.directory.iterdir() if p.suffix == ".log") == ["00000000000000000030.log"]
    b.append_as_follower(read_all(a, start=30))
    assert read_all(b) == read_all(a, start=30)
    assert b.leader_epochs.entries == [(7, 30)]
    b = reopen(b, recover=True)
    assert b.log_end_offset == a.log_end_offset and b.leader_epochs.entries == [(7, 30)]
    a.close()
    b.close()


def test_log_start_moving_up_truncates_the_cache_from_the_start(tmp_path, appender):
    a = leader(tmp_path, appender)
    a.update_high_watermark(a.log_end_offset)
    a.delete_records_before(10)
    assert a.leader_epochs.entries == [(2, 10), (5, 15), (7, 27)]
    a.delete_records_before(20)
    assert a.leader_epochs.entries == [(5, 20), (7, 27)]
    a.close()


def test_retention_truncates_the_cache_from_the_start(tmp_path, appender):
    a = leader(tmp_path, appender, retention_bytes=4000, retention_ms=-1)
    a.update_high_watermark(a.log_end_offset)
    assert a.delete_old_segments() > 0
    start = a.log_start_offset
    assert 15 < start < 63
    expected = [(5 if start < 27 else 7, start)] + [e for e in [(7, 27)] if e[1] > start]
    assert a.leader_epochs.entries == expected
    a.close()
