"""The replication bookkeeping of one partition, over real logs: the high watermark as the lowest
log end offset of the ISR, follower lag and ISR membership, epoch fencing, min.insync.replicas,
and a former leader truncating its divergent tail by leader epoch."""
from __future__ import annotations

import pytest

from kbroker import errors
from kbroker.log import LogConfig, PartitionLog, TopicPartition
from kbroker.replication.partition import Partition
from tests.log.helpers import make_batch, read_all, values_of

TP = TopicPartition("replicated", 0)


def _partition(tmp_path, appender, broker_id: int, **config) -> Partition:
    plog = PartitionLog(tmp_path / f"broker-{broker_id}" / str(TP), TP, LogConfig(**config), appender)
    return Partition(TP, plog, broker_id, single_replica=False)


def _leader(tmp_path, appender, isr=(1, 2, 3), **config) -> Partition:
    p = _partition(tmp_path, appender, 1, **config)
    p.become_leader(0, list(isr), [1, 2, 3], zk_version=0, controller_epoch=1)
    return p


def test_high_watermark_is_the_lowest_log_end_offset_in_the_isr(tmp_path, appender):
    p = _leader(tmp_path, appender)
    for _ in range(3):
        p.append_as_leader(make_batch(10), -1)
    assert p.log.log_end_offset == 30
    assert p.high_watermark == 0  # followers' log end offsets are unknown yet
    p.update_follower(2, 30, now=1000)
    assert not p.maybe_advance_high_watermark()
    p.update_follower(3, 20, now=1000)
    assert p.maybe_advance_high_watermark() and p.high_watermark == 20
    p.update_follower(3, 10, now=1001)  # a follower going back (it truncated) never lowers it
    assert not p.maybe_advance_high_watermark() and p.high_watermark == 20
    p.become_leader(0, [1, 2], [1, 2, 3], zk_version=1, controller_epoch=1)  # 3 left the ISR
    assert p.high_watermark == 30
    consumer_view = p.read(0, 1 << 20, 0, from_follower=False, min_one_batch=True)
    follower_view = p.read(20, 1 << 20, 0, from_follower=True, min_one_batch=True)
    assert consumer_view.high_watermark == 30 and follower_view.records.length > 0


def test_a_consumer_never_reads_past_the_high_watermark(tmp_path, appender):
    p = _leader(tmp_path, appender)
    p.append_as_leader(make_batch(5), 1)
    assert p.read(0, 1 << 20, 0, from_follower=False, min_one_batch=True).records is None
    assert p.read(0, 1 << 20, 0, from_follower=True, min_one_batch=True).records.length > 0


def test_follower_lag_decides_isr_membership(tmp_path, appender):
    p = _leader(tmp_path, appender, isr=(1, 2))
    p.become_leader(0, [1, 2], [1, 2, 3], zk_version=0, controller_epoch=1)
    start = p.followers[2].last_caught_up_ms
    assert p.lagging_isr_members(start + 500, 1000) == []
    p.append_as_leader(make_batch(10), 1)
    p.update_follower(2, 0, now=start + 600)   # behind the leader's log end: not caught up
    assert p.lagging_isr_members(start + 1001, 1000) == [2]
    p.update_follower(2, 10, now=start + 1002)  # caught up again
    assert p.lagging_isr_members(start + 1500, 1000) == []
    # 3 is outside the ISR: it may join once at the high watermark and in the current epoch
    p.maybe_advance_high_watermark()
    assert p.high_watermark == 10
    p.update_follower(3, 5, now=start + 1600)
    assert not p.may_join_isr(3)
    p.update_follower(3, 10, now=start + 1700)
    assert p.may_join_isr(3)
    assert not p.may_join_isr(2)  # already in
    with pytest.raises(errors.NotLeaderOrFollowerError):
        p.update_follower(7, 0, now=start)


def test_expansion_waits_for_the_current_epoch(tmp_path, appender):
    p = _leader(tmp_path, appender, isr=(1,))
    p.append_as_leader(make_batch(4), 1)
    p.become_leader(1, [1], [1, 2, 3], zk_version=1, controller_epoch=1)  # epoch 1 starts at 4
    p.append_as_leader(make_batch(4), 1)
    assert p.leader_epoch_start_offset == 4
    p.log.update_high_watermark(2)
    p.update_follower(2, 3, now=1)
    assert not p.may_join_isr(2)  # at the high watermark, but still in epoch 0
    p.update_follower(2, 4, now=2)
    assert p.may_join_isr(2)


def test_leader_epoch_fencing(tmp_path, appender):
    p = _leader(tmp_path, appender)
    p.become_leader(5, [1, 2, 3], [1, 2, 3], zk_version=1, controller_epoch=1)
    p.check_leader_epoch(-1)
    p.check_leader_epoch(5)
    with pytest.raises(errors.FencedLeaderEpochError):
        p.check_leader_epoch(4)
    with pytest.raises(errors.UnknownLeaderEpochError):
        p.check_leader_epoch(6)


def test_acks_all_needs_min_insync_replicas(tmp_path, appender):
    p = _leader(tmp_path, appender, isr=(1,), min_insync_replicas=2)
    with pytest.raises(errors.NotEnoughReplicasError):
        p.append_as_leader(make_batch(1), -1)
    assert p.log.log_end_offset == 0  # refused before anything was written
    p.append_as_leader(make_batch(1), 1)  # acks=1 does not care
    p.become_leader(0, [1, 2], [1, 2, 3], zk_version=1, controller_epoch=1)
    p.append_as_leader(make_batch(1), -1)
    assert p.log.log_end_offset == 2


def test_follower_takes_the_leaders_bytes_and_high_watermark(tmp_path, appender):
    leader = _leader(tmp_path, appender)
    follower = _partition(tmp_path, appender, 2)
    follower.become_follower(1, 0, [1, 2, 3], [1, 2, 3], zk_version=0, controller_epoch=1)
    for i in range(3):
        leader.append_as_leader(make_batch(4, tag=str(i)), 1)
    data = memoryview(read_all(leader.log))
    cut = len(data) - 7  # a fetch cut inside the last batch: the partial batch waits
    assert follower.append_as_follower(data[:cut], leader_high_watermark=6) > 0
    assert follower.log.log_end_offset == 8 and follower.high_watermark == 6
    follower.append_as_follower(data, leader_high_watermark=12)  # overlapping retry: only the new batch
    assert read_all(follower.log) == read_all(leader.log)
    assert follower.high_watermark == 12
    assert follower.log.leader_epochs.entries == leader.log.leader_epochs.entries == [(0, 0)]


def test_former_leader_truncates_its_divergent_tail_by_leader_epoch(tmp_path, appender):
    """A leads epoch 0 and writes 5 batches, B has replicated 3 when A dies; B leads epoch 1 and
    writes 2 more. A comes back as follower: OffsetForLeaderEpoch(0) on B answers 3 (where
    epoch 1 starts), so A drops its 2 unreplicated batches and then takes B's."""
    a = _leader(tmp_path, appender)
    b = _partition(tmp_path, appender, 2)
    b.become_follower(1, 0, [1, 2, 3], [1, 2, 3], zk_version=0, controller_epoch=1)
    for i in range(5):
        a.append_as_leader(make_batch(1, tag=f"a{i}", producer_id=9, producer_epoch=0, base_sequence=i), 1)
    b.append_as_follower(memoryview(a.log.read_bytes(0, 1 << 20, max_offset=3)), leader_high_watermark=3)
    assert b.log.log_end_offset == 3
    b.become_leader(1, [2, 3], [1, 2, 3], zk_version=1, controller_epoch=2)
    for i in range(2):
        b.append_as_leader(make_batch(1, tag=f"b{i}"), 1)
    a.become_follower(2, 1, [2, 3], [1, 2, 3], zk_version=1, controller_epoch=2)
    assert a.log.leader_epochs.latest_epoch == 0
    epoch, end = b.end_offset_for_epoch(0)
    assert (epoch, end) == (0, 3)
    a.truncate_to(min(end, a.log.log_end_offset))
    assert a.log.log_end_offset == 3
    a.append_as_follower(memoryview(read_all(b.log, 3)), leader_high_watermark=5)
    assert read_all(a.log) == read_all(b.log)
    assert values_of(read_all(a.log))[3:] == [b"b0:0:".ljust(100, b"x"), b"b1:0:".ljust(100, b"x")]
    assert a.log.leader_epochs.entries == [(0, 0), (1, 3)]
    # the truncated producer batches are forgotten: sequence 3 of producer 9 is new again, not a duplicate
    assert a.producer_state.check(9, 0, 3, 3) is None
    with pytest.raises(errors.OutOfOrderSequenceNumberError):
        a.producer_state.check(9, 0, 4, 4)
