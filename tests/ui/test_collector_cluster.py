"""`kbroker ui`'s collector against a real 3-broker ZooKeeper-mode cluster: a topic with three replicas, a
ZooKeeper-stored group (OffsetCommit v0, with the ids and owners nodes a ZooKeeper-era consumer writes) and a
Kafka-stored group that lags. The snapshot's values are what confluent-kafka's AdminClient and the brokers
answer; the ZooKeeper group's commit time moves on a commit of the same offset; a killed broker shows as down
with its partitions under-replicated, each log dir's free and total bytes are statvfs's, and an unreachable
ZooKeeper is one line in ``errors``, not an exception."""
from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec
from kazoo.client import KazooClient

from kbroker.tools.client import AdminClient as ToolsAdmin
from kbroker.ui.collector import Collector, CollectorOptions
from kbroker.ui.model import Snapshot
from tests.cluster.conftest import Cluster, wait_until
from tests.cluster.helpers import wait_until_served
from tests.integration.conftest import free_port
from tests.raw_client import request

TOPIC = "ui-orders"
PARTITIONS = 3
ZK_GROUP = "zk-era-group"
KAFKA_GROUP = "lagging-group"
ZK_CONSUMER = f"{ZK_GROUP}_host-1-{uuid.uuid4().hex[:8]}"
OFFSET_COMMIT, OFFSET_FETCH = 8, 9
SLACK = 256 << 20  # bytes a disk's free space may move between two measurements on this shared machine


@pytest.fixture(scope="module")
def ui_cluster(zookeeper_server, tmp_path_factory) -> Iterator[Cluster]:
    c = Cluster(zookeeper_server, tmp_path_factory.mktemp("ui-cluster")).with_status_listeners()
    try:
        c.start()
        yield c
    finally:
        c.stop()


def snapshot(collector: Collector) -> Snapshot:
    return asyncio.run(collector.snapshot())


def produce(bootstrap: str, n: int, start: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(start, start + n):
        producer.produce(TOPIC, value=b"v%d" % i, partition=i % PARTITIONS)
    assert producer.flush(30) == 0


def commit_v0(bootstrap: str, offsets: dict[int, int]) -> None:
    """OffsetCommit v0, as a ZooKeeper-era consumer (pykafka's balanced consumer, Kafka's 0.8 high-level one),
    to any broker: it writes ZooKeeper."""
    answer = request(bootstrap.split(",")[0], OFFSET_COMMIT, 0, {"group_id": ZK_GROUP, "topics": [
        {"name": TOPIC, "partitions": [{"partition_index": p, "committed_offset": o, "committed_metadata": ""}
                                       for p, o in offsets.items()]}]})
    assert all(p.error_code == 0 for t in answer.topics for p in t.partitions)


def fetch_v0(bootstrap: str) -> dict[int, int]:
    answer = request(bootstrap.split(",")[0], OFFSET_FETCH, 0, {"group_id": ZK_GROUP, "topics": [
        {"name": TOPIC, "partition_indexes": list(range(PARTITIONS))}]})
    return {p.partition_index: p.committed_offset for t in answer.topics for p in t.partitions}


def register_zk_consumer(zk: KazooClient) -> None:
    """The nodes a ZooKeeper-era consumer writes for itself: its id, and the partitions it owns."""
    zk.create(f"/consumers/{ZK_GROUP}/ids/{ZK_CONSUMER}", b'{"version":1,"subscription":{"ui-orders":1}}',
              ephemeral=True, makepath=True)
    for p in range(PARTITIONS):
        zk.create(f"/consumers/{ZK_GROUP}/owners/{TOPIC}/{p}", ZK_CONSUMER.encode(), ephemeral=True, makepath=True)


def consume_and_commit(bootstrap: str, count: int, while_member: Callable[[], None]) -> None:
    """A Kafka-stored group member that reads ``count`` records, commits, calls ``while_member``, and stops."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": KAFKA_GROUP, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "client.id": "lagging-client"})
    try:
        consumer.subscribe([TOPIC])
        got = 0
        deadline = time.monotonic() + 60
        while got < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                got += 1
        assert got == count
        consumer.commit(asynchronous=False)
        while_member()
    finally:
        consumer.close()


def check_member(snap: Snapshot, admin: AdminClient) -> None:
    """The Kafka group's one member as DescribeGroups answers it (confluent-kafka), holding every partition."""
    described = admin.describe_consumer_groups([KAFKA_GROUP])[KAFKA_GROUP].result()
    group = next(g for g in snap.groups if g.name == KAFKA_GROUP)
    assert (group.storage, group.state) == ("kafka", "Stable") and str(described.state).endswith("STABLE")
    [member], [theirs] = group.members, described.members
    assert (member.member_id, member.client_id, member.host) == (theirs.member_id, "lagging-client", theirs.host)
    assert member.assignment == tuple((TOPIC, p) for p in range(PARTITIONS)) == tuple(
        sorted((tp.topic, tp.partition) for tp in theirs.assignment.topic_partitions))


def check_against_admin(snap: Snapshot, bootstrap: str) -> None:
    """Leaders, replicas, ISR, earliest and latest offsets and the Kafka group's offsets, as Kafka's Admin API
    (confluent-kafka) answers them."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    meta = admin.list_topics(timeout=10)
    topic = next(t for t in snap.topics if t.name == TOPIC)
    assert topic.min_insync_replicas == 2 and not topic.internal
    for p in topic.partitions:
        theirs = meta.topics[TOPIC].partitions[p.partition]
        assert (p.leader, list(p.replicas), sorted(p.isr)) == (theirs.leader, theirs.replicas, sorted(theirs.isrs))
    tps = [KafkaTopicPartition(TOPIC, p) for p in range(PARTITIONS)]
    for spec, field in ((OffsetSpec.earliest(), "log_start"), (OffsetSpec.latest(), "log_end")):
        futures = admin.list_offsets({tp: spec for tp in tps}, request_timeout=10)
        answered = {tp.partition: f.result().offset for tp, f in futures.items()}
        assert {p.partition: getattr(p, field) for p in topic.partitions} == answered
    listed = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(KAFKA_GROUP)])[KAFKA_GROUP].result()
    committed = {tp.partition: tp.offset for tp in listed.topic_partitions if tp.topic == TOPIC}
    ours = {c.partition: c.offset for c in snap.commits if c.group == KAFKA_GROUP and c.topic == TOPIC}
    assert ours == committed and sum(committed.values()) == 30


def test_collector_reads_the_cluster_as_a_tool_does(ui_cluster: Cluster) -> None:
    bootstrap = ui_cluster.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3, config={"min.insync.replicas": "2"})])[TOPIC].result(30)
    wait_until_served(ui_cluster, TOPIC, PARTITIONS, isr=3)
    produce(bootstrap, 30, 0)

    zk = KazooClient(hosts=ui_cluster.zookeeper_connect)
    zk.start(timeout=10)
    metrics = tuple(f"http://127.0.0.1:{ui_cluster.status_port(b)}/metrics" for b in sorted(ui_cluster.brokers))
    collector = Collector(CollectorOptions(bootstrap, zookeeper=ui_cluster.zookeeper_connect,
                                           broker_metrics=metrics))
    try:
        first = snapshot(collector)
        assert first.rates is None  # a rate needs two scrapes

        register_zk_consumer(zk)
        commit_v0(bootstrap, {0: 4, 1: 5, 2: 6})
        committed_before = time.time_ns() // 1_000_000
        consume_and_commit(bootstrap, 30, lambda: check_member(snapshot(collector), admin))
        committed_after = time.time_ns() // 1_000_000
        produce(bootstrap, 20, 30)  # the Kafka group has stopped: it lags by these

        snap = snapshot(collector)
        assert snap.errors == ()
        assert [(b.id, b.up, b.port) for b in snap.brokers] == [
            (i, True, ui_cluster.brokers[i].port) for i in sorted(ui_cluster.brokers)]
        assert snap.controller == admin.list_topics(timeout=10).controller_id
        check_against_admin(snap, bootstrap)
        assert sum(p.log_end for t in snap.topics if t.name == TOPIC for p in t.partitions) == 50

        # Kafka-stored group: Empty (its member left); its commit times are the commits' own, from
        # __consumer_offsets, not this sample's time
        kafka_group = next(g for g in snap.groups if g.name == KAFKA_GROUP)
        assert (kafka_group.storage, kafka_group.state, kafka_group.members) == ("kafka", "Empty", ())
        kafka_commits = [c for c in snap.commits if c.group == KAFKA_GROUP]
        assert kafka_commits and all(committed_before <= c.timestamp_ms <= committed_after for c in kafka_commits)

        # ZooKeeper-stored group: the offsets OffsetFetch v0 answers, the owner, the nodes' mtimes
        zk_group = next(g for g in snap.groups if g.name == ZK_GROUP)
        assert (zk_group.storage, zk_group.state) == ("zookeeper", "Active")
        assert zk_group.owners == tuple((TOPIC, p, ZK_CONSUMER) for p in range(PARTITIONS))
        assert [(m.member_id, m.assignment) for m in zk_group.members] == [
            (ZK_CONSUMER, tuple((TOPIC, p) for p in range(PARTITIONS)))]
        zk_commits = {c.partition: c for c in snap.commits if c.group == ZK_GROUP}
        assert {p: c.offset for p, c in zk_commits.items()} == fetch_v0(bootstrap) == {0: 4, 1: 5, 2: 6}
        assert all(c.storage == "zookeeper" and c.timestamp_ms == zk.get(
            f"/consumers/{ZK_GROUP}/offsets/{TOPIC}/{p}")[1].mtime for p, c in zk_commits.items())

        # every broker's log dir, with the replicas' sizes; a partition's size is its leader's replica's
        assert sorted({d.broker for d in snap.log_dirs}) == sorted(ui_cluster.brokers)
        assert all(d.error is None and d.size_bytes == sum(s for _, _, s in d.partitions) for d in snap.log_dirs)
        for p in next(t for t in snap.topics if t.name == TOPIC).partitions:
            leader_dir = next(d for d in snap.log_dirs if d.broker == p.leader)
            assert p.size_bytes == dict(((t, q), s) for t, q, s in leader_dir.partitions)[(TOPIC, p.partition)] > 0
        # each dir's file system from its broker's /metrics, as statvfs says (free space moves with what else
        # writes on this disk between the broker's measurement and this one)
        assert all(d.path == str(ui_cluster.brokers[d.broker].dirs.resolve()) for d in snap.log_dirs)

        def disks_agree(s: Snapshot) -> bool:
            return all(d.free_bytes is not None and d.total_bytes == os.statvfs(d.path).f_blocks * os.statvfs(
                d.path).f_frsize and abs(d.free_bytes - os.statvfs(d.path).f_bavail * os.statvfs(d.path).f_frsize)
                < SLACK for d in s.log_dirs) and len(s.log_dirs) == len(ui_cluster.brokers)
        if not disks_agree(snap):  # free space moved more than SLACK meanwhile: until a round agrees
            wait_until(lambda: disks_agree(snapshot(collector)), 60, "log dirs' space as statvfs says", interval=1)

        # throughput between the two scrapes: 50 records were produced
        assert snap.rates is not None and snap.rates.messages_in > 0 and snap.rates.bytes_in > 0

        # a commit of the same offset moves the ZooKeeper commit time (Burrow's STALL needs it)
        commit_v0(bootstrap, {0: 4})
        again = snapshot(collector)
        moved = next(c for c in again.commits if c.group == ZK_GROUP and c.partition == 0)
        assert moved.offset == 4 and moved.timestamp_ms > zk_commits[0].timestamp_ms

        # kill a broker that is neither the controller nor the Kafka group's coordinator
        with ToolsAdmin(bootstrap) as tools:
            coordinator = tools.coordinator_node(KAFKA_GROUP).node_id
        victim = next(b for b in sorted(ui_cluster.brokers) if b not in (again.controller, coordinator))
        ui_cluster.brokers[victim].kill()

        def shows_it_down() -> Snapshot | None:
            s = snapshot(collector)
            down = [b for b in s.brokers if not b.up]
            parts = next(t for t in s.topics if t.name == TOPIC).partitions
            ok = [b.id for b in down] == [victim] and all(p.under_replicated and victim not in p.isr
                                                          and p.leader not in (victim, -1) for p in parts)
            return s if ok else None
        after = wait_until(shows_it_down, 60, f"broker {victim} down and its partitions under-replicated",
                           interval=0.5)
        assert isinstance(after, Snapshot)
        dead = next(b for b in after.brokers if b.id == victim)
        assert (dead.host, dead.port) == ("127.0.0.1", ui_cluster.brokers[victim].port)  # remembered
        assert any(f"broker metrics http://127.0.0.1:{ui_cluster.status_port(victim)}" in e for e in after.errors)
        assert next(g for g in after.groups if g.name == KAFKA_GROUP).storage == "kafka"
    finally:
        asyncio.run(collector.close())
        zk.stop()
        zk.close()


def test_an_unreachable_zookeeper_is_an_error_line(ui_cluster: Cluster) -> None:
    running = ",".join(b.bootstrap for b in ui_cluster.brokers.values() if b.running)
    nobody = f"127.0.0.1:{free_port()}/kbtest"  # nothing listens there
    collector = Collector(CollectorOptions(running, zookeeper=nobody, timeout=1.0))
    try:
        snap = snapshot(collector)
    finally:
        asyncio.run(collector.close())
    assert [e for e in snap.errors if e.startswith(f"ZooKeeper {nobody}")], snap.errors
    # the brokers were still read: without ZooKeeper, up is what Metadata lists
    assert {b.id for b in snap.brokers if b.up} == {i for i, b in ui_cluster.brokers.items() if b.running}
    assert {t.name for t in snap.topics} >= {"__consumer_offsets"}
    assert snap.controller == AdminClient({"bootstrap.servers": running}).list_topics(timeout=10).controller_id
