"""A follower's incremental fetch session skips its quiet partitions (kbroker.replication.quiet), through the real
Fetch handler, fetch sessions, replica manager, purgatory, Partition and logs: a partition at the log end with
nothing to send is not read again until it moves; the follower stays caught up on it by the session's fetches
(no ISR shrink on a quiet partition); an append to a quiet partition wakes the session's parked fetch, whose
answer carries it; a partition the session forgets is caught up no longer."""
from __future__ import annotations

import asyncio
from types import SimpleNamespace

from kbroker.config.broker import load_config
from kbroker.handlers import fetch as fetch_handler
from kbroker.handlers.fetch_sessions import FetchSessionCache
from kbroker.log import LogConfig, PartitionLog, TopicPartition
from kbroker.replicas.replica_manager import ReplicaManager
from kbroker.replication.partition import Partition
from kbroker.replication.purgatory import Purgatory
from kbroker.security.entity_configs import EntityConfigs
from kbroker.security.quotas import QuotaManager
from tests.log.helpers import make_batch

TOPIC = "quiet"
FOLLOWER = 2
VERSION = 12
MAX_LAG_MS = 30_000


class _Leader:
    """What the Fetch handler uses of a broker: a real replica manager leading ``count`` partitions."""

    def __init__(self, tmp_path, appender, count: int) -> None:
        self.purgatory = Purgatory()
        self.replicas = ReplicaManager(1, load_config(), SimpleNamespace(), self.purgatory)
        self.partitions = []
        for i in range(count):
            tp = TopicPartition(TOPIC, i)
            p = Partition(tp, PartitionLog(tmp_path / str(tp), tp, LogConfig(), appender), 1, single_replica=False)
            p.become_leader(0, [1, FOLLOWER], [1, FOLLOWER], zk_version=0, controller_epoch=1)
            self.replicas.partitions[tp] = p
            self.partitions.append(p)
        self.security = SimpleNamespace(authorizer=None, quotas=QuotaManager(load_config(), EntityConfigs(None)))
        self.metrics = None
        self.fetch_sessions = FetchSessionCache()
        self.topics = SimpleNamespace(exists=lambda topic, index: topic == TOPIC)
        self.reads: list[int] = []  # the partitions read, in order
        for p in self.partitions:
            self._count_reads(p)

    def _count_reads(self, p: Partition) -> None:
        real = p.read

        def read(*args, **kwargs):
            self.reads.append(p.tp.partition)
            return real(*args, **kwargs)
        p.read = read  # type: ignore[method-assign]

    def produce(self, index: int, n: int = 1) -> None:
        p = self.partitions[index]
        p.append_as_leader(make_batch(n), -1)
        self.replicas.on_append(p)


class _Follower:
    """A follower's fetch session: a full fetch, then incremental ones naming the partitions whose offset moved."""

    def __init__(self, leader: _Leader) -> None:
        self.leader = leader
        self.session_id = 0
        self.epoch = 0
        self.offsets = {p.tp.partition: 0 for p in leader.partitions}

    def fetch(self, named: dict[int, int] | None = None, forgotten: list[int] = (), max_wait_ms: int = 0):
        """``named``: {partition: fetch offset} to send (every partition on the full fetch)."""
        if self.epoch == 0:
            named = dict(self.offsets)
        named = named or {}
        self.offsets.update(named)
        parts = [SimpleNamespace(partition=i, fetch_offset=o, partition_max_bytes=1 << 20, current_leader_epoch=0,
                                 log_start_offset=-1) for i, o in sorted(named.items())]
        request = SimpleNamespace(
            replica_id=FOLLOWER, max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
            session_id=self.session_id, session_epoch=self.epoch,
            topics=[SimpleNamespace(topic=TOPIC, partitions=parts)] if parts else [],
            forgotten_topics_data=[SimpleNamespace(topic=TOPIC, partitions=list(forgotten))] if forgotten else [],
            rack_id="")
        answer = fetch_handler.fetch(self.leader, SimpleNamespace(api_version=VERSION), request, None)
        return answer

    def took(self, response) -> dict[int, dict]:
        """The session learns the answer's id; each answered partition, by index."""
        assert response["error_code"] == 0
        self.session_id = response["session_id"]
        self.epoch = self.epoch + 1
        return {out["partition_index"]: out for topic in response["responses"] for out in topic["partitions"]}


def test_an_incremental_fetch_reads_only_what_moved(tmp_path, appender):
    async def main():
        leader = _Leader(tmp_path, appender, 50)
        follower = _Follower(leader)
        assert len(follower.took(follower.fetch())) == 50  # the full fetch answers every partition
        assert len(leader.reads) == 50
        leader.reads.clear()
        assert follower.took(follower.fetch()) == {}
        assert leader.reads == []  # all 50 at the log end with nothing to send: none read again
        leader.produce(7, 3)
        answered = follower.took(follower.fetch())
        assert list(answered) == [7] and answered[7]["records"]
        assert leader.reads == [7]
        leader.reads.clear()
        # the follower appended: it names partition 7 at its new offset, which moves the high watermark
        answered = follower.took(follower.fetch({7: 3}))
        assert list(answered) == [7] and answered[7]["high_watermark"] == 3
        leader.reads.clear()
        assert follower.took(follower.fetch()) == {}  # the high watermark told, partition 7 is quiet again
        assert leader.reads == []
    asyncio.run(main())


def test_a_quiet_partition_keeps_its_follower_in_sync(tmp_path, appender):
    async def main():
        leader = _Leader(tmp_path, appender, 4)
        follower = _Follower(leader)
        follower.took(follower.fetch())
        p = leader.partitions[0]
        started = p.followers[FOLLOWER].caught_up_ms()
        follower.took(follower.fetch())
        # the session's fetches stand for fetches of the quiet partition: caught up at the last of them
        later = started + MAX_LAG_MS + 1
        leader.replicas.partitions[p.tp].followers[FOLLOWER].resting_on.fetched(later, leader.replicas.partitions.get)
        assert p.lagging_isr_members(later + 1, MAX_LAG_MS) == []
        # an append: the follower was caught up at the session's last fetch, and lags from there
        leader.produce(0)
        assert p.lagging_isr_members(later + MAX_LAG_MS, MAX_LAG_MS) == []
        assert p.lagging_isr_members(later + MAX_LAG_MS + 1, MAX_LAG_MS) == [FOLLOWER]
    asyncio.run(main())


def test_a_forgotten_partition_is_caught_up_no_longer(tmp_path, appender):
    async def main():
        leader = _Leader(tmp_path, appender, 2)
        follower = _Follower(leader)
        follower.took(follower.fetch())
        follower.took(follower.fetch())
        p0, p1 = leader.partitions
        session = p0.followers[FOLLOWER].resting_on
        assert session is not None and p1.followers[FOLLOWER].resting_on is session
        follower.took(follower.fetch(forgotten=[1]))
        assert p1.followers[FOLLOWER].resting_on is None
        forgotten_at = p1.followers[FOLLOWER].caught_up_ms()
        session.fetched(forgotten_at + 10 * MAX_LAG_MS, leader.replicas.partitions.get)  # the session goes on without 1
        leader.produce(1)
        assert p1.lagging_isr_members(forgotten_at + MAX_LAG_MS + 1, MAX_LAG_MS) == [FOLLOWER]
        assert p0.lagging_isr_members(forgotten_at + 10 * MAX_LAG_MS, MAX_LAG_MS) == []
    asyncio.run(main())


def test_an_append_to_a_quiet_partition_wakes_the_sessions_parked_fetch(tmp_path, appender):
    async def main():
        leader = _Leader(tmp_path, appender, 20)
        follower = _Follower(leader)
        follower.took(follower.fetch())
        parked = follower.fetch(max_wait_ms=60_000)
        assert isinstance(parked, asyncio.Future) and not parked.done()
        leader.produce(13, 2)
        assert parked.done()  # woken by the append itself, not by the 60 s wait
        answered = follower.took(parked.result())
        assert list(answered) == [13] and answered[13]["records"]
        assert len(leader.purgatory) == 0
    asyncio.run(main())


def test_a_moved_log_start_offset_is_answered(tmp_path, appender):
    async def main():
        leader = _Leader(tmp_path, appender, 3)
        follower = _Follower(leader)
        leader.produce(2, 5)
        follower.took(follower.fetch())
        follower.took(follower.fetch({2: 5}))
        assert follower.took(follower.fetch()) == {}
        p = leader.partitions[2]
        p.log.delete_records_before(3)  # DeleteRecords: no append, no high watermark move
        answered = follower.took(follower.fetch())
        assert list(answered) == [2] and answered[2]["log_start_offset"] == 3
    asyncio.run(main())


def test_a_new_session_leaves_nothing_resting_on_the_old_one(tmp_path, appender):
    async def main():
        leader = _Leader(tmp_path, appender, 10)
        follower = _Follower(leader)
        follower.took(follower.fetch())
        follower.took(follower.fetch())
        assert len(leader.replicas.quiet) == 10  # every partition has a session resting on it
        old = leader.partitions[0].followers[FOLLOWER].resting_on
        follower.epoch = 0  # the follower starts over (a lost connection): a full fetch closes its session
        follower.took(follower.fetch())
        assert all(p.followers[FOLLOWER].resting_on is not old for p in leader.partitions)
        follower.took(follower.fetch())
        assert len(leader.replicas.quiet) == 10  # on the new session alone
        new = leader.partitions[0].followers[FOLLOWER].resting_on
        assert new is not None and new is not old
    asyncio.run(main())


def test_a_partition_named_at_the_offset_it_rests_at_is_not_read(tmp_path, appender):
    async def main():
        leader = _Leader(tmp_path, appender, 5)
        follower = _Follower(leader)
        follower.took(follower.fetch())
        leader.reads.clear()
        assert follower.took(follower.fetch({3: 0})) == {}
        assert leader.reads == []
    asyncio.run(main())
