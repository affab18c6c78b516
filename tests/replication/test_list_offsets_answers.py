"""What ListOffsets answers at the partition, over real logs, beyond the offset itself (Kafka 2.8's
Partition.fetchOffsetForTimestamp and Log.fetchOffsetByTimestamp):
- a new leader whose high watermark is still below the start of its leader epoch (its followers have
  not fetched in this epoch yet) does not know the true high watermark: "latest", and a lookup by
  timestamp that finds nothing below it, answer OFFSET_NOT_AVAILABLE (retriable, KIP-207) instead of
  the stale high watermark a consumer would reset to; earliest and lookups below it still answer;
- the leader epoch of an earliest or by-timestamp answer is the epoch that wrote that offset (a
  KIP-320 client validates its position with it), of "latest" the partition's current epoch."""
from __future__ import annotations

import pytest

from kbroker import errors
from kbroker.handlers.fetch import _epoch_of_answer
from kbroker.log import LogConfig, PartitionLog, TopicPartition
from kbroker.replication.partition import READ_COMMITTED, READ_UNCOMMITTED, Partition
from tests.log.helpers import make_batch

TP = TopicPartition("lo", 0)


def _fetched(p: Partition, offset: int) -> None:
    """Follower 2 fetches from ``offset`` (so it holds everything below)."""
    p.update_follower(2, offset, 0)
    p.maybe_advance_high_watermark()


def _leader_of_two(tmp_path, appender) -> Partition:
    """Broker 1 leads epoch 0 with follower 2 in sync; offsets 0-2 (timestamps 1000-1002) are
    replicated to both, and the high watermark is 3."""
    plog = PartitionLog(tmp_path / str(TP), TP, LogConfig(), appender)
    p = Partition(TP, plog, 1, single_replica=False)
    p.become_leader(0, [1, 2], [1, 2], 0, 1)
    p.append_as_leader(make_batch(3, ts=1000), -1)
    _fetched(p, 3)
    assert p.high_watermark == 3
    return p


def test_a_new_leader_below_its_epoch_start_answers_offset_not_available(tmp_path, appender):
    p = _leader_of_two(tmp_path, appender)
    p.append_as_leader(make_batch(2, ts=2000), -1)   # 3-4: not yet fetched by 2
    p.become_leader(1, [1, 2], [1, 2], 1, 1)         # a new epoch starts at 5; the high watermark is 3
    assert (p.leader_epoch_start_offset, p.high_watermark) == (5, 3)
    for level in (READ_UNCOMMITTED, READ_COMMITTED):
        with pytest.raises(errors.OffsetNotAvailableError):
            p.offset_for_timestamp(-1, level)
        with pytest.raises(errors.OffsetNotAvailableError):
            p.offset_for_timestamp(2000, level)      # offset 3 exists, but not below the high watermark
        with pytest.raises(errors.OffsetNotAvailableError):
            p.offset_for_timestamp(9999, level)      # nothing that new, and the true end is unknown
        assert p.offset_for_timestamp(-2, level) == (0, -1)
        assert p.offset_for_timestamp(1001, level) == (1, 1001)
    # v0 answers the old way (Kafka's handleListOffsetRequestV0 has no such check)
    assert p.offset_for_timestamp(-1, READ_UNCOMMITTED, lagging_is_error=False) == (3, -1)

    _fetched(p, 5)                                   # the follower reaches the epoch start
    assert p.high_watermark == 5
    assert p.offset_for_timestamp(-1, READ_UNCOMMITTED) == (5, -1)
    assert p.offset_for_timestamp(2000, READ_UNCOMMITTED) == (3, 2000)
    assert p.offset_for_timestamp(9999, READ_UNCOMMITTED) is None
    p.log.close()


def test_a_leader_that_knows_its_high_watermark_answers_as_before(tmp_path, appender):
    p = _leader_of_two(tmp_path, appender)
    p.become_leader(1, [1, 2], [1, 2], 1, 1)         # nothing unreplicated: the epoch starts at the HW
    assert p.offset_for_timestamp(-1, READ_UNCOMMITTED) == (3, -1)
    assert p.offset_for_timestamp(9999, READ_UNCOMMITTED) is None
    p.log.close()


def test_the_epoch_of_an_answer_is_the_epoch_that_wrote_its_offset(tmp_path, appender):
    p = _leader_of_two(tmp_path, appender)          # 0-2 in epoch 0
    p.become_leader(3, [1, 2], [1, 2], 1, 1)
    p.append_as_leader(make_batch(2, ts=2000), -1)   # 3-4 in epoch 3
    _fetched(p, 5)
    p.become_leader(4, [1, 2], [1, 2], 2, 1)         # current epoch 4, nothing written in it yet

    def answer(ts: int, from_replica: bool = False) -> tuple[int, int]:
        found = p.log.offset_for_timestamp(ts) if from_replica else p.offset_for_timestamp(ts, READ_UNCOMMITTED)
        assert found is not None
        return found[0], _epoch_of_answer(p, ts, found[0], from_replica)

    assert answer(-2) == (0, 0)
    assert answer(1002) == (2, 0)
    assert answer(2000) == (3, 3)
    assert answer(-1) == (5, 4)                      # the current epoch
    assert answer(-1, from_replica=True) == (5, 4)   # the log's latest epoch: 4 was assigned at 5
    p.log.delete_records_before(4)
    assert answer(-2) == (4, 3)
    p.log.close()
