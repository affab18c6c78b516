"""Transactions at the partition, over real logs: a transactional batch opens its producer's
transaction, the last stable offset stops read_committed reads before it, COMMIT/ABORT markers
close it, aborted transactions are listed for read_committed fetches, and all of it is rebuilt
from the log when the partition is opened again or truncated."""
from __future__ import annotations

import pytest

from kbroker import errors
from kbroker._core import records
from kbroker.coordinator.transaction import markers
from kbroker.log import LogConfig, PartitionLog, TopicPartition
from kbroker.log.producer_state import AbortedTxn
from kbroker.replication.partition import READ_COMMITTED, READ_UNCOMMITTED, Partition
from tests.log.helpers import make_batch, read_all

TP = TopicPartition("txn", 0)


def _open(tmp_path, appender) -> Partition:
    plog = PartitionLog(tmp_path / str(TP), TP, LogConfig(), appender)
    return Partition(TP, plog, 1)  # a single replica: the high watermark follows every append


def _txn_batch(pid: int, seq: int, n: int = 2, epoch: int = 0):
    return make_batch(n, producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=True)


def _kinds(data: bytes) -> list[tuple[int, bool]]:
    headers, _, _ = records.scan_batches(data, verify_crc=True)
    return [(h.base_offset, h.is_control) for h in headers]


def test_open_transaction_bounds_read_committed(tmp_path, appender):
    p = _open(tmp_path, appender)
    p.append_as_leader(make_batch(3), 1)                  # 0-2, not transactional
    p.append_as_leader(_txn_batch(7, 0), 1)               # 3-4, producer 7 opens at 3
    p.append_as_leader(make_batch(1), 1)                  # 5
    assert (p.high_watermark, p.last_stable_offset) == (6, 3)
    committed = p.read(0, 1 << 20, READ_COMMITTED, False, True)
    assert committed.last_stable_offset == 3 and committed.aborted == []
    assert [o for o, _ in _kinds(p.log.read_bytes(0, committed.records.length))] == [0]
    uncommitted = p.read(0, 1 << 20, READ_UNCOMMITTED, False, True)
    assert uncommitted.records.length > committed.records.length and uncommitted.aborted is None
    assert p.offset_for_timestamp(-1, READ_COMMITTED) == (3, -1)
    assert p.offset_for_timestamp(-1, READ_UNCOMMITTED) == (6, -1)
    marker = p.write_marker(7, 0, commit=True, coordinator_epoch=1)
    assert marker == 6 and p.last_stable_offset == 7 == p.high_watermark
    assert _kinds(read_all(p.log))[-1] == (6, True)
    assert p.read(0, 1 << 20, READ_COMMITTED, False, True).aborted == []


def test_aborted_transactions_are_listed_for_read_committed(tmp_path, appender):
    p = _open(tmp_path, appender)
    p.append_as_leader(_txn_batch(7, 0), 1)               # 0-1
    p.append_as_leader(_txn_batch(8, 0), 1)               # 2-3
    p.write_marker(7, 0, commit=False, coordinator_epoch=1)   # 4: abort 7
    assert p.last_stable_offset == 2                       # 8 still open
    p.write_marker(8, 0, commit=True, coordinator_epoch=1)    # 5: commit 8
    result = p.read(0, 1 << 20, READ_COMMITTED, False, True)
    assert result.last_stable_offset == 6
    assert result.aborted == [AbortedTxn(7, 0, 4)]
    assert p.read(5, 1 << 20, READ_COMMITTED, False, True).aborted == []  # past the abort marker


def test_transactions_are_rebuilt_when_the_log_is_opened_again(tmp_path, appender):
    p = _open(tmp_path, appender)
    p.append_as_leader(_txn_batch(7, 0), 1)
    p.write_marker(7, 0, commit=False, coordinator_epoch=1)
    p.append_as_leader(_txn_batch(9, 0), 1)               # 3-4, left open
    p.log.close()
    again = _open(tmp_path, appender)
    assert again.producer_state.aborted == [AbortedTxn(7, 0, 2)]
    assert again.producer_state.ongoing == {9: 3}
    assert again.last_stable_offset == 3


def test_truncating_a_marker_reopens_its_transaction(tmp_path, appender):
    p = _open(tmp_path, appender)
    p.append_as_leader(_txn_batch(7, 0), 1)               # 0-1
    p.write_marker(7, 0, commit=False, coordinator_epoch=1)   # 2
    p.truncate_to(2)
    assert p.producer_state.aborted == [] and p.producer_state.ongoing == {7: 0}


def test_a_marker_of_an_older_producer_epoch_is_refused(tmp_path, appender):
    p = _open(tmp_path, appender)
    p.append_as_leader(_txn_batch(7, 0, epoch=3), 1)
    with pytest.raises(errors.InvalidProducerEpochError):
        p.write_marker(7, 2, commit=True, coordinator_epoch=1)
    assert p.producer_state.ongoing == {7: 0}


def test_marker_type_round_trip():
    assert markers.marker_type(markers.control_batch(1, 0, True, 4, 0)) == markers.COMMIT
    assert markers.marker_type(markers.control_batch(1, 0, False, 4, 0)) == markers.ABORT
    batch = markers.control_batch(1, 0, True, 4, 0)
    header = records.parse_header(batch)
    assert header.is_control and header.is_transactional and header.producer_id == 1


def test_producer_snapshot_and_txnindex_files_in_kafkas_layout(tmp_path, appender):
    import struct

    from kbroker.log import producer_snapshot
    p = _open(tmp_path, appender)
    p.append_as_leader(_txn_batch(7, 0), 1)                   # 0-1
    p.write_marker(7, 0, commit=False, coordinator_epoch=1)   # 2: abort
    p.append_as_leader(make_batch(2, producer_id=9, producer_epoch=1, base_sequence=0), 1)  # 3-4
    p.append_as_leader(_txn_batch(11, 0), 1)                  # 5-6 open
    directory = p.log.directory
    # the marker (stamped now) rolled a segment at 2 past the 1970 test records: its index is 2's
    assert sorted(f.name for f in directory.glob("*.txnindex")) == [f"{2:020d}.txnindex"]
    index = (directory / f"{2:020d}.txnindex").read_bytes()
    assert index == struct.pack(">hqqqq", 0, 7, 0, 2, 3)  # version, pid, first, last, last stable offset
    p.write_snapshot()
    snapshot = directory / f"{7:020d}.snapshot"
    data = snapshot.read_bytes()
    version, crc, count = struct.unpack_from(">hIi", data, 0)
    assert (version, count) == (1, 3)
    entries = [struct.unpack_from(">qhiqiqiq", data, 10 + i * 46) for i in range(count)]
    assert [(e[0], e[1], e[2], e[3], e[4], e[7]) for e in entries] == [
        (7, 0, 1, 1, 1, -1), (9, 1, 1, 4, 1, -1), (11, 0, 1, 6, 1, 5)]
    p.log.close()
    again = _open(tmp_path, appender)  # loads the snapshot and the txnindex, replays nothing
    assert again.producer_state.ongoing == {11: 5}
    assert again.producer_state.aborted == p.producer_state.aborted
    assert again.producer_state.check(9, 1, 2, 3) is None      # the next sequence is accepted
    assert again.producer_state.check(9, 1, 0, 1) is not None  # the last batch is still a duplicate
    assert producer_snapshot.read_snapshot(snapshot).ongoing == {11: 5}


def test_a_corrupt_snapshot_falls_back_to_replaying_the_log(tmp_path, appender):
    p = _open(tmp_path, appender)
    p.append_as_leader(_txn_batch(7, 0), 1)
    p.write_snapshot()
    path = p.log.directory / f"{2:020d}.snapshot"
    raw = bytearray(path.read_bytes())
    raw[-1] ^= 0xFF
    path.write_bytes(raw)
    p.log.close()
    assert _open(tmp_path, appender).producer_state.ongoing == {7: 0}


def test_list_offsets_earliest_of_an_empty_log_is_its_start(tmp_path, appender):
    """ListOffsets(-2) answers the log start offset even before anything is written; answering
    "no offset" made a consumer starting at OFFSET_BEGINNING skip what came next."""
    p = _open(tmp_path, appender)
    assert p.offset_for_timestamp(-2, READ_UNCOMMITTED) == (0, -1)
    assert p.offset_for_timestamp(-2, READ_COMMITTED) == (0, -1)
    assert p.offset_for_timestamp(-1, READ_UNCOMMITTED) == (0, -1)
    assert p.offset_for_timestamp(1_000, READ_UNCOMMITTED) is None


def test_a_marker_from_an_older_transaction_coordinator_is_fenced(tmp_path, appender):
    """As Kafka's appendEndTxnMarker: once a coordinator of epoch 5 wrote a producer's marker here, a
    marker of coordinator epoch 4 (a stale coordinator still sending) is TRANSACTION_COORDINATOR_FENCED;
    the coordinator epoch is kept in the snapshot and rebuilt from the markers when the log is replayed."""
    from kbroker.log import producer_snapshot
    p = _open(tmp_path, appender)
    p.append_as_leader(_txn_batch(7, 0), 1)                       # 0-1
    p.write_marker(7, 0, commit=True, coordinator_epoch=5)        # 2
    p.append_as_leader(_txn_batch(7, 2), 1)                       # 3-4: the next transaction
    with pytest.raises(errors.TransactionCoordinatorFencedError):
        p.write_marker(7, 0, commit=False, coordinator_epoch=4)
    assert p.producer_state.ongoing == {7: 3}                     # still open: nothing was written
    assert p.write_marker(7, 0, commit=False, coordinator_epoch=5) == 5
    assert p.producer_state.aborted == [AbortedTxn(7, 3, 5)]
    # a new producer epoch starts its sequences over, the fence stays
    p.append_as_leader(_txn_batch(7, 0, epoch=1), 1)              # 6-7
    with pytest.raises(errors.TransactionCoordinatorFencedError):
        p.write_marker(7, 1, commit=True, coordinator_epoch=3)
    p.write_snapshot()
    snapshot = p.log.directory / f"{8:020d}.snapshot"
    assert producer_snapshot.read_snapshot(snapshot).producers[7].coordinator_epoch == 5
    p.log.close()
    again = _open(tmp_path, appender)                             # from the snapshot
    with pytest.raises(errors.TransactionCoordinatorFencedError):
        again.write_marker(7, 1, commit=True, coordinator_epoch=4)
    again.log.close()
    snapshot.unlink()
    replayed = _open(tmp_path, appender)                          # from the markers in the log
    assert replayed.producer_state.producers[7].coordinator_epoch == 5
    with pytest.raises(errors.TransactionCoordinatorFencedError):
        replayed.write_marker(7, 1, commit=True, coordinator_epoch=4)
    assert replayed.write_marker(7, 1, commit=True, coordinator_epoch=6) == 8


def test_read_marker_gives_the_type_and_the_coordinator_epoch():
    assert markers.read_marker(markers.control_batch(1, 0, True, 4, 0)) == (markers.COMMIT, 4)
    assert markers.read_marker(markers.control_batch(1, 0, False, 2**31 - 1, 0)) == (markers.ABORT, 2**31 - 1)


def test_a_producer_snapshot_is_taken_at_each_roll_and_a_crash_replays_from_it(tmp_path, appender, monkeypatch):
    """As Kafka's roll: the producer state goes to <log end>.snapshot after an append that started a segment,
    so a broker killed later replays only the batches after the roll, not the whole log."""
    from kbroker.log import producer_snapshot
    plog = PartitionLog(tmp_path / str(TP), TP, LogConfig(segment_bytes=1024), appender)
    p = Partition(TP, plog, 1)
    p.append_as_leader(_txn_batch(7, 0, n=5), 1)                  # 0-4: producer 7 opens at 0
    p.write_marker(7, 0, commit=False, coordinator_epoch=2)       # 5
    seq = 0
    while len(plog.segments) < 3:
        p.append_as_leader(make_batch(5, producer_id=9, producer_epoch=0, base_sequence=seq), 1)
        seq += 5
    p.append_as_leader(_txn_batch(11, 0), 1)                      # open across the crash
    snapshots = producer_snapshot.snapshot_offsets(plog.directory)
    assert len(snapshots) == 1 and plog.segments[-1].base_offset <= snapshots[0] < plog.log_end_offset
    p.append_as_leader(make_batch(5, producer_id=9, producer_epoch=0, base_sequence=seq), 1)
    plog.close()                                                  # a crash: no clean-shutdown snapshot

    def no_full_replay(self):
        raise AssertionError("the whole log was replayed")
    monkeypatch.setattr(Partition, "_rebuild_producer_state", no_full_replay)
    again = Partition(TP, PartitionLog(tmp_path / str(TP), TP, LogConfig(segment_bytes=1024), appender), 1)
    assert again.producer_state.ongoing == p.producer_state.ongoing == {11: p.producer_state.ongoing[11]}
    assert again.producer_state.aborted == p.producer_state.aborted == [AbortedTxn(7, 0, 5)]
    assert again.producer_state.check(9, 0, seq, seq + 4) is not None      # the last batch: a duplicate
    assert again.producer_state.check(9, 0, seq + 5, seq + 9) is None      # the next one is expected
    assert again.producer_state.producers[7].coordinator_epoch == 2
