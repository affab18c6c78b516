"""LeaderEpochCache: Kafka's leader-epoch-checkpoint format and LeaderEpochFileCache semantics.
The semantic cases mirror Kafka's LeaderEpochFileCacheTest (rewritten, with a real file)."""
from __future__ import annotations

import logging

import pytest

from kbroker.log.leader_epoch import LeaderEpochCache

UNDEFINED = (-1, -1)


@pytest.fixture
def path(tmp_path):
    return tmp_path / "leader-epoch-checkpoint"


@pytest.fixture
def cache(path):
    return LeaderEpochCache(path)


def fill(cache, *pairs):
    for epoch, start in pairs:
        cache.assign(epoch, start)


# -- file format ----------------------------------------------------------------------------

def test_file_is_written_in_kafkas_format(cache, path):
    fill(cache, (2, 6), (3, 8), (4, 11))
    assert path.read_bytes() == b"0\n3\n2 6\n3 8\n4 11\n"
    cache.clear()
    assert path.read_bytes() == b"0\n0\n"
    assert not path.with_name(path.name + ".tmp").exists()


def test_kafka_written_file_round_trips(path):
    kafka_bytes = b"0\n2\n0 0\n5 1234567890123\n"
    path.write_bytes(kafka_bytes)
    cache = LeaderEpochCache(path)
    assert cache.loaded
    assert cache.entries == [(0, 0), (5, 1234567890123)]
    cache.assign(7, 1234567890200)
    assert LeaderEpochCache(path).entries == [(0, 0), (5, 1234567890123), (7, 1234567890200)]
    cache.truncate_from_end(1234567890200)
    assert path.read_bytes() == kafka_bytes


def test_missing_and_empty_files(path):
    cache = LeaderEpochCache(path)
    assert not cache.loaded and cache.entries == [] and not path.exists()
    path.write_bytes(b"")  # Kafka creates the file empty before its first write
    assert LeaderEpochCache(path).loaded


@pytest.mark.parametrize("content", [
    b"1\n0\n",                # unknown version
    b"0\n",                   # no count
    b"0\n2\n1 5\n",           # fewer entries than counted
    b"0\n1\n1 5\n2 6\n",      # more entries than counted
    b"0\n1\n1 five\n",        # not a number
    b"0\n1\n1 5 7\n",         # three fields
    b"0\n2\n3 5\n2 6\n",      # epochs going down
    b"0\n2\n2 6\n3 5\n",      # offsets going down
    b"0\n1\n-1 5\n",          # undefined epoch
    b"\xff\xfe\n",            # not text
])
def test_malformed_file_starts_empty_with_a_warning(path, content, caplog):
    path.write_bytes(content)
    with caplog.at_level(logging.WARNING):
        cache = LeaderEpochCache(path)
    assert not cache.loaded and cache.entries == []
    assert caplog.records


def test_persists_between_instances(cache, path):
    cache.assign(2, 6)
    again = LeaderEpochCache(path)
    assert again.entries == [(2, 6)] and again.loaded


def test_unchanged_assign_does_not_rewrite_the_file(cache, path):
    assert cache.assign(2, 6)
    path.write_bytes(b"sentinel")  # a rewrite would replace it
    assert not cache.assign(2, 7)
    assert not cache.truncate_from_end(7)
    assert not cache.truncate_from_start(6)
    assert path.read_bytes() == b"sentinel"


# -- assign ---------------------------------------------------------------------------------

def test_assign_and_latest(cache):
    assert cache.latest_epoch == -1 and cache.earliest_start_offset == -1
    assert cache.assign(2, 10)
    assert cache.latest_epoch == 2 and cache.earliest_start_offset == 10
    assert cache.end_offset_for(2, 11) == (2, 11)


def test_negative_epoch_or_offset_is_ignored(cache, path):
    assert not cache.assign(-1, 5)
    assert not cache.assign(3, -1)
    assert cache.entries == [] and not path.exists()


def test_same_epoch_later_offset_keeps_the_first_start(cache):
    fill(cache, (2, 6))
    assert not cache.assign(2, 10)
    assert cache.entries == [(2, 6)]


def test_same_epoch_earlier_offset_moves_its_start_down(cache):
    fill(cache, (5, 11), (6, 12), (7, 13))
    assert cache.assign(7, 12)
    assert cache.entries == [(5, 11), (7, 12)]
    assert cache.end_offset_for(5, 20) == (5, 12)
    assert cache.end_offset_for(6, 20) == (5, 12)


def test_new_epoch_at_the_same_offset_replaces_the_empty_one(cache, caplog):
    fill(cache, (2, 9))
    with caplog.at_level(logging.WARNING):
        assert cache.assign(3, 9)
    assert cache.entries == [(3, 9)]
    assert not caplog.records  # an epoch that wrote nothing: routine, no warning


def test_new_epoch_at_a_lower_offset_removes_later_entries(cache, caplog):
    fill(cache, (2, 6))
    with caplog.at_level(logging.WARNING):
        assert cache.assign(3, 5)
    assert cache.entries == [(3, 5)]
    assert caplog.records


def test_lower_epoch_truncates_the_later_epochs(cache):
    """Kafka's shouldEnforceMonotonicallyIncreasingEpochs: the cache follows the log."""
    fill(cache, (1, 5), (2, 6))
    assert cache.assign(1, 7)
    assert cache.latest_epoch == 1
    assert cache.entries == [(1, 7)]
    assert cache.end_offset_for(1, 8) == (1, 8)
    assert cache.end_offset_for(2, 8) == UNDEFINED


def test_follower_receiving_many_batches(cache):
    leo = 0
    for epoch in range(3):
        for _ in range(3):
            cache.assign(epoch, leo)
            leo += 1
        assert cache.end_offset_for(epoch, leo) == (epoch, leo)
    assert cache.entries == [(0, 0), (1, 3), (2, 6)]
    assert cache.end_offset_for(0, leo) == (0, 3)
    assert cache.end_offset_for(1, leo) == (1, 6)


def test_leaders_changing_without_writing(cache):
    fill(cache, (0, 0), (1, 0))
    assert cache.entries == [(1, 0)]
    assert cache.end_offset_for(1, 0) == (1, 0)
    assert cache.end_offset_for(0, 0) == (0, 0)  # below every epoch: (requested, first start)
    cache.assign(2, 5)
    assert cache.end_offset_for(2, 10) == (2, 10)
    assert cache.end_offset_for(1, 10) == (1, 5)
    assert cache.end_offset_for(0, 10) == (0, 0)


# -- end_offset_for -------------------------------------------------------------------------

def test_end_offset_for_undefined_epoch(cache):
    assert cache.end_offset_for(-1, 73) == UNDEFINED
    fill(cache, (2, 11), (3, 12))
    assert cache.end_offset_for(-1, 73) == UNDEFINED


def test_end_offset_for_on_an_empty_cache(cache):
    assert cache.end_offset_for(0, 10) == UNDEFINED
    assert cache.end_offset_for(5, 10) == UNDEFINED


def test_end_offset_for_an_epoch_below_the_first(cache):
    fill(cache, (5, 11), (6, 12), (7, 13))
    assert cache.end_offset_for(4, 20) == (4, 11)
    assert cache.end_offset_for(0, 20) == (0, 11)


def test_end_offset_for_missing_epochs_answers_the_floor(cache):
    fill(cache, (0, 10), (2, 13), (4, 17))
    assert cache.end_offset_for(1, 20) == (0, 13)
    assert cache.end_offset_for(2, 20) == (2, 17)
    assert cache.end_offset_for(3, 20) == (2, 17)
    assert cache.end_offset_for(4, 20) == (4, 20)


def test_end_offset_for_an_epoch_above_the_latest(cache):
    fill(cache, (2, 100))
    assert cache.end_offset_for(3, 100) == UNDEFINED


# -- truncation -----------------------------------------------------------------------------

@pytest.mark.parametrize("end, expected", [
    (8, [(2, 6)]),                      # on a boundary: inclusive
    (9, [(2, 6), (3, 8)]),
    (11, [(2, 6), (3, 8)]),
    (12, [(2, 6), (3, 8), (4, 11)]),    # past the last start: nothing
    (6, []),
    (0, []),
    (-1, [(2, 6), (3, 8), (4, 11)]),    # undefined: nothing
])
def test_truncate_from_end(cache, path, end, expected):
    fill(cache, (2, 6), (3, 8), (4, 11))
    cache.truncate_from_end(end)
    assert cache.entries == expected
    assert LeaderEpochCache(path).entries == expected


@pytest.mark.parametrize("start, expected", [
    (1, [(2, 6), (3, 8), (4, 11)]),     # before the first: nothing
    (6, [(2, 6), (3, 8), (4, 11)]),     # on the first: nothing
    (8, [(3, 8), (4, 11)]),             # on a boundary
    (9, [(3, 9), (4, 11)]),             # between boundaries: the epoch keeps the rest
    (11, [(4, 11)]),
    (15, [(4, 15)]),                    # beyond the last start
])
def test_truncate_from_start(cache, path, start, expected):
    fill(cache, (2, 6), (3, 8), (4, 11))
    cache.truncate_from_start(start)
    assert cache.entries == expected
    assert LeaderEpochCache(path).entries == expected


def test_truncate_from_start_keeps_epoch_zero(cache):
    fill(cache, (0, 0), (1, 7), (2, 10))
    cache.truncate_from_start(5)
    assert cache.entries == [(0, 5), (1, 7), (2, 10)]


def test_clear_and_rebuild(cache, path):
    fill(cache, (2, 6), (3, 8))
    cache.clear()
    assert cache.entries == [] and cache.latest_epoch == -1
    assert LeaderEpochCache(path).entries == []
    cache.rebuild([(-1, 0), (-1, 3), (0, 5), (0, 9), (2, 12), (2, 14), (5, 20)])
    assert cache.entries == [(0, 5), (2, 12), (5, 20)]
    assert path.read_bytes() == b"0\n3\n0 5\n2 12\n5 20\n"
    cache.rebuild([])
    assert path.read_bytes() == b"0\n0\n"


def test_epoch_for_offset(cache):
    fill(cache, (2, 6), (3, 8))
    assert [cache.epoch_for_offset(o) for o in (0, 5, 6, 7, 8, 100)] == [-1, -1, 2, 2, 3, 3]


# -- durability -----------------------------------------------------------------------------

def test_a_new_files_first_entry_is_written_without_fsync_and_later_ones_with(cache, path, monkeypatch):
    """A new replica's first epoch: no fsync (a crash leaves no file or an empty one, which the log loader
    rebuilds from the batches); every later write is durable, and so is any write to a file read from disk."""
    import os

    synced: list[int] = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real(fd))[1])
    cache.assign(3, 0)
    assert synced == [] and path.read_bytes() == b"0\n1\n3 0\n"
    cache.assign(4, 10)
    assert len(synced) == 2  # the file, then its directory
    synced.clear()
    LeaderEpochCache(path).assign(5, 20)
    assert len(synced) == 2


def test_a_lost_first_entry_comes_back_from_the_batches(tmp_path, appender):
    """The crash the unsynced first write allows: the file left empty; the log loader rebuilds the entry from
    the epoch of the batches written at it."""
    from kbroker.log import LogConfig, PartitionLog, TopicPartition
    from tests.log.helpers import make_batch

    tp = TopicPartition("fresh", 0)
    plog = PartitionLog(tmp_path / str(tp), tp, LogConfig(), appender)
    plog.leader_epochs.assign(7, 0)
    plog.append(make_batch(3), 7)
    plog.close()
    (tmp_path / str(tp) / "leader-epoch-checkpoint").write_bytes(b"")
    again = PartitionLog(tmp_path / str(tp), tp, LogConfig(), appender)
    assert again.leader_epochs.entries == [(7, 0)]
    again.close()
