"""Fetches waiting in the purgatory on a replicated partition, through the real Fetch handler,
Partition and log: a consumer's fetch completes when the high watermark moves (a follower's fetch
reporting the new log end offset), not at the append below it; a follower's completes at the
append; and an answer given when the wait expires carries the offsets of that moment."""
from __future__ import annotations

import asyncio
from types import SimpleNamespace

from kbroker.config.broker import load_config
from kbroker.handlers import fetch as fetch_handler
from kbroker.log import LogConfig, PartitionLog, TopicPartition
from kbroker.replicas.replica_manager import ReplicaManager
from kbroker.replication.fetch_read import FetchRead
from kbroker.replication.partition import Partition
from kbroker.replication.purgatory import Purgatory
from kbroker.security.entity_configs import EntityConfigs
from kbroker.security.quotas import QuotaManager
from tests.log.helpers import make_batch

TP = TopicPartition("replicated", 0)
VERSION = 4  # no fetch sessions: every request names its partitions


class _Broker:
    """What the Fetch handler uses of a broker (its ``BrokerContext``): a real replica manager leading one
    partition, with its purgatory."""

    def __init__(self, partition: Partition) -> None:
        self.purgatory = Purgatory()
        self.replicas = ReplicaManager(1, load_config(), SimpleNamespace(), self.purgatory)
        self.replicas.partitions[partition.tp] = partition
        # no ACLs (every check passes), no quota configured
        self.security = SimpleNamespace(authorizer=None, quotas=QuotaManager(load_config(), EntityConfigs(None)))
        self.metrics = None
        self.topics = SimpleNamespace(exists=lambda topic, index: topic == TP.topic and index == TP.partition)

    def on_append(self, partition) -> None:
        self.replicas.on_append(partition)


def _request(replica_id: int, offset: int, max_wait_ms: int = 10_000):
    part = SimpleNamespace(partition=TP.partition, fetch_offset=offset, partition_max_bytes=1 << 20,
                           current_leader_epoch=0)
    return SimpleNamespace(replica_id=replica_id, max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=1 << 20,
                           isolation_level=0, topics=[SimpleNamespace(topic=TP.topic, partitions=[part])])


def _fetch(broker, replica_id: int, offset: int, max_wait_ms: int = 10_000):
    header = SimpleNamespace(api_version=VERSION)
    return fetch_handler.fetch(broker, header, _request(replica_id, offset, max_wait_ms), None)


def _only(response) -> dict:
    [topic] = response["responses"]
    [out] = topic["partitions"]
    return out


def _leader(tmp_path, appender) -> Partition:
    plog = PartitionLog(tmp_path / str(TP), TP, LogConfig(), appender)
    p = Partition(TP, plog, 1, single_replica=False)
    p.become_leader(0, [1, 2, 3], [1, 2, 3], zk_version=0, controller_epoch=1)
    return p


def _produce(broker, p: Partition, n: int) -> None:
    p.append_as_leader(make_batch(n), -1)
    broker.on_append(p)


def test_a_consumer_fetch_completes_when_the_high_watermark_moves(tmp_path, appender):
    async def main():
        p = _leader(tmp_path, appender)
        broker = _Broker(p)
        consumer = _fetch(broker, -1, 0)
        follower_2 = _fetch(broker, 2, 0)
        follower_3 = _fetch(broker, 3, 0)
        assert isinstance(consumer, asyncio.Future) and not consumer.done()

        _produce(broker, p, 5)  # written on the leader only: the followers' fetches answer, the consumer's waits
        assert follower_2.done() and follower_3.done() and not consumer.done()
        assert _only(follower_2.result())["records"].length > 0

        assert isinstance(_fetch(broker, 2, 5), asyncio.Future)  # 2 has the batch: the ISR still lacks 3
        assert p.high_watermark == 0 and not consumer.done()
        assert isinstance(_fetch(broker, 3, 5), asyncio.Future)  # now all of the ISR has it
        assert p.high_watermark == 5
        assert consumer.done(), "a consumer's fetch must complete when the high watermark moves"
        out = _only(consumer.result())
        assert out["high_watermark"] == 5 and out["records"].length > 0
        broker.purgatory.close()

    asyncio.run(main())


def test_a_waiting_follower_fetch_completes_at_the_append_with_the_current_high_watermark(tmp_path, appender):
    async def main():
        p = _leader(tmp_path, appender)
        broker = _Broker(p)
        _produce(broker, p, 3)
        _fetch(broker, 2, 3)
        _fetch(broker, 3, 3)
        assert p.high_watermark == 3
        waiting = _fetch(broker, 2, 3)  # caught up: waits for the next append
        assert not waiting.done()
        _produce(broker, p, 2)
        assert waiting.done()
        out = _only(waiting.result())
        assert out["records"].length > 0 and out["high_watermark"] == 3
        broker.purgatory.close()

    asyncio.run(main())


def test_an_expired_follower_fetch_answers_the_high_watermark_of_that_moment(tmp_path, appender):
    """The high watermark moving does not make a follower's fetch read again (nothing new to
    read for it), but the answer given at the timeout must not carry the value of the handler's
    first evaluation."""
    async def main():
        p = _leader(tmp_path, appender)
        broker = _Broker(p)
        _produce(broker, p, 4)
        waiting = _fetch(broker, 2, 4, max_wait_ms=30)  # 2 is caught up; 3 is not yet
        assert not waiting.done() and p.high_watermark == 0
        _fetch(broker, 3, 4)
        assert p.high_watermark == 4
        out = _only(await asyncio.wait_for(waiting, 5))
        assert out["records"] == b"" and out["high_watermark"] == 4
        broker.purgatory.close()

    asyncio.run(main())


def test_a_waiting_fetch_reads_again_only_when_what_it_reads_moved(tmp_path, appender, monkeypatch):
    async def main():
        p = _leader(tmp_path, appender)
        broker = _Broker(p)
        runs = []
        real_run = FetchRead.run

        def counting_run(self):
            runs.append(self.params.replica_id)
            return real_run(self)

        monkeypatch.setattr(FetchRead, "run", counting_run)
        consumer = _fetch(broker, -1, 0)
        assert runs == [-1]  # the handler's evaluation; the purgatory's first look does not read again
        broker.on_append(p)  # nothing moved
        assert runs == [-1]
        _produce(broker, p, 2)  # above the high watermark: nothing a consumer may read yet
        assert runs == [-1] and not consumer.done()
        broker.purgatory.close()

    asyncio.run(main())


def test_a_check_of_one_partition_looks_at_that_partition_alone(tmp_path, appender):
    """A fetch waiting on many partitions (a follower's session with thousands) is checked at every append and
    high watermark move of each: the check compares what the fetch reads of the partition that moved, not of
    all of them (before, every check of a 200-partition consumer fetch looked at 200 partitions), and the fetch
    is read again, and answered, once that partition has something for it."""
    async def main():
        tps = [TopicPartition("wide", i) for i in range(200)]
        leaders = []
        for tp in tps:
            plog = PartitionLog(tmp_path / str(tp), tp, LogConfig(), appender)
            p = Partition(tp, plog, 1, single_replica=False)
            p.become_leader(0, [1, 2], [1, 2], zk_version=0, controller_epoch=1)
            leaders.append(p)
        broker = _Broker(leaders[0])
        for p in leaders:
            broker.replicas.partitions[p.tp] = p
        broker.topics = SimpleNamespace(exists=lambda topic, index: topic == "wide")
        looked_at: list[TopicPartition] = []
        real = broker.replicas.partition

        def partition(tp):
            looked_at.append(tp)
            return real(tp)
        broker.replicas.partition = partition
        parts = [SimpleNamespace(partition=tp.partition, fetch_offset=0, partition_max_bytes=1 << 20,
                                 current_leader_epoch=0) for tp in tps]
        request = SimpleNamespace(replica_id=-1, max_wait_ms=10_000, min_bytes=1, max_bytes=1 << 20,
                                  isolation_level=0, topics=[SimpleNamespace(topic="wide", partitions=parts)])
        consumer = fetch_handler.fetch(broker, SimpleNamespace(api_version=VERSION), request, None)
        assert isinstance(consumer, asyncio.Future) and not consumer.done()

        looked_at.clear()
        _produce(broker, leaders[7], 3)  # below the high watermark (follower 2 lacks it): nothing for a consumer
        assert not consumer.done()
        assert looked_at.count(tps[7]) >= 1 and set(looked_at) == {tps[7]}, len(looked_at)

        looked_at.clear()
        broker.replicas.record_follower_fetch(2, [(tps[7], 3, 0)])  # follower 2 has it: the ISR does
        assert leaders[7].high_watermark == 3
        assert consumer.done(), "the high watermark moved: the consumer's fetch answers"
        [topic] = consumer.result()["responses"]
        assert [p["partition_index"] for p in topic["partitions"] if p["records"]] == [7]
        broker.purgatory.close()

    asyncio.run(main())
