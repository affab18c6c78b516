"""A failed log dir moves leadership (KIP-112), on three broker processes with two log dirs each over a real
ZooKeeper, under an idempotent acks=all confluent-kafka producer: one broker's dir is replaced by a file (its next
offset checkpoint fails, as a dead disk's would), the broker writes Kafka's log dir event notification, the
controller asks it which replicas are offline and moves their leaderships to the ISR's other members; the other
dir keeps serving, DescribeLogDirs (kafka-python) shows the dir with KAFKA_STORAGE_ERROR, Metadata lists the
replica offline, and every acknowledged message reads back once, in order."""
from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.admin import KafkaAdminClient

from kazoo_bridge.local_server import ZooKeeperServer
from zk_compat import layout
from zk_compat.znodes import LogDirEventNotificationZNode

from .conftest import Cluster, wait_until
from .helpers import consume_all, partition_state, wait_until_served
from .test_replication import _SteadyProducer

KAFKA_STORAGE_ERROR = 56
TOPIC = "disks"
MOVE_S = 10  # "within seconds": the notice, one LeaderAndIsr round trip, one state write per partition


@pytest.fixture
def jbod_cluster(zookeeper_server: ZooKeeperServer, tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(zookeeper_server, tmp_path, overrides={"log.flush.offset.checkpoint.interval.ms": "500",
                                                       "auto.leader.rebalance.enable": "false"})
    for broker in c.brokers.values():
        broker.overrides["log.dirs"] = f"{broker.dirs}-a,{broker.dirs}-b"
    try:
        c.start()
        yield c
    finally:
        c.stop()


def _dir_of(broker, partition: int) -> Path:
    found = [d for d in (Path(f"{broker.dirs}-a"), Path(f"{broker.dirs}-b")) if (d / f"{TOPIC}-{partition}").is_dir()]
    assert len(found) == 1, found
    return found[0]


def test_failed_log_dir_moves_its_leaders_and_loses_nothing(jbod_cluster: Cluster):
    c = jbod_cluster
    controller_id = layout.get_controller_id(c.store)
    victim_id = next(b for b in sorted(c.brokers) if b != controller_id)
    others = [b for b in sorted(c.brokers) if b != victim_id]
    # the victim is the preferred leader of partitions 0-3 and a follower of 4-5; with two dirs each holds about half
    assignment = [[victim_id, *others], [victim_id, *reversed(others)], [victim_id, *others],
                  [victim_id, *reversed(others)], [others[0], victim_id, others[1]], [others[1], victim_id, others[0]]]
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    admin.create_topics([NewTopic(TOPIC, num_partitions=6, replication_factor=-1, replica_assignment=assignment,
                                  config={"min.insync.replicas": "2"})], operation_timeout=30)[TOPIC].result(30)
    wait_until_served(c, TOPIC, 6, 3)
    victim = c.brokers[victim_id]
    failing = _dir_of(victim, 0)
    lost = {p for p in range(6) if _dir_of(victim, p) == failing}
    kept = set(range(6)) - lost
    assert {0} <= lost and kept & {1, 2, 3}, f"partitions {sorted(lost)} in {failing}: want both dirs used"

    producer = _SteadyProducer(c.bootstrap, TOPIC, 6)
    producer.start()
    try:
        wait_until(lambda: all(len(v) > 30 for v in producer.acked.values()), timeout=60,
                   message="acknowledged writes on every partition")
        controller = c.brokers[controller_id]
        os.kill(controller.proc.pid, signal.SIGSTOP)  # holds the notice in ZooKeeper until we have read it
        try:
            failing.rename(failing.with_name(failing.name + ".dead"))
            failing.write_bytes(b"")  # the dir is now a file: every write under it fails (ENOTDIR)
            names = wait_until(lambda: c.store.get_children(LogDirEventNotificationZNode.path()), timeout=5,
                               interval=0.05, message="the log dir event notification")
            data = [c.store.get(f"{LogDirEventNotificationZNode.path()}/{n}")[0] for n in names]
        finally:
            os.kill(controller.proc.pid, signal.SIGCONT)
        resumed = time.monotonic()
        assert len(names) == 1 and names[0].startswith("log_dir_event_") and len(names[0]) == len("log_dir_event_") + 10
        assert data == [b'{"version":1,"broker":%d,"event":1}' % victim_id]

        def moved() -> bool:
            states = {p: partition_state(c, TOPIC, p) for p in range(6)}
            return all(states[p].leader not in (-1, victim_id) and victim_id not in states[p].isr for p in lost)
        wait_until(moved, timeout=MOVE_S, interval=0.05, message="the failed dir's partitions led elsewhere")
        took = time.monotonic() - resumed
        wait_until(lambda: c.store.get_children(LogDirEventNotificationZNode.path()) == [], timeout=5,
                   message="the controller deleting the notice")
        for p in kept & {1, 2, 3}:  # the dir still online keeps its leaders
            assert partition_state(c, TOPIC, p).leader == victim_id

        expected = {p: {victim_id} if p in lost else set() for p in range(6)}
        wait_until(lambda: _offline_replicas(victim.bootstrap) == expected, timeout=10,
                   message="Metadata listing the failed dir's replicas offline")
        kafka_admin = KafkaAdminClient(bootstrap_servers=victim.bootstrap)
        try:
            described = kafka_admin.describe_log_dirs(brokers=[victim_id])
        finally:
            kafka_admin.close()
        total = sum(map(len, producer.acked.values()))
        wait_until(lambda: all(len(v) > 60 for v in producer.acked.values())
                   and sum(map(len, producer.acked.values())) > total + 300, timeout=60,
                   message="writes to every partition acknowledged after the move")
    finally:
        producer.finish()
    print(f"leaders of {sorted(lost)} moved {took:.2f} s after the controller resumed")
    assert took < MOVE_S

    assert [d["broker"] for d in described] == [victim_id]
    dirs = {d["log_dir"]: d for d in described[0]["log_dirs"]}
    assert dirs[str(failing)]["error_code"] == KAFKA_STORAGE_ERROR and dirs[str(failing)]["topics"] == []
    online = next(d for path, d in dirs.items() if path != str(failing))
    assert online["error_code"] == 0

    assert producer.failed == []
    acked = {p: sorted(v) for p, v in producer.acked.items()}
    got = consume_all(c.bootstrap, TOPIC, 6, sum(map(len, acked.values())), timeout=90)
    for p in range(6):
        offsets = [o for o, _ in got[p]]
        values = [int(v) for _, v in got[p]]
        assert offsets == sorted(set(offsets)), f"partition {p}: offsets repeat or go back"
        assert values == sorted(set(values)), f"partition {p}: a message twice or out of order"
        assert values == acked[p], f"partition {p}: {len(set(acked[p]) - set(values))} acknowledged lost"

    # a new controller asks every broker afresh: the replicas stay offline and are never elected
    c.brokers[controller_id].stop()
    wait_until(lambda: layout.get_controller_id(c.store) not in (None, controller_id), timeout=30,
               message="a new controller")
    survivor = next(b for i, b in c.brokers.items() if i not in (controller_id, victim_id))
    expected = {p: {victim_id, controller_id} if p in lost else {controller_id} for p in range(6)}
    wait_until(lambda: _offline_replicas(survivor.bootstrap) == expected, timeout=20,
               message="the new controller's Metadata listing the failed dir's replicas offline")
    assert all(partition_state(c, TOPIC, p).leader not in (-1, victim_id, controller_id) for p in lost)


def _offline_replicas(bootstrap: str) -> dict[int, set[int]]:
    """partition -> offline replicas, from kafka-python's Metadata."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        [topic] = admin.describe_topics([TOPIC])
    finally:
        admin.close()
    return {p["partition_index"]: set(p["offline_replicas"]) for p in topic["partitions"]}
