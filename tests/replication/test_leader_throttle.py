"""The leader side of the replication throttle, through the real Fetch handler (Kafka's
ReplicaManager.shouldLeaderThrottle): while the leader quota is exceeded, a follower outside the ISR fetching a
partition listed for this broker in leader.replication.throttled.replicas gets no records (with the offsets);
an in-sync follower, a consumer and an unlisted partition get theirs; what is sent of listed partitions counts
towards the quota."""
from __future__ import annotations

import asyncio

from kbroker.log import LogConfig, PartitionLog
from kbroker.replication.partition import Partition
from kbroker.replication.throttle import ReplicationQuota

from .test_delayed_fetch import TP, _Broker, _fetch, _only, _produce


def _leader_with_a_moving_replica(tmp_path, appender, throttled: str) -> Partition:
    plog = PartitionLog(tmp_path / str(TP), TP, LogConfig(leader_replication_throttled_replicas=throttled),
                        appender)
    p = Partition(TP, plog, 1, single_replica=False)
    p.become_leader(0, [1, 2], [1, 2, 3], zk_version=0, controller_epoch=1)  # 3 is being added: not in the ISR
    return p


def test_an_out_of_sync_follower_gets_nothing_of_a_throttled_replica_over_the_quota(tmp_path, appender):
    async def main():
        p = _leader_with_a_moving_replica(tmp_path, appender, "0:1")
        broker = _Broker(p)
        now = [1_000_000.0]
        quota = broker.replicas.quotas.leader = ReplicationQuota(1000, 11, 1, lambda: now[0])
        quota.record(5000)
        _produce(broker, p, 5)

        held = _only(_fetch(broker, 3, 0, max_wait_ms=0))
        assert held["error_code"] == 0 and held["records"] == b"" and held["log_start_offset"] == 0
        in_sync = _only(_fetch(broker, 2, 0, max_wait_ms=0))
        assert in_sync["records"].length > 0
        _fetch(broker, 2, 5, max_wait_ms=0)  # the ISR (1, 2) has the batch: the high watermark moves
        assert _only(_fetch(broker, -1, 0, max_wait_ms=0))["records"].length > 0
        before = sum(quota.rate.values)
        assert before == 5000 + in_sync["records"].length  # the in-sync follower's bytes count too

        now[0] += 12_000  # the samples expire: under the bound
        sent = _only(_fetch(broker, 3, 0, max_wait_ms=0))["records"]
        assert sent.length > 0
        assert sum(quota.rate.values) == sent.length
        broker.purgatory.close()

    asyncio.run(main())


def test_an_unlisted_replica_is_never_held(tmp_path, appender):
    async def main():
        p = _leader_with_a_moving_replica(tmp_path, appender, "0:2")  # another broker's entry
        broker = _Broker(p)
        quota = broker.replicas.quotas.leader = ReplicationQuota(1000)
        quota.record(5000)
        _produce(broker, p, 5)
        assert quota.exceeded()
        assert _only(_fetch(broker, 3, 0, max_wait_ms=0))["records"].length > 0
        assert sum(quota.rate.values) == 5000  # not counted either
        broker.purgatory.close()

    asyncio.run(main())
