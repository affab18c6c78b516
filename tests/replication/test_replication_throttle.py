"""The replication throttles' arithmetic (kbroker.replication.throttle), on a fake clock: Kafka's SimpleRate over
11 one-second samples, the quota's bound, the throttled-replica lists, the bounds following the dynamic config;
and a log-dir move held to replica.alter.log.dirs.io.max.bytes.per.second."""
from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from kbroker.config.broker import build_config
from kbroker.config.dynamic import DynamicBrokerConfig
from kbroker.log import LogConfig, LogManager, TopicPartition
from kbroker.log.log_dir_mover import LogDirMover
from kbroker.metrics.rates import SimpleRate
from kbroker.replication.throttle import (
    UNBOUNDED,
    ReplicationQuota,
    ReplicationQuotas,
    throttled,
    throttled_partitions,
)

from ..log.helpers import make_batch, read_all


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def test_a_young_rate_divides_by_one_window_at_least() -> None:
    rate = SimpleRate(11, 1000.0)
    rate.record(1000, 0.0)
    assert rate.measure(0.0) == 1000.0      # not spread over 10 windows as the client quotas' Rate is
    assert rate.measure(500.0) == 1000.0
    assert rate.measure(2000.0) == 500.0    # since the oldest sample began
    rate.record(1000, 2000.0)
    assert rate.measure(4000.0) == 500.0


def test_samples_roll_over_and_expire_after_num_windows() -> None:
    rate = SimpleRate(3, 1000.0)
    for t in (0.0, 1000.0, 2000.0):
        rate.record(300, t)
    assert rate.measure(2500.0) == pytest.approx(900 / 2.5)
    rate.record(600, 3000.0)                # a fourth window reuses the oldest slot (t=0 is gone)
    assert sorted(rate.starts) == [1000.0, 2000.0, 3000.0]
    assert rate.measure(3000.0) == pytest.approx(1200 / 2.0)
    assert rate.measure(4000.0) == pytest.approx(900 / 2.0)   # the t=1000 sample is 3 windows old: reset
    assert rate.measure(10_000.0) == 0.0


def test_the_quota_is_exceeded_only_above_the_bound() -> None:
    clock = Clock()
    quota = ReplicationQuota(1000, 11, 1, clock)
    assert not quota.exceeded()
    quota.record(1000)
    assert not quota.exceeded()             # Kafka's upper bound accepts the bound itself
    quota.record(1)
    assert quota.exceeded()
    clock.now += 1100
    assert not quota.exceeded()
    quota.update(100)
    assert quota.exceeded()                 # a new bound applies to the samples kept


def test_the_delay_is_the_time_until_the_rate_is_back_at_the_bound() -> None:
    clock = Clock()
    quota = ReplicationQuota(1000, 11, 1, clock)
    quota.record(3000)
    assert quota.delay_s() == pytest.approx(2.0)   # 3000 bytes are 1000/s over 3 s; 1 s has the window already
    clock.now += 1500
    assert quota.delay_s() == pytest.approx(1.5)
    clock.now += 1500
    assert quota.delay_s() == 0.0 and not quota.exceeded()
    assert ReplicationQuota().delay_s() == 0.0


def test_a_ceiling_over_time_whatever_the_chunk() -> None:
    """Moving while not exceeded, one chunk at a time, keeps the average within one chunk of the bound."""
    clock = Clock()
    quota = ReplicationQuota(1 << 20, 11, 1, clock)
    start, moved = clock.now, 0
    while clock.now - start < 60_000:
        if not quota.exceeded():
            quota.record(256 << 10)
            moved += 256 << 10
        clock.now += 50
    assert (1 << 20) * 60 * 0.95 <= moved <= (1 << 20) * 60 + (256 << 10) * 11


def test_unbounded_never_throttles() -> None:
    quota = ReplicationQuota()
    assert quota.bound == UNBOUNDED and not quota.bounded
    quota.record(1 << 40)
    assert not quota.exceeded()


@pytest.mark.parametrize("value, broker, expected", [
    ("0:1,1:2,2:1", 1, frozenset({0, 2})),
    ("0:1,1:2,2:1", 3, frozenset()),
    (" 0:1 , 1:1 ", 1, frozenset({0, 1})),
    ("*", 7, None),
])
def test_throttled_replica_lists_name_partitions_per_broker(value, broker, expected) -> None:
    assert throttled_partitions(value, broker) == expected


def test_throttled_reads_the_topic_config_value() -> None:
    assert throttled("0:1,3:1", 3, 1) and not throttled("0:1,3:1", 3, 2)
    assert throttled("*", 5, 9)
    assert not throttled("", 0, 1)


def test_the_bounds_follow_the_dynamic_config() -> None:
    static = build_config({"broker.id": ("1", "test"), "follower.replication.throttled.rate": ("2048", "test")})
    dynamic = DynamicBrokerConfig(static, 1)
    quotas = ReplicationQuotas(dynamic.current)
    dynamic.subscribe(quotas.apply)
    assert (quotas.leader.bound, quotas.follower.bound, quotas.alter_log_dirs.bound) == (UNBOUNDED, 2048, UNBOUNDED)
    dynamic.update(per_broker={"leader.replication.throttled.rate": "1024",
                               "replica.alter.log.dirs.io.max.bytes.per.second": "4096"})
    assert (quotas.leader.bound, quotas.follower.bound, quotas.alter_log_dirs.bound) == (1024, 2048, 4096)
    dynamic.update(per_broker={})
    assert quotas.leader.bound == UNBOUNDED and quotas.alter_log_dirs.bound == UNBOUNDED


def test_a_log_dir_move_keeps_to_its_throttle(tmp_path: Path, appender) -> None:
    """16 MB moved at 4 MiB/s: the move takes at least the time the bound allows for all but what may go at
    once (a ceiling; how much faster the disk is does not matter)."""
    tp = TopicPartition("moving", 0)
    mgr = LogManager([tmp_path / "a", tmp_path / "b"], LogConfig(segment_bytes=1 << 20), appender=appender,
                     cleaner_thread=False)
    mgr.startup()
    plog = mgr.get_or_create_log(tp)
    for i in range(1600):
        plog.append(make_batch(1, value_size=10_000, tag=str(i)))
    plog.update_high_watermark(plog.log_end_offset)
    before, size = read_all(plog), plog.size_bytes
    bound = 4 << 20
    quota = ReplicationQuota(bound)

    async def move() -> float:
        mover = LogDirMover(mgr, quota=quota)
        here = plog.directory.parent
        mgr.create_future_log(tp, next(d for d in mgr.log_dirs if d != here))
        started = time.monotonic()
        mover.start(tp)
        while tp in mover.tasks:
            await asyncio.sleep(0.01)
        mover.stop()
        return time.monotonic() - started

    elapsed = asyncio.run(move())
    assert read_all(mgr.logs[tp]) == before
    # what may go at once: the first window's bound, one round (4 MiB) over it, the swap's last MiB
    allowance = bound + (4 << 20) + (1 << 20)
    assert elapsed >= (size - allowance) / bound > 1.0, (size, elapsed)
    mgr.shutdown()
