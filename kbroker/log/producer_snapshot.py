"""Producer state files, in Kafka's formats, so opening a log replays only its tail:

``<offset>.snapshot`` (ProducerStateManager, version 1): int16 version, uint32 CRC-32C of what
follows, then int32 count and per producer: int64 producer id, int16 epoch, int32 last sequence,
int64 last offset, int32 offset delta (last - first offset of its last batch), int64 timestamp,
int32 coordinator epoch, int64 first offset of its open transaction (-1: none). The file name is
the log end offset the state is valid at.

``<segment base>.txnindex`` (TransactionIndex): 34-byte entries, int16 version (0), int64 producer
id, int64 first offset, int64 last offset (the ABORT marker's), int64 last stable offset.
"""
from __future__ import annotations

import logging
import os
import struct
from collections.abc import Iterable
from pathlib import Path

from kbroker import crashpoints
from kbroker._core.records import crc32c
from kbroker.log.producer_state import AbortedTxn, BatchMetadata, ProducerEntry, ProducerStateManager

log = logging.getLogger(__name__)

SNAPSHOT_SUFFIX = ".snapshot"
TXN_INDEX_SUFFIX = ".txnindex"
_HEAD = struct.Struct(">hI")
_COUNT = struct.Struct(">i")
_ENTRY = struct.Struct(">qhiqiqiq")
_ABORTED = struct.Struct(">hqqqq")


def snapshot_path(directory: Path, offset: int) -> Path:
    return directory / f"{offset:020d}{SNAPSHOT_SUFFIX}"


def snapshot_offsets(directory: Path) -> list[int]:
    found = []
    for entry in os.scandir(directory):
        stem, _, suffix = entry.name.partition(".")
        if "." + suffix == SNAPSHOT_SUFFIX and stem.isdigit():
            found.append(int(stem))
    return sorted(found)


def write_snapshot(directory: Path, offset: int, state: ProducerStateManager) -> Path:
    """Atomically write the state valid at ``offset``; older snapshots are removed."""
    pids = sorted(set(state.producers) | set(state.ongoing))
    body = bytearray(_COUNT.pack(len(pids)))
    for pid in pids:
        entry = state.producers.get(pid)
        last = entry.batches[-1] if entry is not None and entry.batches else None
        body += _ENTRY.pack(pid, entry.epoch if entry is not None else -1, last.last_sequence if last else -1,
                            last.last_offset if last else -1, (last.last_offset - last.first_offset) if last else 0,
                            last.timestamp if last else -1, entry.coordinator_epoch if entry is not None else -1,
                            state.ongoing.get(pid, -1))
    data = _HEAD.pack(1, crc32c(body)) + bytes(body)
    path = snapshot_path(directory, offset)
    tmp = path.with_suffix(".snapshot.tmp")
    with open(tmp, "wb") as f:
        if crashpoints.ARMED:
            crashpoints.crash_point("producer_snapshot.tmp_torn",
                                    lambda rng: os.write(f.fileno(), crashpoints.torn_prefix(data, rng)))
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    crashpoints.crash_point("producer_snapshot.before_rename")
    os.replace(tmp, path)
    crashpoints.crash_point("producer_snapshot.before_old_removed")
    for old in snapshot_offsets(directory):
        if old != offset:
            snapshot_path(directory, old).unlink(missing_ok=True)
    return path


def read_snapshot(path: Path) -> ProducerStateManager:
    """Raises ValueError for a file that is not a valid version-1 snapshot."""
    data = path.read_bytes()
    if len(data) < _HEAD.size + _COUNT.size:
        raise ValueError(f"{path}: too short for a producer snapshot")
    version, crc = _HEAD.unpack_from(data, 0)
    if version != 1:
        raise ValueError(f"{path}: snapshot version {version}, expected 1")
    body = memoryview(data)[_HEAD.size:]
    if crc32c(body) != crc:
        raise ValueError(f"{path}: CRC mismatch")
    count = _COUNT.unpack_from(body, 0)[0]
    if count < 0 or len(body) != _COUNT.size + count * _ENTRY.size:
        raise ValueError(f"{path}: {count} entries do not fit {len(body)} bytes")
    state = ProducerStateManager()
    for i in range(count):
        pid, epoch, last_seq, last_offset, delta, ts, coordinator_epoch, txn_first = _ENTRY.unpack_from(
            body, _COUNT.size + i * _ENTRY.size)
        if last_offset >= 0:
            entry = state.producers[pid] = ProducerEntry(epoch, coordinator_epoch)
            first_seq = last_seq - delta if last_seq >= delta else 0
            entry.batches.append(BatchMetadata(first_seq, last_seq, last_offset - delta, last_offset, ts))
        elif epoch >= 0:
            state.producers[pid] = ProducerEntry(epoch, coordinator_epoch)
        if txn_first >= 0:
            state.ongoing[pid] = txn_first
    return state


def txn_index_path(directory: Path, segment_base: int) -> Path:
    return directory / f"{segment_base:020d}{TXN_INDEX_SUFFIX}"


def append_aborted(directory: Path, segment_base: int, aborted: AbortedTxn, last_stable_offset: int) -> None:
    """Add an entry to the segment's .txnindex, once: a restart replays the log from its last
    producer snapshot, which may be older than aborts already indexed, so an entry for the same
    transaction is not written again (a duplicate makes read_committed consumers skip committed
    data: they pair each entry with one ABORT marker). A torn entry a crash left at the end is cut
    first, so that the file stays whole entries."""
    entry = _ABORTED.pack(0, aborted.producer_id, aborted.first_offset, aborted.last_offset, last_stable_offset)
    fd = os.open(txn_index_path(directory, segment_base), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        size = os.fstat(fd).st_size
        whole = size - size % _ABORTED.size
        if whole != size:
            log.warning("%s: cutting a torn entry (%d bytes) off the end", txn_index_path(directory, segment_base),
                        size - whole)
            os.ftruncate(fd, whole)
        if whole:
            key = (aborted.producer_id, aborted.first_offset, aborted.last_offset)
            data = os.pread(fd, whole, 0)
            if any(_ABORTED.unpack_from(data, pos)[1:4] == key for pos in range(0, whole, _ABORTED.size)):
                return
        if crashpoints.ARMED:
            crashpoints.crash_point("txnindex.append.torn",
                                    lambda rng: os.pwrite(fd, crashpoints.torn_prefix(entry, rng), whole))
        os.pwrite(fd, entry, whole)
    finally:
        os.close(fd)


def read_aborted(directory: Path) -> list[AbortedTxn]:
    """Every complete entry of every .txnindex of the log, in marker order, each once (files
    written before ``append_aborted`` refused duplicates may hold some)."""
    out: set[AbortedTxn] = set()
    for entry in sorted(os.scandir(directory), key=lambda e: e.name):
        if not entry.name.endswith(TXN_INDEX_SUFFIX):
            continue
        data = Path(entry.path).read_bytes()
        for pos in range(0, len(data) - _ABORTED.size + 1, _ABORTED.size):
            version, pid, first, last, _ = _ABORTED.unpack_from(data, pos)
            if version == 0:
                out.add(AbortedTxn(pid, first, last))
    return sorted(out, key=lambda a: a.last_offset)


def remove_stale_txn_indexes(directory: Path, segment_bases: Iterable[int]) -> None:
    keep = {txn_index_path(directory, b).name for b in segment_bases}
    for entry in os.scandir(directory):
        if entry.name.endswith(TXN_INDEX_SUFFIX) and entry.name not in keep:
            os.unlink(entry.path)
