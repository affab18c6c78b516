"""num.replica.fetchers: a follower spreads the partitions it follows from one leader over that many fetch
connections, each partition on the one Kafka's AbstractFetcherManager.getFetcherId picks, and a new value
(a dynamic config) spreads them again."""
from __future__ import annotations

import asyncio
from types import SimpleNamespace

from kbroker.log import TopicPartition
from kbroker.metadata.zk_view import LiveBroker
from kbroker.replication.fetcher import ReplicaFetcherManager, fetcher_id
from kbroker.replication.throttle import ReplicationQuota
from zk_compat.jvm import java_int_hash

from .test_fetcher_add import LEADER, _follower_partition, _IdleLeader


def test_the_fetcher_id_is_kafkas() -> None:
    assert java_int_hash("hello") == 99162322            # java.lang.String.hashCode
    assert java_int_hash("\u00e9t\u00e9") == 0xE9 * 961 + ord("t") * 31 + 0xE9
    # 31 * 99162322 overflows an int to -1220935314; Kafka's Utils.abs takes it back
    assert fetcher_id(TopicPartition("hello", 0), 7) == 1220935314 % 7
    assert fetcher_id(TopicPartition("hello", 5), 1) == 0


def test_partitions_spread_over_num_replica_fetchers_and_again_on_a_resize(tmp_path, appender) -> None:
    async def main() -> None:
        leader = _IdleLeader()
        port = await leader.start()
        config = SimpleNamespace(replica_socket_timeout_ms=30_000, replica_fetch_wait_max_ms=500,
                                 replica_fetch_backoff_ms=100, replica_fetch_max_bytes=1 << 20,
                                 replica_fetch_min_bytes=1, replica_fetch_response_max_bytes=10 << 20,
                                 broker_rack="")
        broker = SimpleNamespace(broker_id=1, config=config, replicated_in=lambda size: None,
                                 quotas=SimpleNamespace(follower=ReplicationQuota()))
        manager = ReplicaFetcherManager(broker, 2)  # type: ignore[arg-type]
        parts = [_follower_partition(tmp_path, appender, TopicPartition("t", i)) for i in range(4)]
        where = LiveBroker(LEADER, "127.0.0.1", port, None)
        for p in parts:
            manager.follow(p, where)
        by_fetcher: dict[int, set[tuple[str, int]]] = {}
        for p in parts:
            by_fetcher.setdefault(fetcher_id(p.tp, 2), set()).add((p.tp.topic, p.tp.partition))
        assert set(manager.fetchers) == {(LEADER, 0), (LEADER, 1)} and len(by_fetcher) == 2
        for wanted in by_fetcher.values():  # each connection fetches its own partitions
            await leader.wait_for_fetch_of(wanted, 5)
        assert not any(f == {("t", i) for i in range(4)} for f in leader.fetches)
        assert all(manager.following(p.tp) == LEADER for p in parts)

        manager.resize(1)
        assert set(manager.fetchers) == {(LEADER, 0)}
        assert set(manager.fetchers[(LEADER, 0)].targets) == {p.tp for p in parts}
        await leader.wait_for_fetch_of({("t", i) for i in range(4)}, 5)  # one connection, all four
        manager.stop()
        assert leader.server is not None
        leader.server.close()

    asyncio.run(main())
