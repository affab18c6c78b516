"""The log manager under dynamic broker configs (KIP-226): ``log.cleaner.threads`` cleanings at once, changed at
run time; ``log.cleaner.io.max.bytes.per.second`` as a ceiling; new ``log.*`` defaults reaching every log whose
topic does not override them."""
from __future__ import annotations

from kbroker.config.broker import load_config
from kbroker.log import LogConfig, LogManager, TopicPartition
from kbroker.log.cleaner import Throttler

from .test_cleaner import Model, updates

COMPACTED = {"cleanup.policy": "compact", "segment.bytes": "1500", "min.cleanable.dirty.ratio": "0.1"}


def _dirty_logs(mgr: LogManager, count: int) -> None:
    for n in range(count):
        topic = f"compacted-{n}"
        mgr.topic_overrides[topic] = COMPACTED
        updates(mgr.get_or_create_log(TopicPartition(topic, 0)), Model(), keys=10, rounds=20)


def test_cleaner_threads_clean_that_many_logs_at_once_and_change_at_run_time(tmp_path, appender):
    mgr = LogManager([tmp_path], LogConfig(cleaner_backoff_ms=0), appender=appender, cleaner_threads=1)
    mgr.startup()
    try:
        _dirty_logs(mgr, 4)
        assert mgr.cleaner.thread_count == 1
        assert mgr.clean(wait=True).logs_cleaned == 1  # one thread: one log per round

        mgr.reconfigure(load_config(None, ["log.cleaner.threads=3", "log.cleaner.backoff.ms=0",
                                           "log.cleaner.io.max.bytes.per.second=1e9"]),
                        frozenset({"log.cleaner.threads", "log.cleaner.io.max.bytes.per.second"}))
        assert mgr.cleaner.thread_count == 3
        assert mgr.cleaner.throttle.rate == 1e9
        assert mgr.clean(wait=True).logs_cleaned == 3  # three at once: the other three dirty logs

        mgr.reconfigure(load_config(None, ["log.cleaner.threads=2", "log.cleaner.backoff.ms=0"]),
                        frozenset({"log.cleaner.threads"}))
        _dirty_logs(mgr, 4)
        assert mgr.clean(wait=True).logs_cleaned == 2
        assert mgr.cleaner.threads == 2
    finally:
        mgr.shutdown()
    assert mgr.cleaner.thread_count == 0


def test_throttler_is_a_ceiling():
    """Kafka's Throttler: once a check interval has passed, a caller ahead of the rate sleeps until it is not; so
    at every check the bytes so far took at least bytes / rate seconds."""
    now = [0.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    throttle = Throttler(1000.0, clock=lambda: now[0], sleep=sleep)
    total, checks = 0, []
    for _ in range(100):  # 100 x 100 bytes, 0.01 s apart: 10,000 bytes/s unthrottled
        before = len(slept)
        throttle(100)
        total += 100
        if len(slept) > before:
            checks.append(total / now[0])
        now[0] += 0.01
    assert len(checks) >= 3
    assert max(checks) <= 1000.0 * 1.001

    unlimited = Throttler(clock=lambda: now[0], sleep=sleep)
    slept.clear()
    for _ in range(100):
        unlimited(1 << 20)
        now[0] += 0.01
    assert slept == []


def test_new_log_defaults_reach_logs_without_their_own_override(tmp_path, appender):
    mgr = LogManager([tmp_path], LogConfig(), appender=appender, cleaner_thread=False)
    mgr.startup()
    try:
        mgr.topic_overrides["own"] = {"retention.ms": "5000"}
        plain, own = (mgr.get_or_create_log(TopicPartition(t, 0)) for t in ("plain", "own"))
        mgr.reconfigure(load_config(None, ["log.retention.ms=1000", "log.segment.bytes=4096"]),
                        frozenset({"log.retention.ms", "log.segment.bytes"}))
        assert (plain.config.retention_ms, plain.config.segment_bytes) == (1000, 4096)
        assert (own.config.retention_ms, own.config.segment_bytes) == (5000, 4096)
        assert mgr.get_or_create_log(TopicPartition("later", 0)).config.retention_ms == 1000
    finally:
        mgr.shutdown()
