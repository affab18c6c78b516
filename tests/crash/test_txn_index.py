"""Regressions found by the SIGKILL loop: the .txnindex after crashes.

A restart replays the log from the latest producer snapshot, which is older than the last aborts
when the broker was killed (snapshots are taken at rolls and clean shutdowns). The replay
appended those aborts to the .txnindex again; after a later snapshot the duplicates were loaded
as aborted transactions, and a read_committed consumer (which pairs each listed abort with one
ABORT marker) skipped committed transactions after them: acknowledged commits went missing
(seed 1, 40 kills). A crash in the middle of an entry left a torn tail that shifted every later
entry. Both fail on the code before the fix.
"""
from __future__ import annotations

from kbroker.clock import wall_ms
from kbroker.log import LogConfig, PartitionLog, TopicPartition, producer_snapshot
from kbroker.log.producer_state import AbortedTxn
from kbroker.replication.partition import READ_COMMITTED, Partition
from tests.log.helpers import make_batch

TP = TopicPartition("txn", 0)


def _open(directory, appender) -> Partition:
    return Partition(TP, PartitionLog(directory / str(TP), TP, LogConfig(), appender), 1)


def _txn_batch(seq: int):
    # timestamps of now: an old one would roll a segment at the marker, and a roll takes a snapshot
    return make_batch(2, ts=wall_ms(), producer_id=7, producer_epoch=0, base_sequence=seq, is_transactional=True)


def test_a_replayed_abort_is_listed_once_after_restarts(tmp_path, appender):
    p = _open(tmp_path, appender)
    p.append_as_leader(_txn_batch(0), 1)                       # 0-1
    p.write_snapshot()                                         # at 2: older than the abort below
    p.write_marker(7, 0, commit=False, coordinator_epoch=1)    # 2: abort, indexed
    p.append_as_leader(_txn_batch(2), 1)                       # 3-4
    p.write_marker(7, 0, commit=True, coordinator_epoch=1)     # 5: commit
    p.log.close()                                              # killed: no newer snapshot
    for _ in range(2):
        p = _open(tmp_path, appender)                          # replays 2..5 from the snapshot
        p.write_snapshot()                                     # a roll or clean stop: at 6
        p.log.close()
    p = _open(tmp_path, appender)
    try:
        assert p.read(0, 1 << 20, READ_COMMITTED, False, True).aborted == [AbortedTxn(7, 0, 2)]
        assert producer_snapshot.read_aborted(p.log.directory) == [AbortedTxn(7, 0, 2)]
        assert len(p.log.segments) == 1  # no roll, hence no snapshot newer than the abort before the kill
        assert sum(f.stat().st_size for f in p.log.directory.glob("*.txnindex")) == 34  # one entry on disk
    finally:
        p.log.close()


def test_a_torn_txnindex_entry_is_cut_before_the_next_append(tmp_path):
    first, second = AbortedTxn(7, 0, 2), AbortedTxn(7, 3, 9)
    producer_snapshot.append_aborted(tmp_path, 0, first, 3)
    path = producer_snapshot.txn_index_path(tmp_path, 0)
    with open(path, "ab") as f:                                # a crash 13 bytes into the next entry
        f.write(b"\x00\x00" + b"\x00" * 7 + b"\x07" + b"\x00" * 3)
    producer_snapshot.append_aborted(tmp_path, 0, second, 10)
    assert producer_snapshot.read_aborted(tmp_path) == [first, second]
    assert path.stat().st_size == 68


def test_a_txnindex_with_duplicates_reads_each_abort_once(tmp_path):
    """Files written before the fix may hold duplicates; reading them lists each abort once."""
    aborted = AbortedTxn(7, 0, 2)
    entry = producer_snapshot._ABORTED.pack(0, 7, 0, 2, 3)
    producer_snapshot.txn_index_path(tmp_path, 0).write_bytes(entry * 3)
    assert producer_snapshot.read_aborted(tmp_path) == [aborted]
