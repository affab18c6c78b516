"""Replication throttles (Kafka's KIP-73): byte-rate ceilings on moving replicas.

Kafka keeps three quotas of this kind (core/src/main/scala/kafka/server/ReplicationQuotaManager.scala,
QuotaFactory.scala), each a ``SimpleRate`` over ``replication.quota.window.num`` samples of
``replication.quota.window.size.seconds``:

- leader: what a leader sends to followers of its throttled replicas (``leader.replication.throttled.rate``);
- follower: what a follower fetches for its throttled replicas (``follower.replication.throttled.rate``);
- alter log dirs: what a move between this broker's log dirs copies
  (``replica.alter.log.dirs.io.max.bytes.per.second``).

A quota never blocks a single read: the caller asks ``exceeded()`` first and skips the throttled replica while
it is true, then ``record``s what it moved. The rate is therefore a ceiling on the average over the window,
overshot at most by one read. Which replicas are throttled is the topic config ``leader.`` /
``follower.replication.throttled.replicas``: "partition:broker" pairs naming this broker, or "*" for all
(Kafka's TopicConfigHandler.parseThrottledPartitions); ``throttled`` reads it from the partition's LogConfig,
which topic config changes already replace on every hosted replica.
"""
from __future__ import annotations

import functools
import time
from collections.abc import Callable

from kbroker.config.broker import BrokerConfig
from kbroker.metrics.rates import SimpleRate

UNBOUNDED = 2**63 - 1  # Kafka's QuotaBytesPerSecondDefault (Long.MaxValue): no throttle

LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
ALTER_LOG_DIRS_RATE = "replica.alter.log.dirs.io.max.bytes.per.second"
LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"

# ReplicationQuotaManagerConfig: 10 whole windows and the current one, of a second each
WINDOW_NUM = 11
WINDOW_SIZE_SECONDS = 1


def _now_ms() -> float:
    return time.monotonic() * 1000.0


class ReplicationQuota:
    """One of Kafka's ReplicaQuota: a bound in bytes/s over a ``SimpleRate``; ``UNBOUNDED`` never throttles."""

    def __init__(self, bound: int = UNBOUNDED, num: int = WINDOW_NUM, window_s: int = WINDOW_SIZE_SECONDS,
                 clock: Callable[[], float] = _now_ms) -> None:
        self.bound = bound
        self.rate = SimpleRate(num, window_s * 1000.0)
        self._clock = clock

    @property
    def bounded(self) -> bool:
        return self.bound < UNBOUNDED

    def update(self, bound: int) -> None:
        """A new bound; the samples stay (Kafka changes only the metric's quota)."""
        self.bound = bound

    def record(self, size: int) -> None:
        """Bytes moved, counted whatever the bound (Kafka records with QuotaEnforcementType.NONE)."""
        self.rate.record(float(size), self._clock())

    def exceeded(self) -> bool:
        """Over the bound now (Kafka's Quota.upperBound: acceptable while rate <= bound)."""
        if not self.bounded:
            return False
        return self.rate.measure(self._clock()) > self.bound

    def measured(self) -> float:
        return self.rate.measure(self._clock())

    def delay_s(self) -> float:
        """How long until the rate is back at the bound if nothing more is recorded (0 when it is): the window
        it divides by grows with time (older samples expiring meanwhile only shorten the wait)."""
        if not self.bounded:
            return 0.0
        now = self._clock()
        size = self.rate.window_size(now)
        total = sum(self.rate.values)
        return max(0.0, total / max(self.bound, 1) - size / 1000.0)


# the value of a throttled-replicas list meaning every replica of the topic
ALL_REPLICAS = "*"


@functools.lru_cache(maxsize=1024)
def throttled_partitions(value: str, broker_id: int) -> frozenset[int] | None:
    """The partitions a throttled-replicas value names for ``broker_id``; None for "*" (all of them).

    The topic config validator accepted the value ("partition:broker" pairs or "*")."""
    value = value.strip()
    if value == ALL_REPLICAS:
        return None
    found = set()
    for item in value.split(","):
        partition, sep, broker = item.strip().partition(":")
        if sep and broker.strip().isdigit() and partition.strip().isdigit() and int(broker) == broker_id:
            found.add(int(partition))
    return frozenset(found)


def throttled(value: str, partition: int, broker_id: int) -> bool:
    """Does the throttled-replicas ``value`` (a topic config) throttle ``partition`` on ``broker_id``?"""
    if not value:
        return False
    partitions = throttled_partitions(value, broker_id)
    return partitions is None or partition in partitions


class ReplicationQuotas:
    """The broker's three replication quotas (Kafka's QuotaManagers leader, follower, alterLogDirs), their
    bounds kept at the broker's current config: call ``apply`` with each new config (a dynamic change)."""

    def __init__(self, config: BrokerConfig, clock: Callable[[], float] = _now_ms) -> None:
        num, window = config.replication_quota_window_num, config.replication_quota_window_size_seconds
        self.leader = ReplicationQuota(config.leader_replication_throttled_rate, num, window, clock)
        self.follower = ReplicationQuota(config.follower_replication_throttled_rate, num, window, clock)
        self.alter_log_dirs = ReplicationQuota(config.replica_alter_log_dirs_io_max_bytes_per_second, num, window,
                                               clock)

    def apply(self, config: BrokerConfig, changed: frozenset[str] = frozenset()) -> None:
        """New bounds (a DynamicBrokerConfig subscriber: ``changed`` is ignored, every bound is re-read)."""
        self.leader.update(config.leader_replication_throttled_rate)
        self.follower.update(config.follower_replication_throttled_rate)
        self.alter_log_dirs.update(config.replica_alter_log_dirs_io_max_bytes_per_second)
