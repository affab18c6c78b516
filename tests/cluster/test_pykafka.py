"""pykafka 2.8 (the ZooKeeper-era client) against three brokers over a real ZooKeeper: the client
finds brokers through ZooKeeper, two BalancedConsumers (ZooKeeper-managed group: they write
/consumers/<group>/ids and owners themselves) share a 4-partition topic, every message is read
once, and their commits (OffsetCommit v1, __consumer_offsets) reach /consumers/<group>/offsets
through the broker's optional ZooKeeper mirror."""
from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest

from tests.integration.helpers import create_topic
from tests.integration.test_legacy_clients import import_pykafka

from .conftest import Cluster, wait_until

MIRROR_KEY = "offsets.zookeeper.mirror.enable"
N = 400


@pytest.fixture(scope="module")
def pk_cluster(zookeeper_server, tmp_path_factory) -> Iterator[Cluster]:
    overrides = {MIRROR_KEY: "true", "offsets.zookeeper.mirror.interval.ms": "500"}
    c = Cluster(zookeeper_server, tmp_path_factory.mktemp("pykafka-cluster"), overrides=overrides)
    try:
        c.start()
        yield c
    finally:
        c.stop()


def _balanced(client, topic: str, group: bytes, zk: str):
    from pykafka.common import OffsetType

    return client.topics[topic].get_balanced_consumer(
        consumer_group=group, managed=False, use_rdkafka=False, zookeeper_connect=zk,
        auto_offset_reset=OffsetType.EARLIEST, auto_commit_enable=False, consumer_timeout_ms=200,
        rebalance_backoff_ms=500)


def _ready(client, topic: str) -> bool:
    """The topic with a live leader for each partition, as pykafka sees it."""
    from pykafka.exceptions import LeaderNotFoundError

    try:
        client.update_cluster()
        return len(client.topics[topic].partitions) == 4
    except (LeaderNotFoundError, KeyError):
        return False


def test_balanced_consumers_share_a_topic(pk_cluster):
    pykafka = import_pykafka()
    from pykafka.utils import VERSIONS_CACHE

    VERSIONS_CACHE.clear()
    topic, group = f"pk-{uuid.uuid4().hex[:8]}", b"pk-group"
    create_topic(pk_cluster.bootstrap, topic, partitions=4)
    zk = pk_cluster.zookeeper_connect
    producer_client = pykafka.KafkaClient(zookeeper_hosts=zk, broker_version="0.10.1")
    wait_until(lambda: _ready(producer_client, topic) and len(producer_client.brokers) == 3, 30,
               "pykafka to see the topic's leaders on three brokers", interval=0.5)
    values = {b"message %d" % i for i in range(N)}
    with producer_client.topics[topic].get_sync_producer(min_queued_messages=1) as producer:
        for v in sorted(values):
            producer.produce(v, partition_key=v)

    a = _balanced(pykafka.KafkaClient(zookeeper_hosts=zk, broker_version="0.10.1"), topic, group, zk)
    b = _balanced(pykafka.KafkaClient(zookeeper_hosts=zk, broker_version="0.10.1"), topic, group, zk)
    try:
        def split() -> bool:
            pa = {p.id for p in a.partitions.values()}
            pb = {p.id for p in b.partitions.values()}
            return len(pa) == 2 and len(pb) == 2 and pa | pb == {0, 1, 2, 3}

        wait_until(split, 20, "the two members to hold two partitions each", interval=0.2)
        got: dict[str, list[bytes]] = {"a": [], "b": []}
        deadline = time.monotonic() + 60
        while sum(map(len, got.values())) < N and time.monotonic() < deadline:
            for name, consumer in (("a", a), ("b", b)):
                for _ in range(100):
                    m = consumer.consume(block=False)
                    if m is None:
                        break
                    got[name].append(m.value)
            time.sleep(0.02)
        everything = got["a"] + got["b"]
        assert len(everything) == N and set(everything) == values, \
            f"{len(everything)} read, {len(set(everything))} distinct"
        assert got["a"] and got["b"]
        assert split(), "the assignment moved while consuming"
        a.commit_offsets()
        b.commit_offsets()

        store = pk_cluster.store
        ids = store.get_children(f"/consumers/{group.decode()}/ids")
        assert len(ids) == 2
        # pykafka 2.8 on Python 3 formats the topic's bytes name into the path ("b'<topic>'") and
        # names owner nodes "<leader id>-<partition>": its layout, written by the client itself
        (topic_dir,) = store.get_children(f"/consumers/{group.decode()}/owners")
        assert topic in topic_dir
        owners = store.get_children(f"/consumers/{group.decode()}/owners/{topic_dir}")
        assert sorted(int(slug.split("-")[1]) for slug in owners) == [0, 1, 2, 3]
        owner_ids = {store.get(f"/consumers/{group.decode()}/owners/{topic_dir}/{slug}")[0].decode()
                     for slug in owners}
        assert owner_ids == set(ids)


        def mirrored():
            out = {}
            for p in range(4):
                path = f"/consumers/{group.decode()}/offsets/{topic}/{p}"
                if store.exists(path) is None:
                    return None
                out[p] = int(store.get(path)[0])
            return out

        offsets = wait_until(lambda: (o := mirrored()) and sum(o.values()) == N and o, 20,
                             "the committed offsets under /consumers/<group>/offsets")
        assert all(v > 0 for v in offsets.values())
    finally:
        a.stop()
        b.stop()


def test_confluent_kafka_commits_are_mirrored_into_zookeeper(pk_cluster):
    """With offsets.zookeeper.mirror.enable, a modern group's commits (OffsetCommit to
    __consumer_offsets) appear under /consumers/<group>/offsets as decimal strings within the
    mirror interval (500 ms here), where ZooKeeper-era monitors look."""
    from confluent_kafka import Consumer, TopicPartition

    topic = f"mirrored-{uuid.uuid4().hex[:8]}"
    create_topic(pk_cluster.bootstrap, topic, partitions=2)
    consumer = Consumer({"bootstrap.servers": pk_cluster.bootstrap, "group.id": "modern", "enable.auto.commit": False})
    committed_at = time.monotonic()
    consumer.commit(offsets=[TopicPartition(topic, 0, 11), TopicPartition(topic, 1, 22)], asynchronous=False)
    store = pk_cluster.store

    def mirrored():
        out = []
        for p in (0, 1):
            path = f"/consumers/modern/offsets/{topic}/{p}"
            if store.exists(path) is None:
                return None
            out.append(store.get(path)[0])
        return out
    assert wait_until(mirrored, 10, "the mirrored offsets", interval=0.05) == [b"11", b"22"]
    assert time.monotonic() - committed_at < 5
    consumer.commit(offsets=[TopicPartition(topic, 0, 12)], asynchronous=False)
    wait_until(lambda: store.get(f"/consumers/modern/offsets/{topic}/0")[0] == b"12", 10, "the update mirrored")
    consumer.close()
