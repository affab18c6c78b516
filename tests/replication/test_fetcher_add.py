"""A follower's fetch loop gaining a partition while its Fetch waits at the leader: the new
partition is fetched at once, not once the leader gives up waiting (replica.fetch.wait.max.ms),
which would hold every acks=all write to it that long."""
from __future__ import annotations

import asyncio
import struct
from types import SimpleNamespace

from kbroker.log import LogConfig, PartitionLog, TopicPartition
from kbroker.metadata.zk_view import LiveBroker
from kbroker.protocol.codec import decode_request
from kbroker.replication.fetcher import LeaderFetcher
from kbroker.replication.partition import Partition
from kbroker.replication.throttle import ReplicationQuota

LEADER = 9


class _IdleLeader:
    """Takes Fetch requests and, like a leader with nothing new, answers none of them."""

    def __init__(self) -> None:
        self.fetches: list[set[tuple[str, int]]] = []
        self.changed = asyncio.Event()
        self.server: asyncio.AbstractServer | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                size = struct.unpack(">i", await reader.readexactly(4))[0]
                header, body = decode_request(memoryview(await reader.readexactly(size)))
                if header.api_key == 1:
                    self.fetches.append({(t.topic, p.partition) for t in body.topics for p in t.partitions})
                    self.changed.set()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def wait_for_fetch_of(self, wanted: set[tuple[str, int]], timeout: float) -> None:
        async def seen() -> None:
            while not any(wanted <= f for f in self.fetches):
                self.changed.clear()
                await self.changed.wait()
        await asyncio.wait_for(seen(), timeout)


def _follower_partition(tmp_path, appender, tp: TopicPartition) -> Partition:
    plog = PartitionLog(tmp_path / str(tp), tp, LogConfig(), appender)
    p = Partition(tp, plog, 1, single_replica=False)
    p.become_follower(LEADER, 0, [LEADER, 1], [LEADER, 1], zk_version=0, controller_epoch=1)
    return p


def start_fetcher(tmp_path, appender, port: int, wait_ms: int, backoff_ms: int):
    """A LeaderFetcher of broker 1 towards the fake leader on ``port``, and two follower partitions a-0, b-0
    (not added yet)."""
    config = SimpleNamespace(replica_socket_timeout_ms=30_000, replica_fetch_wait_max_ms=wait_ms,
                             replica_fetch_backoff_ms=backoff_ms, replica_fetch_max_bytes=1 << 20,
                             replica_fetch_min_bytes=1, replica_fetch_response_max_bytes=10 << 20,
                             broker_rack="")
    a = _follower_partition(tmp_path, appender, TopicPartition("a", 0))
    b = _follower_partition(tmp_path, appender, TopicPartition("b", 0))
    follower = SimpleNamespace(broker_id=1, config=config, replicated_in=lambda size: None,
                               quotas=SimpleNamespace(follower=ReplicationQuota()))
    fetcher = LeaderFetcher(follower, LiveBroker(LEADER, "127.0.0.1", port, None))
    return fetcher, a, b


def test_a_partition_added_during_a_waiting_fetch_is_fetched_at_once(tmp_path, appender):
    async def main():
        leader = _IdleLeader()
        port = await leader.start()
        fetcher, a, b = start_fetcher(tmp_path, appender, port, wait_ms=30_000, backoff_ms=30_000)
        try:
            fetcher.add(a)
            await leader.wait_for_fetch_of({("a", 0)}, 5)  # now waiting at the "leader" for 30 s
            fetcher.add(b)
            await leader.wait_for_fetch_of({("a", 0), ("b", 0)}, 5)
        finally:
            fetcher.stop()
            leader.server.close()

    asyncio.run(main())


def test_a_burst_of_added_partitions_cuts_the_waiting_fetch_a_few_times_not_once_each(tmp_path, appender):
    """A LeaderAndIsr adds thousands of partitions a few at a time; each cut of the waiting Fetch costs a full
    fetch of every partition followed from that leader, so a burst is fetched with a cut per CUT_INTERVAL_S."""
    async def main():
        leader = _IdleLeader()
        port = await leader.start()
        fetcher, a, _ = start_fetcher(tmp_path, appender, port, wait_ms=30_000, backoff_ms=30_000)
        try:
            fetcher.add(a)
            await leader.wait_for_fetch_of({("a", 0)}, 5)
            added = set()
            for i in range(40):  # 40 partitions over about 0.3 s, while a Fetch waits at the leader
                tp = TopicPartition("burst", i)
                fetcher.add(_follower_partition(tmp_path, appender, tp))
                added.add((tp.topic, tp.partition))
                await asyncio.sleep(0.008)
            await leader.wait_for_fetch_of(added, 5)
            assert len(leader.fetches) <= 8, len(leader.fetches)  # 40 with a cut per added partition
        finally:
            fetcher.stop()
            leader.server.close()

    asyncio.run(main())
