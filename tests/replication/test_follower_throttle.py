"""The follower side of the replication throttle (Kafka's ReplicaFetcherThread.shouldFollowerThrottle): while the
follower quota is exceeded, a partition listed for this broker in follower.replication.throttled.replicas and not
in sync is left out of the Fetch requests; the others are fetched as ever, and the listed one comes back once
the quota allows."""
from __future__ import annotations

import asyncio
from types import SimpleNamespace

from kbroker.log import LogConfig, TopicPartition
from kbroker.metadata.zk_view import LiveBroker
from kbroker.replication.fetcher import LeaderFetcher
from kbroker.replication.throttle import ReplicationQuota

from .test_fetcher_add import LEADER, _follower_partition, _IdleLeader


def test_a_throttled_partition_is_left_out_while_the_follower_quota_is_exceeded(tmp_path, appender) -> None:
    async def main() -> None:
        leader = _IdleLeader()  # answers no Fetch: each request ends at the socket timeout and is sent again
        port = await leader.start()
        now = [1_000_000.0]
        quota = ReplicationQuota(1000, 11, 1, lambda: now[0])
        quota.record(5000)
        assert quota.exceeded()
        config = SimpleNamespace(replica_socket_timeout_ms=150, replica_fetch_wait_max_ms=50,
                                 replica_fetch_backoff_ms=20, replica_fetch_max_bytes=1 << 20,
                                 replica_fetch_min_bytes=1, replica_fetch_response_max_bytes=10 << 20,
                                 broker_rack="")
        broker = SimpleNamespace(broker_id=1, config=config, replicated_in=lambda size: None,
                                 quotas=SimpleNamespace(follower=quota))
        moving = _follower_partition(tmp_path, appender, TopicPartition("moving", 0))
        moving.log.config = LogConfig(follower_replication_throttled_replicas="0:1,1:2")
        other = _follower_partition(tmp_path, appender, TopicPartition("other", 0))
        other.log.config = LogConfig(follower_replication_throttled_replicas="0:2")  # another broker's
        fetcher = LeaderFetcher(broker, LiveBroker(LEADER, "127.0.0.1", port, None))  # type: ignore[arg-type]
        fetcher.add(moving)
        fetcher.add(other)
        await leader.wait_for_fetch_of({("other", 0)}, 5)
        await asyncio.sleep(0.5)  # several requests
        assert leader.fetches and all(("moving", 0) not in f for f in leader.fetches)
        now[0] += 12_000  # the samples expire: under the bound again
        await leader.wait_for_fetch_of({("moving", 0), ("other", 0)}, 5)
        fetcher.stop()
        assert leader.server is not None
        leader.server.close()

    asyncio.run(main())
