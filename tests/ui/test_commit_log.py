"""The collector's reader of __consumer_offsets: every value version Kafka 2.8 writes, tombstones, group metadata
records left alone, a fetch that starts inside a batch, aborted transactional commits skipped (read_committed).
Records are written by the broker's own codec (kbroker.coordinator.group.offsets_log) where it writes the version."""
from __future__ import annotations

import struct
from types import SimpleNamespace

from kbroker.coordinator.group.offsets_log import (
    OffsetAndMetadata,
    encode_group_metadata_key,
    encode_offset_commit_key,
    encode_offset_commit_value,
)
from kbroker.log import batches
from kbroker.ui.commit_log import CommitLog, LoggedCommit, decode_offset_key, decode_offset_value


def _string(text: str) -> bytes:
    return struct.pack(">h", len(text)) + text.encode()


def test_every_value_version_gives_the_offset_and_commit_time() -> None:
    v0 = struct.pack(">hq", 0, 11) + _string("m") + struct.pack(">q", 1000)
    v1 = encode_offset_commit_value(OffsetAndMetadata(12, metadata="x", commit_timestamp_ms=2000,
                                                      expire_timestamp_ms=9000))
    v2 = struct.pack(">hq", 2, 13) + _string("") + struct.pack(">q", 3000)
    v3 = encode_offset_commit_value(OffsetAndMetadata(14, leader_epoch=5, metadata="meta", commit_timestamp_ms=4000))
    assert [decode_offset_value(v) for v in (v0, v1, v2, v3)] == [
        LoggedCommit(11, 1000), LoggedCommit(12, 2000), LoggedCommit(13, 3000), LoggedCommit(14, 4000)]
    assert decode_offset_key(encode_offset_commit_key("g", "t", 7)) == ("g", "t", 7)
    assert decode_offset_key(encode_group_metadata_key("g")) is None


def _answer(index: int, records: bytes, hw: int, aborted: list[tuple[int, int]] | None = None) -> SimpleNamespace:
    return SimpleNamespace(partition_index=index, error_code=0, high_watermark=hw, log_start_offset=0,
                           aborted_transactions=[SimpleNamespace(producer_id=p, first_offset=o)
                                                 for p, o in (aborted or [])],
                           records=records)


def _commit(group: str, partition: int, offset: int, when: int) -> tuple[bytes, bytes, int]:
    value = encode_offset_commit_value(OffsetAndMetadata(offset, commit_timestamp_ms=when))
    return encode_offset_commit_key(group, "t", partition), value, when


def test_newest_commit_wins_and_a_tombstone_deletes() -> None:
    log = CommitLog()
    first = batches.build_batch([_commit("g", 0, 5, 100), _commit("g", 1, 9, 100),
                                 (encode_group_metadata_key("g"), b"\x00\x03", 100)], base_offset=0)
    second = batches.build_batch([_commit("g", 0, 5, 200), (encode_offset_commit_key("g", "t", 1), None, 300)],
                                 base_offset=3)
    assert log.take(_answer(0, bytes(first + second), hw=5), {}) is None
    assert log.get("g", "t", 0) == LoggedCommit(5, 200)  # the same offset committed again: a newer time
    assert log.get("g", "t", 1) is None


def test_a_fetch_from_inside_a_batch_applies_only_what_follows() -> None:
    log = CommitLog()
    batch = bytes(batches.build_batch([_commit("g", 0, 1, 100), _commit("g", 0, 2, 200)], base_offset=0))
    assert log.take(_answer(0, batch[:30], hw=2), {}) is None  # a truncated batch: nothing yet
    assert log.get("g", "t", 0) is None
    assert log.take(_answer(0, batch, hw=2), {}) is None
    assert log.get("g", "t", 0) == LoggedCommit(2, 200)
    log.commits.clear()
    assert log.take(_answer(0, batch, hw=2), {}) is None  # already read up to offset 2: the batch is skipped
    assert log.get("g", "t", 0) is None


def test_commits_of_an_aborted_transaction_are_skipped() -> None:
    log = CommitLog()
    txn = batches.TRANSACTIONAL
    aborted = batches.build_batch([_commit("g", 0, 50, 100)], base_offset=0, attributes=txn, producer_id=7,
                                  producer_epoch=0, base_sequence=0)
    marker = batches.control_batch(7, 0, False, 0, 200)
    marker[0:8] = struct.pack(">q", 1)
    kept = batches.build_batch([_commit("g", 0, 40, 300)], base_offset=2, attributes=txn, producer_id=7,
                               producer_epoch=0, base_sequence=1)
    data = bytes(aborted) + bytes(batches.set_crc(marker)) + bytes(kept)
    assert log.take(_answer(0, data, hw=3, aborted=[(7, 0)]), {}) is None
    assert log.get("g", "t", 0) == LoggedCommit(40, 300)


def test_an_offset_out_of_range_restarts_at_the_log_start() -> None:
    log = CommitLog()
    gone = SimpleNamespace(partition_index=3, error_code=1, high_watermark=10, log_start_offset=-1,
                           aborted_transactions=None, records=None)
    assert log.take(gone, {3: 8}) is None
    later = batches.build_batch([_commit("g", 0, 1, 100)], base_offset=7) + \
        batches.build_batch([_commit("g", 0, 2, 200)], base_offset=8)
    assert log.take(_answer(3, bytes(later), hw=9), {}) is None
    assert log.get("g", "t", 0) == LoggedCommit(2, 200)  # offset 7 lies before the restart position
