"""Replication over a real ZooKeeper and three broker processes: ISR and high watermark, acks=all,
leader failover under an idempotent producer, a follower that stops fetching (SIGSTOP), and
controller failover while topics are created and deleted.

The brokers run with replica.lag.time.max.ms=2000 so a stopped follower leaves the ISR well
before its ZooKeeper session (6 s) expires."""
from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kbroker.coordinator.group.offsets_log import partition_for
from zk_compat import layout
from zk_compat.znodes import BrokerIdZNode, TopicZNode

from .conftest import SESSION_TIMEOUT_MS, Cluster, wait_until
from .helpers import (
    consume_all as _consume_all,
    partition_state as _state,
    segment_bytes as _segment_bytes,
    wait_until_served,
)

LAG_MS = 2000


@pytest.fixture(scope="module")
def cluster(zookeeper_server, tmp_path_factory) -> Iterator[Cluster]:
    c = Cluster(zookeeper_server, tmp_path_factory.mktemp("replication"),
                overrides={"replica.lag.time.max.ms": str(LAG_MS), "replica.fetch.backoff.ms": "200",
                           "offsets.topic.replication.factor": "3", "offsets.topic.num.partitions": "3"})
    try:
        c.start()
        yield c
    finally:
        c.stop()


def _create(cluster: Cluster, topic: str, partitions: int, min_isr: int = 2) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=3,
                                  config={"min.insync.replicas": str(min_isr)})])[topic].result(15)
    wait_until(lambda: all((s := layout.get_partition_state(cluster.store, topic, p)) and len(s[0].isr) == 3
                           for p in range(partitions)), message=f"{topic}: every partition with an ISR of 3")
    wait_until_served(cluster, topic, partitions, 3)


def test_acks_all_replicates_byte_for_byte_to_every_isr_member(cluster):
    topic = "replicated"
    _create(cluster, topic, 3)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5})
    failures = []
    for i in range(3000):
        producer.produce(topic, value=f"m{i}".encode(), partition=i % 3,
                         on_delivery=lambda err, msg: err and failures.append(err))
        if i % 500 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0
    assert failures == []
    for p in range(3):
        state = _state(cluster, topic, p)
        assert sorted(state.isr) == [1, 2, 3]
        leader = cluster.brokers[state.leader]
        wait_until(lambda: all(_segment_bytes(b, topic, p) == _segment_bytes(leader, topic, p)
                               for b in cluster.brokers.values()), message=f"{topic}-{p} identical on all replicas")
        assert len(_segment_bytes(leader, topic, p)) > 1000 * 8  # 1000 records of a few bytes each
    got = _consume_all(cluster.bootstrap, topic, 3, 3000)
    for p in range(3):
        assert [v for _, v in got[p]] == [f"m{i}".encode() for i in range(p, 3000, 3)]


class _SteadyProducer(threading.Thread):
    """An idempotent acks=all producer writing numbered messages until stopped; remembers which
    numbers were acknowledged on which partition."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        super().__init__(daemon=True)
        self.topic = topic
        self.partitions = partitions
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                                  "linger.ms": 2, "message.timeout.ms": 120000, "retry.backoff.ms": 100,
                                  "topic.metadata.refresh.interval.ms": 1000})
        self.acked: dict[int, list[int]] = {p: [] for p in range(partitions)}
        self.failed: list[str] = []
        self.sent = 0
        self._halt = threading.Event()

    def _delivered(self, err, msg) -> None:
        if err is not None:
            self.failed.append(str(err))
        else:
            self.acked[msg.partition()].append(int(msg.value()))

    def run(self) -> None:
        while not self._halt.is_set():
            for _ in range(20):
                try:
                    self.producer.produce(self.topic, value=str(self.sent).encode(),
                                          partition=self.sent % self.partitions, on_delivery=self._delivered)
                except BufferError:
                    break
                self.sent += 1
            self.producer.poll(0.01)

    def finish(self) -> None:
        self._halt.set()
        self.join(10)
        assert self.producer.flush(120) == 0, "messages still undelivered after 120 s"


def _kcat_leaders(bootstrap: str, topic: str) -> dict[int, int]:
    out = subprocess.run(["kcat", "-b", bootstrap, "-L", "-t", topic], capture_output=True, text=True, timeout=30,
                         check=True).stdout
    leaders = {}
    for line in out.splitlines():
        words = line.split()
        if words[:1] == ["partition"]:
            leaders[int(words[1].rstrip(","))] = int(words[3].rstrip(","))
    return leaders


def test_leader_killed_repeatedly_loses_no_acknowledged_message(cluster):
    topic = "failover"
    _create(cluster, topic, 2)
    producer = _SteadyProducer(cluster.bootstrap, topic, 2)
    producer.start()
    moves = []
    try:
        for _ in range(3):
            wait_until(lambda: sum(map(len, producer.acked.values())) > 200, message="acknowledged writes")
            before = _state(cluster, topic, 0)
            victim = cluster.brokers[before.leader]
            acked_before = sum(map(len, producer.acked.values()))
            killed = time.monotonic()
            victim.kill()  # SIGKILL
            wait_until(lambda: _state(cluster, topic, 0).leader not in (-1, before.leader), interval=0.05,
                       timeout=SESSION_TIMEOUT_MS / 1000 + 5, message="a new leader for partition 0")
            moves.append(time.monotonic() - killed)
            survivor = next(b for b in cluster.brokers.values() if b.running)
            wait_until(lambda: _kcat_leaders(survivor.bootstrap, topic).get(0) == _state(cluster, topic, 0).leader,
                       message="kcat -L showing the new leader")
            wait_until(lambda: sum(map(len, producer.acked.values())) > acked_before + 200, timeout=30,
                       message="writes acknowledged by the new leader")
            victim.start()
            victim_id = next(i for i, b in cluster.brokers.items() if b is victim)
            wait_until(lambda: all(victim_id in _state(cluster, topic, p).isr for p in range(2)), timeout=30,
                       message=f"broker {victim_id} back in the ISR")
            for p in range(2):  # the rejoined broker caught up: it is in the ISR on the leader's word
                assert sorted(_state(cluster, topic, p).isr) == [1, 2, 3]
    finally:
        producer.finish()
    assert producer.failed == []
    assert all(move < SESSION_TIMEOUT_MS / 1000 + 3 for move in moves), moves
    acked = {p: sorted(v) for p, v in producer.acked.items()}
    total = sum(map(len, acked.values()))
    got = _consume_all(cluster.bootstrap, topic, 2, total, timeout=90)
    for p in range(2):
        offsets = [o for o, _ in got[p]]
        values = [int(v) for _, v in got[p]]
        assert offsets == sorted(set(offsets)), f"partition {p}: offsets repeat or go back"
        assert len(values) == len(set(values)), f"partition {p}: a message appears twice"
        assert values == sorted(values), f"partition {p}: out of order"
        assert set(acked[p]) <= set(values), f"partition {p}: {len(set(acked[p]) - set(values))} acknowledged lost"
        assert values == acked[p], f"partition {p}: every message was acknowledged (none failed), so exactly these"


def test_stopped_follower_leaves_the_isr_and_acks_all_obeys_min_insync(cluster):
    topic = "sigstop"
    _create(cluster, topic, 1)
    state = _state(cluster, topic, 0)
    leader = state.leader
    followers = [r for r in state.isr if r != leader]
    strict = {"bootstrap.servers": cluster.brokers[leader].bootstrap, "acks": "all", "retries": 0,
              "enable.idempotence": False, "message.timeout.ms": 10000}

    def produce_one(value: bytes):
        results = []
        p = Producer(strict)
        p.produce(topic, value=value, partition=0, on_delivery=lambda err, msg: results.append(err))
        p.flush(20)
        assert results, "no delivery report"
        return results[0]

    assert produce_one(b"before") is None
    stopped = []
    try:
        os.kill(cluster.brokers[followers[0]].proc.pid, signal.SIGSTOP)
        stopped.append(followers[0])
        t0 = time.monotonic()
        wait_until(lambda: followers[0] not in _state(cluster, topic, 0).isr, timeout=LAG_MS / 1000 + 3,
                   interval=0.05, message=f"broker {followers[0]} out of the ISR")
        assert time.monotonic() - t0 < SESSION_TIMEOUT_MS / 1000, "left the ISR only by losing its session"
        assert produce_one(b"two-in-sync") is None  # ISR 2 >= min.insync.replicas 2
        os.kill(cluster.brokers[followers[1]].proc.pid, signal.SIGSTOP)
        stopped.append(followers[1])
        wait_until(lambda: _state(cluster, topic, 0).isr == [leader], timeout=LAG_MS / 1000 + 3, interval=0.05,
                   message="an ISR of the leader alone")
        err = produce_one(b"refused")
        assert err is not None and err.code() == KafkaError.NOT_ENOUGH_REPLICAS, err
    finally:
        for broker_id in stopped:
            os.kill(cluster.brokers[broker_id].proc.pid, signal.SIGCONT)
    wait_until(lambda: sorted(_state(cluster, topic, 0).isr) == [1, 2, 3], timeout=SESSION_TIMEOUT_MS / 1000 + 20,
               message="both followers back in the ISR")
    wait_until(lambda: all(cluster.store.exists(BrokerIdZNode.path(i)) for i in (1, 2, 3)),
               message="every broker registered")
    assert produce_one(b"after") is None
    got = _consume_all(cluster.brokers[leader].bootstrap, topic, 1, 3)
    assert [v for _, v in got[0]] == [b"before", b"two-in-sync", b"after"]


def test_controller_failover_while_topics_come_and_go(cluster):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("doomed", num_partitions=2, replication_factor=3)])["doomed"].result(15)
    wait_until(lambda: all(layout.get_partition_state(cluster.store, "doomed", p) for p in range(2)),
               message="doomed's states")
    old = layout.get_controller_id(cluster.store)
    cluster.brokers[old].kill()
    survivor = next(b for i, b in cluster.brokers.items() if i != old)
    # librdkafka learns a new controller only from a Metadata refresh: ask for one every second
    admin = AdminClient({"bootstrap.servers": survivor.bootstrap, "topic.metadata.refresh.interval.ms": 1000})
    # Sent while the dead controller's session still lives: clients address admin requests to the
    # controller, so they complete once a new one is known.
    born = admin.create_topics([NewTopic("born", num_partitions=3, replication_factor=2)],
                               request_timeout=40)["born"]
    doomed = admin.delete_topics(["doomed"], request_timeout=40)["doomed"]
    new = wait_until(lambda: (c := layout.get_controller_id(cluster.store)) not in (None, old) and c,
                     timeout=SESSION_TIMEOUT_MS / 1000 + 5, message="a new controller")
    born.result(45)
    doomed.result(45)
    wait_until(lambda: all((s := layout.get_partition_state(cluster.store, "born", p)) and s[0].leader in
                           cluster.brokers and s[0].leader != old for p in range(3)), message="born's leaders")
    wait_until(lambda: cluster.store.exists("/brokers/topics/doomed") is None
               and cluster.store.exists("/admin/delete_topics/doomed") is None, message="doomed deleted")
    producer = Producer({"bootstrap.servers": survivor.bootstrap, "acks": "all"})
    for p in range(3):
        producer.produce("born", value=b"x", partition=p)
    assert producer.flush(30) == 0
    assert new != old
    cluster.brokers[old].start()
    wait_until(lambda: all(sorted(_state(cluster, "born", p).isr) == sorted(
        layout.get_topic_assignment(cluster.store, "born").partitions[p]) for p in range(3)),
        timeout=30, message="born fully in sync after the old controller returned")


def test_committed_offsets_survive_the_coordinators_death(cluster):
    """__consumer_offsets has 3 replicas: a commit is acknowledged once the ISR has it, and the
    broker that leads the group's partition next loads it and answers for the group."""
    topic = "progress"
    _create(cluster, topic, 2, min_isr=1)
    group = "survivors"
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, 17), TopicPartition(topic, 1, 23)], asynchronous=False)
    finally:
        consumer.close()
    coordinator_partition = partition_for(group, 3)
    old = _state(cluster, "__consumer_offsets", coordinator_partition).leader
    cluster.brokers[old].kill()
    wait_until(lambda: _state(cluster, "__consumer_offsets", coordinator_partition).leader not in (-1, old),
               timeout=SESSION_TIMEOUT_MS / 1000 + 5, message="a new leader of the group's offsets partition")
    reader = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "enable.auto.commit": False,
                       "topic.metadata.refresh.interval.ms": 1000})
    try:
        committed = reader.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)], timeout=30)
        assert [(tp.partition, tp.offset) for tp in committed] == [(0, 17), (1, 23)]
    finally:
        reader.close()
    cluster.brokers[old].start()


def test_controlled_shutdown_hands_leadership_over_without_losing_writes(cluster):
    topic = "handover"
    _create(cluster, topic, 2)
    producer = _SteadyProducer(cluster.bootstrap, topic, 2)
    producer.start()
    try:
        for _ in range(2):
            wait_until(lambda: sum(map(len, producer.acked.values())) > 200, message="acknowledged writes")
            victim_id = _state(cluster, topic, 0).leader
            victim = cluster.brokers[victim_id]
            before = sum(map(len, producer.acked.values()))
            handed_over = victim.log().count("controlled shutdown complete")
            victim.stop_cleanly()
            assert victim.log().count("controlled shutdown complete") == handed_over + 1
            state = _state(cluster, topic, 0)
            assert state.leader not in (-1, victim_id) and victim_id not in state.isr
            wait_until(lambda: sum(map(len, producer.acked.values())) > before + 200, timeout=30,
                       message="writes acknowledged by the new leader")
            victim.start()
            wait_until(lambda: all(victim_id in _state(cluster, topic, p).isr for p in range(2)), timeout=30,
                       message=f"broker {victim_id} back in the ISR")
    finally:
        producer.finish()
    assert producer.failed == []
    acked = {p: sorted(v) for p, v in producer.acked.items()}
    got = _consume_all(cluster.bootstrap, topic, 2, sum(map(len, acked.values())), timeout=90)
    for p in range(2):
        assert [int(v) for _, v in got[p]] == acked[p]


def test_controlled_shutdown_request_to_a_non_controller_is_refused(cluster):
    import asyncio

    from kbroker.interbroker.client import BrokerConnection
    controller = layout.get_controller_id(cluster.store)
    other = cluster.brokers[next(i for i in cluster.brokers if i != controller)]

    async def ask():
        conn = BrokerConnection(other.host, other.port, "test", 10)
        try:
            return await conn.request(7, 3, {"broker_id": 1, "broker_epoch": -1})
        finally:
            conn.close()
    response = asyncio.run(ask())
    assert response.error_code == KafkaError.NOT_CONTROLLER


def test_preferred_replica_election_through_zookeeper(cluster):
    """kafka-preferred-replica-election.sh --zookeeper wrote /admin/preferred_replica_election:
    the controller moves each listed partition back to its first replica (if alive and in the
    ISR) and deletes the request."""
    from zk_compat.znodes import PreferredReplicaElectionZNode
    topic = "preferred"
    _create(cluster, topic, 1)
    preferred = layout.get_topic_assignment(cluster.store, topic).partitions[0][0]
    assert _state(cluster, topic, 0).leader == preferred
    cluster.brokers[preferred].stop_cleanly()  # controlled shutdown hands the leadership over
    assert _state(cluster, topic, 0).leader != preferred
    cluster.brokers[preferred].start()
    wait_until(lambda: preferred in _state(cluster, topic, 0).isr, timeout=30, message="the preferred replica in sync")
    assert _state(cluster, topic, 0).leader != preferred
    epoch = _state(cluster, topic, 0).leader_epoch
    cluster.store.create(PreferredReplicaElectionZNode.path(), PreferredReplicaElectionZNode.encode([(topic, 0)]))
    wait_until(lambda: _state(cluster, topic, 0).leader == preferred, message="the preferred replica leading again")
    assert _state(cluster, topic, 0).leader_epoch == epoch + 1
    wait_until(lambda: cluster.store.exists(PreferredReplicaElectionZNode.path()) is None,
               message="the election request deleted")


def test_topics_describe_shows_replicas_and_isr(cluster):
    import sys
    topic = "described"
    _create(cluster, topic, 2)
    out = subprocess.run([sys.executable, "-m", "kbroker.cli", "topics", "--bootstrap-server", cluster.bootstrap,
                          "--describe", "--topic", topic],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    lines = out.strip().splitlines()
    assert lines[0].startswith(f"Topic: {topic}\t") and "ReplicationFactor: 3" in lines[0]
    for p, line in enumerate(lines[1:]):
        state = _state(cluster, topic, p)
        replicas = layout.get_topic_assignment(cluster.store, topic).partitions[p]
        assert line == (f"\tTopic: {topic}\tPartition: {p}\tLeader: {state.leader}\tReplicas: "
                        f"{','.join(map(str, replicas))}\tIsr: {','.join(map(str, state.isr))}")
    assert len(lines) == 3


def test_topic_config_change_reaches_every_broker(cluster):
    """AlterConfigs on one broker writes /config/topics/<t> and a /config/changes notice; every
    other broker reads the new configs (Kafka's ZkConfigManager) and its logs use them."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    from kbroker.tools.client import AdminClient as ToolsAdmin
    topic = "reconfigured"
    _create(cluster, topic, 1)
    first = next(iter(cluster.brokers.values()))
    admin = AdminClient({"bootstrap.servers": first.bootstrap})
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", "123456", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(15)

    def seen_by(broker) -> str | None:
        with ToolsAdmin(broker.bootstrap) as tools:
            configs = tools.describe_topic_configs([topic])[topic].configs
        return next((c.value for c in configs if c.name == "retention.ms"), None)
    for broker in cluster.brokers.values():
        wait_until(lambda: seen_by(broker) == "123456", message=f"broker {broker.port} seeing retention.ms")


def test_requests_of_an_older_controller_are_refused(cluster):
    """LeaderAndIsr, StopReplica and UpdateMetadata carry the controller epoch; a broker refuses
    one older than the newest it heard from (STALE_CONTROLLER_EPOCH) and changes nothing."""
    import asyncio

    from kbroker.interbroker.client import BrokerConnection
    topic = "fenced"
    _create(cluster, topic, 1)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    producer.produce(topic, value=b"led", partition=0)  # the brokers have their roles by now
    assert producer.flush(30) == 0
    epoch = layout.get_controller_epoch(cluster.store)[0]
    state = _state(cluster, topic, 0)
    target = cluster.brokers[state.leader]
    old = {"controller_id": 99, "controller_epoch": epoch - 1, "broker_epoch": -1}

    async def ask():
        conn = BrokerConnection(target.host, target.port, "test", 10)
        try:
            lai = await conn.request(4, 4, {**old, "topic_states": [{"topic_name": topic, "partition_states": [{
                "partition_index": 0, "controller_epoch": epoch - 1, "leader": -1, "leader_epoch": 99,
                "isr": [], "zk_version": 1 << 30, "replicas": [1, 2, 3], "adding_replicas": [],
                "removing_replicas": [], "is_new": False}]}], "live_leaders": []})
            stop = await conn.request(5, 2, {**old, "delete_partitions": True,
                                             "topics": [{"name": topic, "partition_indexes": [0]}]})
            um = await conn.request(6, 6, {**old, "topic_states": [], "live_brokers": []})
            return lai.error_code, stop.error_code, um.error_code
        finally:
            conn.close()
    assert asyncio.run(ask()) == (11, 11, 11)  # STALE_CONTROLLER_EPOCH
    assert (target.dirs / f"{topic}-0").is_dir()
    producer.produce(topic, value=b"still led", partition=0)
    assert producer.flush(30) == 0
    assert _state(cluster, topic, 0).leader == state.leader


def test_controller_and_topic_znodes_in_kafkas_json(cluster):
    import json
    import re
    raw, stat = cluster.store.get("/controller")
    controller = json.loads(raw)
    assert list(controller) == ["version", "brokerid", "timestamp"]
    assert controller["version"] == 1 and controller["brokerid"] in cluster.brokers
    assert isinstance(controller["timestamp"], str) and controller["timestamp"].isdigit()
    assert stat.ephemeral_owner != 0
    epoch_raw, _ = cluster.store.get("/controller_epoch")
    assert epoch_raw.decode().isdigit()
    topic = "json-shape"
    _create(cluster, topic, 2)
    raw, _ = cluster.store.get(f"/brokers/topics/{topic}")
    assignment = json.loads(raw)
    # Kafka serialises a Scala Map: the keys come in the JVM's hash order, which the encoder reproduces
    assert raw == TopicZNode.encode(TopicZNode.decode(topic, raw))
    assert list(assignment) == ["partitions", "topic_id", "adding_replicas", "removing_replicas", "version"]
    assert assignment["version"] == 3 and assignment["adding_replicas"] == {} == assignment["removing_replicas"]
    assert sorted(assignment["partitions"]) == ["0", "1"]
    assert all(sorted(r) == [1, 2, 3] for r in assignment["partitions"].values())
    assert re.fullmatch(r"[A-Za-z0-9_-]{22}", assignment["topic_id"])
    for p in range(2):
        raw, _ = cluster.store.get(f"/brokers/topics/{topic}/partitions/{p}/state")
        state = json.loads(raw)
        assert sorted(state) == ["controller_epoch", "isr", "leader", "leader_epoch", "version"]
        assert state["version"] == 1 and state["leader"] == assignment["partitions"][str(p)][0]
        assert sorted(state["isr"]) == [1, 2, 3] and state["controller_epoch"] == int(epoch_raw)


def test_transactions_across_three_brokers(cluster):
    """__transaction_state replicated 3 ways (min ISR 2); the coordinator sends the markers to the
    leaders of the transaction's partitions on the other brokers over WriteTxnMarkers."""
    topic = "txn-cluster"
    _create(cluster, topic, 3)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": "cluster-tx"})
    producer.init_transactions(60)
    producer.begin_transaction()
    for p in range(3):
        producer.produce(topic, value=b"kept-%d" % p, partition=p)
    producer.commit_transaction(60)
    producer.begin_transaction()
    for p in range(3):
        producer.produce(topic, value=b"dropped-%d" % p, partition=p)
    producer.flush(30)
    producer.abort_transaction(60)
    state = layout.get_topic_assignment(cluster.store, "__transaction_state")
    assert state is not None and all(len(r) == 3 for r in state.partitions.values())
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "txn-cluster-reader",
                         "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    got = []
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(3)])
        deadline = time.monotonic() + 20
        while len(got) < 3 and time.monotonic() < deadline:
            got += [m.value() for m in consumer.consume(10, timeout=0.5) if not m.error()]
        got += [m.value() for m in consumer.consume(10, timeout=2) if not m.error()]
    finally:
        consumer.close()
    assert sorted(got) == [b"kept-0", b"kept-1", b"kept-2"]
